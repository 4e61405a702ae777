"""One QAction per command: its words, its shortcut (the platform's standard one where Qt has one), and
a tooltip that names the shortcut, so the menu, the toolbar, the tooltip and the key never disagree."""
from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QKeySequence

StandardKey = QKeySequence.StandardKey


def key_sequences(standard: StandardKey | None = None, *fallback: str) -> list[QKeySequence]:
    """The platform's bindings for `standard`, or `fallback` where the platform has none (Qt gives none
    for Quit or Preferences on some Linux desktops and under the offscreen platform)."""
    keys = QKeySequence.keyBindings(standard) if standard is not None else []
    return list(keys) or [QKeySequence(k) for k in fallback]


def shortcut_text(action: QAction) -> str:
    """The action's first shortcut as this platform writes it ('Ctrl+N', '⌘N'), or ''."""
    keys = action.shortcuts()
    return keys[0].toString(QKeySequence.SequenceFormat.NativeText) if keys else ""


def command(parent: QObject, text: str, tip: str = "", keys: list[QKeySequence] | None = None,
            checkable: bool = False, name: str = "") -> QAction:
    """A command as a QAction: `text` (with its '&' mnemonic) in menus and on buttons, `tip` in the tooltip
    and the status bar with the shortcut added."""
    action = QAction(text, parent)
    action.setCheckable(checkable)
    if name:
        action.setObjectName(name)
    if keys:
        action.setShortcuts(keys)
    describe(action, tip)
    return action


def describe(action: QAction, tip: str = "") -> None:
    """Tooltip and status tip: what it does, then its shortcut in brackets."""
    words = tip or plain_text(action)
    key = shortcut_text(action)
    action.setToolTip(f"{words} ({key})" if key else words)
    action.setStatusTip(words)


def plain_text(action: QAction) -> str:
    """The action's text without its mnemonic marker or trailing ellipsis ('&Models…' -> 'Models')."""
    return action.text().replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…").strip()
