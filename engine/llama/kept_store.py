"""A small JSON file of entries kept between launches (a cache: nothing in it is the person's), read and
written whole: the calibration's measurements and the AMX checks' verdicts."""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def read(path: Path) -> dict[str, Any]:
    """The entries, or none where the file is missing or damaged (what they held is measured again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def put(path: Path, key: str, entry: dict[str, Any], max_entries: int) -> None:
    """Add or replace `key` (stamped 'saved'), keep the newest `max_entries`, and write the file atomically.
    Never raises: a read-only cache only costs a measurement at the next launch."""
    data = read(path)
    data[key] = {**entry, "saved": time.time()}
    if len(data) > max_entries:
        oldest = sorted(data, key=lambda k: data[k].get("saved", 0) if isinstance(data[k], dict) else 0)
        for k in oldest[: len(data) - max_entries]:
            del data[k]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
