"""Refuse to start on a Qt binding known to crash the app, with one line that says what to install."""
from __future__ import annotations

import sys

BAD_EMIT = (
    "PySide6 {version} has a reference-counting bug on Python {py} (each Signal.emit() drops a reference to "
    "True; the app would abort after a few hundred tokens). Install another version: "
    "pip install 'PySide6-Essentials>=6.7,!=6.12.0'"
)


def emit_bug() -> str | None:
    """The message for a broken Signal.emit(), or None when emitting is safe."""
    if sys.version_info >= (3, 12):
        return None  # True is immortal there: a lost reference does no harm
    import PySide6
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        ping = Signal()

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(4):
        probe.ping.emit()
    lost = before - sys.getrefcount(True)
    if lost >= 4:
        import ctypes

        for _ in range(lost):  # give back what the probe took
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(True))
        return BAD_EMIT.format(version=PySide6.__version__, py=f"{sys.version_info.major}.{sys.version_info.minor}")
    return None
