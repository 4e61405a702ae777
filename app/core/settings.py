"""The person's choices, kept as JSON in the config folder and written atomically.

A damaged settings file is renamed aside (with a timestamp) and replaced by defaults; the
window says so. Unknown keys are ignored and bad values fall back to their default one by one,
so a file written by another version still loads.
"""
from __future__ import annotations

import base64
import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from engine import paths
from engine.drafting.draft_choice import AUTO_TEXT, DraftLength, DraftSpec

from app.core.files import set_aside
from app.core.theme import Theme

FILE_NAME = "settings.json"
AUTO = DraftLength.AUTO
"""Draft length chosen by measured costs (engine.drafting.draft_choice.DraftLength.AUTO)."""
# The most a person may pick in the app (the engine takes more: the command line allows 64).
MAX_DRAFT_LENGTH = 16


@dataclass(frozen=True, slots=True)
class AppSettings:
    """Everything the app remembers between runs."""

    target: str = ""
    """Path of the target model (empty: none chosen yet)."""
    drafter: DraftSpec = DraftSpec.LOOKUP
    """None, prompt lookup, a drafter model, or both (lookup first, then the model); stored as
    'none', 'lookup', 'PATH' or 'lookup+PATH'. A pair starts as lookup + its model: with Auto that is the
    fastest measured mode on a CPU (lookup where the reply copies, the model where it pays, else plain
    decoding), and model drafting wins on GPUs and Apple silicon, lookup adding on top."""
    drafter_chosen: bool = False
    """The person picked the drafter; until then the pair starts as prompt lookup + its drafter model."""
    draft_max: DraftLength = AUTO
    """Draft length 1-16, or Auto; stored as the number or 'auto'."""
    temperature: float = 0.0
    """0 = greedy."""
    top_k: int = 40
    """Keep the k most likely tokens (0 = all)."""
    top_p: float = 0.95
    """Nucleus sampling mass."""
    min_p: float = 0.05
    """Drop tokens below min_p times the top probability."""
    seed: int | None = None
    """Random seed (None = fresh)."""
    max_tokens: int = 512
    """Longest reply."""
    system_prompt: str = ""
    """Sent first in every conversation (empty: none)."""
    n_ctx: int = 4096
    """Context length in tokens."""
    n_gpu_layers: int = -1
    """Layers offloaded to a GPU (-1 = all, 0 = none)."""
    n_threads: int | None = None
    """CPU threads (None = all cores)."""
    theme: Theme = Theme.SYSTEM
    """Light, dark, or follow the system."""
    highlight: bool = True
    """Colour tokens by source."""
    show_rejected: bool = False
    """Show rejected draft tokens, struck through, before their correction."""
    first_run_done: bool = False
    """The first-run offer of the default pair was shown."""
    window_geometry: str = ""
    """The main window's place and size (QWidget.saveGeometry, base64; empty: the default)."""
    window_splitter: str = ""
    """Widths of the chat list, chat and stats panes (QSplitter.saveState, base64; empty: the default)."""
    stats_folded: bool = False
    """The statistics pane is folded to a strip beside the chat."""
    chat_list_shown: bool = True
    """The list of chats is shown at the window's left."""
    history_drafts: bool = False
    """Prompt lookup also drafts from an index of past conversations (opt-in: it stores their token n-grams)."""
    history_cap_mb: int = 64
    """Most megabytes that index may hold, in memory and on disk."""
    server_port: int = 8080
    """The local server's port (Models ▸ Local server; the server itself is off at every launch)."""
    server_key: str = ""
    """The API key its clients must send ("" : none asked for)."""
    notes_seen: tuple[str, ...] = ()
    """Notes about a pair already shown over the chat (a copy made for this CPU, a missing chat template): each
    comes once, not at every launch; the status line keeps saying it. The last NOTES_KEPT."""

    def __post_init__(self) -> None:
        # Kinds are types whoever builds the settings (the file, a widget, a test): text is parsed once, here.
        for name, parse in _PARSERS.items():
            v = getattr(self, name)
            typed = parse(v)
            if typed is None:
                raise ValueError(f"{v!r} is not a valid value for the setting {name!r}")
            if typed is not v:
                object.__setattr__(self, name, typed)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(theme=self.theme.value, drafter=self.drafter.text, draft_max=self.draft_max.to_json())
        return d

    def recorded(self) -> dict[str, Any]:
        """What a reply records of the settings it was made with: the app's memory of notes is not one of them."""
        d = self.to_json()
        del d["notes_seen"]
        return d


def _is_base64(v: Any) -> bool:
    try:
        return isinstance(v, str) and (not v or bool(base64.b64decode(v, validate=True)))
    except ValueError:
        return False


def _theme(v: Any) -> Theme | None:
    try:
        return Theme(v)
    except ValueError:
        return None


def _draft_length(v: Any) -> DraftLength | None:
    """'auto' or a whole number 1-16 (as the file holds it, or a DraftLength from a widget); None otherwise."""
    if isinstance(v, bool) or not (isinstance(v, (DraftLength, int)) or v == AUTO_TEXT):
        return None  # digits in a string were never written: the file holds a number
    try:
        length = DraftLength.parse(v)
    except ValueError:
        return None
    return length if length.is_auto or 1 <= length.k <= MAX_DRAFT_LENGTH else None


