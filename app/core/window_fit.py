"""Dialogs no larger than the window they belong to: at 800 px a 1000 px Compare spilled past the window's edges."""
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
