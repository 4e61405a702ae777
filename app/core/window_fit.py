"""Windows that fit where they open: a dialog no larger than its window (at 800 px a 1000 px Compare
spilled past the window's edges), the main window no larger than its screen."""
from __future__ import annotations

from PySide6.QtWidgets import QWidget


def resize_within(dialog: QWidget, width: int, height: int) -> None:
    """`width` x `height`, or less to fit inside the dialog's parent window (and its screen)."""
    parent = dialog.parentWidget()
    limits = [(parent.window().width(), parent.window().height())] if parent is not None else []
    screen = (parent or dialog).screen()
    if screen is not None:
        room = screen.availableGeometry()
        limits.append((room.width(), room.height()))
    for w, h in limits:
        width, height = min(width, w), min(height, h)
    dialog.resize(width, height)


def fit_to_screen(window: QWidget) -> None:
    """Shrink and move `window` into its screen's free area. A size restored from a larger screen (or the
    1280x800 default on a small one) is not clamped by Qt on X11 without a window manager, so the window's
    edge, and its Send button, lay past the screen."""
    screen = window.screen()
    if screen is None:
        return
    room = screen.availableGeometry()
    width, height = min(window.width(), room.width()), min(window.height(), room.height())
    if (width, height) != (window.width(), window.height()):
        window.resize(width, height)
    x = min(max(window.x(), room.left()), room.left() + room.width() - width)
    y = min(max(window.y(), room.top()), room.top() + room.height() - height)
    if (x, y) != (window.x(), window.y()):
        window.move(x, y)