def _drafter(v: Any) -> DraftSpec | None:
    return DraftSpec.parse(v) if isinstance(v, (DraftSpec, str)) else None


#: Notes about pairs remembered as seen (settings.notes_seen): a few pairs' worth.
NOTES_KEPT = 32


def _notes(v: Any) -> tuple[str, ...] | None:
    """A list of texts (the file's JSON list, or a tuple), the last NOTES_KEPT; None for anything else."""
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        return None
    return tuple(v[-NOTES_KEPT:])


# The settings that hold a kind: the parser from the stored text (or the type itself) to that kind,
# None where a value cannot be one.
_PARSERS = {"theme": _theme, "draft_max": _draft_length, "drafter": _drafter, "notes_seen": _notes}

N_CTX_RANGE = (256, 262_144)
"""Context lengths a person can choose (the Models dialog's range); settings.json may hold no other."""

_CHECKS = {
    "temperature": lambda v: isinstance(v, (int, float)) and 0 <= v <= 5,
    "top_k": lambda v: isinstance(v, int) and v >= 0,
    "top_p": lambda v: isinstance(v, (int, float)) and 0 < v <= 1,
    "min_p": lambda v: isinstance(v, (int, float)) and 0 <= v < 1,
    # llama.cpp and numpy take seeds of 0 .. 2**32-1: a negative one would break every reply.
    "seed": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32),
    "max_tokens": lambda v: isinstance(v, int) and 1 <= v <= 1_000_000,
    # 0 is llama.cpp's "the model's own" (32k for the default pair, 4x the memory): only the sizes the Models
    # dialog offers are read.
    "n_ctx": lambda v: isinstance(v, int) and not isinstance(v, bool) and N_CTX_RANGE[0] <= v <= N_CTX_RANGE[1],
    "n_gpu_layers": lambda v: isinstance(v, int) and v >= -1,
    "n_threads": lambda v: v is None or (isinstance(v, int) and v >= 1),
    "history_cap_mb": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 4096,
    "server_port": lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65535,
    "window_geometry": _is_base64,
    "window_splitter": _is_base64,
}


_BAD = object()


def _typed(name: str, v: Any, default: Any) -> Any:
    """`v` as the type the setting holds, or _BAD: JSON and Qt widgets both hand over plain
    values (a combo box's item data comes back as `str`, not as the enum that was put in)."""
    parse = _PARSERS.get(name)
    if parse is not None:
        typed = parse(v)
        return _BAD if typed is None else typed
    check = _CHECKS.get(name)
    if check is not None:
        if not check(v):
            return _BAD
        return float(v) if isinstance(default, float) else v
    if isinstance(default, bool):
        return v if isinstance(v, bool) else _BAD
    if isinstance(default, str):
        return v if isinstance(v, str) else _BAD
    return v


def settings_from_json(data: dict[str, Any]) -> AppSettings:
    """Settings as `AppSettings.to_json` wrote them, here or in another version: unknown keys are ignored and
    a bad value falls back to its default."""
    defaults = AppSettings()
    values: dict[str, Any] = {}
    for f in fields(AppSettings):
        if f.name in data:
            v = _typed(f.name, data[f.name], getattr(defaults, f.name))
            if v is not _BAD:
                values[f.name] = v
    return replace(defaults, **values)


def typed_changes(changes: dict[str, Any]) -> dict[str, Any]:
    """Changes from widgets, typed as AppSettings holds them; ValueError names one it cannot hold."""
    defaults = AppSettings()
    out: dict[str, Any] = {}
    for name, v in changes.items():
        if not hasattr(defaults, name):
            raise ValueError(f"there is no setting named {name!r}")
        typed = _typed(name, v, getattr(defaults, name))
        if typed is _BAD:
            raise ValueError(f"{v!r} is not a valid value for the setting {name!r}")
        out[name] = typed
    return out


def settings_path() -> Path:
    return paths.config_dir() / FILE_NAME


def load_settings(path: Path | None = None) -> tuple[AppSettings, str | None]:
    """The saved settings and, when the file was damaged, a message saying where it was moved."""
    path = path or settings_path()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return AppSettings(), None
    except OSError as exc:
        return AppSettings(), f"Could not read the settings ({exc.strerror}); using defaults."
    try:
        data = json.loads(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (ValueError, UnicodeDecodeError) as exc:
        try:
            moved = set_aside(path)
        except OSError:
            return AppSettings(), f"The settings file is damaged ({exc}) and could not be moved; using defaults."
        return AppSettings(), f"The settings file was damaged; it was kept as {moved.name} and defaults are in use."
    return settings_from_json(data), None


def save_settings(settings: AppSettings, path: Path | None = None) -> None:
    """Write atomically: a crash mid-write leaves the old file, never half a file."""
    path = path or settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".settings-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(settings.to_json(), fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
