"""Files the app keeps for the person: what happens to one found damaged (settings, the chat database)."""
from __future__ import annotations

import time
from pathlib import Path


def set_aside(path: Path) -> Path:
    """Rename a damaged file to NAME.damaged-YYYYmmdd-HHMMSS and return the new path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    dest = path.with_name(f"{path.name}.damaged-{stamp}")
    n = 1
    while dest.exists():
        dest = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
        n += 1
    path.rename(dest)
    return dest
