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


#: Debian/Ubuntu package of each system library Qt's X11 (xcb) platform plugin loads; Fedora's names
#: are in the README. Others are named by Debian's rule (libNAME.so.N -> libNAMEN, libNAME-N after a digit).
_DEBIAN_PACKAGES = {
    "libEGL.so.1": "libegl1", "libGL.so.1": "libgl1", "libOpenGL.so.0": "libopengl0",
    "libfontconfig.so.1": "libfontconfig1", "libdbus-1.so.3": "libdbus-1-3", "libX11-xcb.so.1": "libx11-xcb1",
}


def debian_package(lib: str) -> str:
    """The Debian/Ubuntu package that ships a library soname (libxcb-icccm.so.4 -> libxcb-icccm4)."""
    if lib in _DEBIAN_PACKAGES:
        return _DEBIAN_PACKAGES[lib]
    stem, _, version = lib.partition(".so.")
    version = version.split(".")[0]
    if not version:
        return stem.lower()
    return f"{stem}-{version}".lower() if stem[-1:].isdigit() else f"{stem}{version}".lower()


def missing_in_ldd(output: str) -> list[str]:
    """Sonames that `ldd` reports as 'not found', in order, once each."""
    out: list[str] = []
    for line in output.splitlines():
        name, arrow, where = line.strip().partition("=>")
        if arrow and where.strip() == "not found" and name.strip() not in out:
            out.append(name.strip())
    return out


def missing_platform_libs() -> list[str]:
    """System libraries Qt's X11 platform plugin needs and cannot find (Linux; [] elsewhere or when ldd
    is not there). Without them Qt aborts the whole process with a hint that names only one of them."""
    import os
    import subprocess

    if not sys.platform.startswith("linux"):
        return []
    import PySide6

    plugin = os.path.join(os.path.dirname(PySide6.__file__), "Qt", "plugins", "platforms", "libqxcb.so")
    if not os.path.exists(plugin):
        return []
    try:
        out = subprocess.run(["ldd", plugin], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return missing_in_ldd(out)


def platform_problem() -> str | None:
    """One line naming the packages to install when the X11 platform plugin cannot load, else None."""
    import os

    platform = os.environ.get("QT_QPA_PLATFORM", "")
    if platform not in ("", "xcb") or not os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    missing = missing_platform_libs()
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(debian_package(m) for m in missing))
    return (f"Qt cannot open a window: these system libraries are missing: {', '.join(missing)}. On Debian or "
            f"Ubuntu: sudo apt-get install {packages} (the README lists Fedora's packages too).")
