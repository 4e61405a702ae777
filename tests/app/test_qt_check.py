"""The app names the system packages Qt's X11 plugin is missing, instead of Qt's abort with one hint."""
from __future__ import annotations

from app.qt_check import debian_package, missing_in_ldd, missing_platform_libs

LDD = """\
	linux-vdso.so.1 (0x00007ffd)
	libQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f95)
	libxcb-icccm.so.4 => not found
	libxcb-keysyms.so.1 => not found
	libxkbcommon-x11.so.0 => not found
	libxcb-icccm.so.4 => not found
	libEGL.so.1 => not found
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f94)
"""


def test_missing_libraries_are_read_from_ldd_and_named_as_debian_packages():
    missing = missing_in_ldd(LDD)
    assert missing == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxkbcommon-x11.so.0", "libEGL.so.1"]
    assert [debian_package(m) for m in missing] == ["libxcb-icccm4", "libxcb-keysyms1", "libxkbcommon-x11-0", "libegl1"]
    assert debian_package("libxcb-cursor.so.0") == "libxcb-cursor0"


def test_on_this_machine_nothing_is_missing():
    assert missing_platform_libs() == []  # .ci/run installs what the README names
