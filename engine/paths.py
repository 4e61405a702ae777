"""Every place Draftlight writes, in one module (platformdirs; overridable for tests and users).

DRAFTLIGHT_HOME, when set, puts everything under one folder (data/, config/, cache/);
DRAFTLIGHT_MODELS moves only the model folder.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

APP = "Draftlight"


def _home() -> Path | None:
    home = os.environ.get("DRAFTLIGHT_HOME")
    return Path(home) if home else None


def data_dir() -> Path:
    home = _home()
    return home / "data" if home else Path(platformdirs.user_data_dir(APP, appauthor=False))


def config_dir() -> Path:
    home = _home()
    return home / "config" if home else Path(platformdirs.user_config_dir(APP, appauthor=False))


def cache_dir() -> Path:
    home = _home()
    return home / "cache" if home else Path(platformdirs.user_cache_dir(APP, appauthor=False))


def models_dir() -> Path:
    override = os.environ.get("DRAFTLIGHT_MODELS")
    return Path(override) if override else data_dir() / "models"


def installed_app() -> bool:
    """True in a PyInstaller bundle: there is no Python to add packages to or run commands with."""
    return bool(getattr(sys, "frozen", False))


def resources_dir() -> Path:
    """The repository's resources/ folder, or the bundle's copy when frozen by PyInstaller."""
    frozen = getattr(sys, "_MEIPASS", None)
    if frozen:
        return Path(frozen) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path
