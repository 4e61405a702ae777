"""Help ▸ Keyboard shortcuts: every command of the menu bar with its keys, read from the actions themselves,
and the keys that belong to one place (the message box, the chat, the find bar)."""
from __future__ import annotations

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QMenu, QMenuBar, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget

from app.core.commands import plain_text

#: Keys that act in one widget only, so no menu command carries them.
LOCAL_KEYS = (
    ("In the message box", (("Send", "Enter"), ("New line", "Shift+Enter"), ("Cancel an edit", "Esc"))),
    ("In the chat", (("Previous / next message", "Ctrl+Up / Ctrl+Down"),
                     ("Next / previous link of a message", "Tab / Shift+Tab"), ("Open the link", "Enter"),
                     ("Move the text cursor by token", "Arrow keys"), ("The message's actions", "Menu key"))),
    ("In the find bar", (("Next / previous match", "Enter / Shift+Enter"), ("Close", "Esc"))),
    ("In the chat list", (("Open a chat", "Up / Down"), ("Go on with it in the message box", "Enter"),
                          ("Rename", "F2"), ("Delete", "Delete"), ("From the search field to the list", "Down"))),
)


def _keys(action) -> str:
    """The action's main keys, as its menu shows them (the platform may add others: a keyboard's Copy key)."""
    return action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)


class ShortcutsDialog(QDialog):
    def __init__(self, menu_bar: QMenuBar, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        self.resize(560, 620)
        lay = QVBoxLayout(self)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Command", "Keys"])
        self.tree.setAccessibleName("Commands and their keys")
        self.tree.setRootIsDecorated(False)
        self.tree.setAlternatingRowColors(True)
        for menu_action in menu_bar.actions():
            self._add_menu(plain_text(menu_action), menu_action.menu())
        for title, rows in LOCAL_KEYS:
            group = QTreeWidgetItem(self.tree, [title, ""])
            for words, keys in rows:
                QTreeWidgetItem(group, [words, keys])
        self.tree.expandAll()
        self.tree.resizeColumnToContents(0)
        lay.addWidget(self.tree)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.button(QDialogButtonBox.StandardButton.Close).setAccessibleName("Close")
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.tree.setFocus()

    def _add_menu(self, title: str, menu: QMenu | None, parent: QTreeWidgetItem | None = None) -> None:
        if menu is None:
            return
        group = QTreeWidgetItem(parent or self.tree, [title, ""])
        for act in menu.actions():
            if act.isSeparator():
                continue
            if act.menu() is not None:
                self._add_menu(f"{title} ▸ {plain_text(act)}", act.menu(), None)
                continue
            QTreeWidgetItem(group, [plain_text(act), _keys(act)])

    def rows(self) -> list[tuple[str, str, str]]:
        """(group, command, keys) for every row (for tests)."""
        out = []
        for i in range(self.tree.topLevelItemCount()):
            group = self.tree.topLevelItem(i)
            for j in range(group.childCount()):
                item = group.child(j)
                out.append((group.text(0), item.text(0), item.text(1)))
        return out
