"""The left column: search, the conversations (newest first), new / rename / delete."""
from __future__ import annotations

import time

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.history.records import Conversation


class ConversationList(QWidget):
    """Shows conversations; editing them is the controller's job (it owns the store)."""

    sig_selected = Signal(int)
    """The person opened conversation `id`."""
    sig_new = Signal()
    """'New chat' was pressed."""
    sig_rename = Signal(int, str)
    """Conversation `id` should be called `title` (already confirmed in place)."""
    sig_delete = Signal(int)
    """Conversation `id` should be deleted (the controller asks first)."""
    sig_search = Signal(str)
    """The search text changed (debounced)."""
    sig_chosen = Signal(int)
    """Enter (or a double click) on conversation `id`: the person means to go on with it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.new_button = QPushButton("+ New chat")
        self.new_button.setObjectName("new_chat")
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats…")
        self.search.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setObjectName("conversations")
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.setEditTriggers(QListWidget.EditTrigger.EditKeyPressed)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        buttons = QHBoxLayout()
        self.rename_button = QPushButton("Rename")
        self.delete_button = QPushButton("Delete")
        buttons.addWidget(self.rename_button)
        buttons.addWidget(self.delete_button)
        lay.addWidget(self.new_button)
        lay.addWidget(self.search)
        lay.addWidget(self.list, 1)
        lay.addLayout(buttons)
        self._debounce = QTimer(self, singleShot=True, interval=200)
        self._debounce.timeout.connect(lambda: self.sig_search.emit(self.search.text().strip()))
        self.search.textChanged.connect(lambda _t: self._debounce.start())
        self.new_button.clicked.connect(self.sig_new)
        self.list.currentItemChanged.connect(self._current_changed)
        self.list.itemChanged.connect(self._item_edited)
        self.rename_button.clicked.connect(self.start_rename)
        self.delete_button.clicked.connect(self._delete_current)
        self.list.customContextMenuRequested.connect(self._context_menu)
        self.list.itemActivated.connect(lambda item: self.sig_chosen.emit(int(item.data(Qt.ItemDataRole.UserRole))))
        # Keys: Down from the search field goes into the list; Delete in the list deletes the chat (asks first).
        self.search.installEventFilter(self)
        self.list.installEventFilter(self)
        self._filling = False

    def eventFilter(self, obj: QObject, e: QEvent) -> bool:
        if e.type() == QEvent.Type.KeyPress and isinstance(e, QKeyEvent) and not e.modifiers():
            if obj is self.search and e.key() == Qt.Key.Key_Down and self.list.count():
                self.list.setFocus(Qt.FocusReason.TabFocusReason)
                if self.list.currentItem() is None:
                    self.list.setCurrentRow(0)
                return True
            if obj is self.list and e.key() == Qt.Key.Key_Delete and self.list.state() != self.list.State.EditingState:
                self._delete_current()
                return True
        return super().eventFilter(obj, e)

    def set_conversations(self, convs: list[Conversation], current: int | None) -> None:
        self._filling = True
        try:
            self.list.clear()
            for c in convs:
                item = QListWidgetItem(c.title)
                item.setData(Qt.ItemDataRole.UserRole, c.id)
                item.setToolTip(f"{c.title}\nlast changed {time.strftime('%Y-%m-%d %H:%M', time.localtime(c.updated))}")
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
                self.list.addItem(item)
                if c.id == current:
                    self.list.setCurrentItem(item)
        finally:
            self._filling = False
        has = self.list.count() > 0
        self.rename_button.setEnabled(has)
        self.delete_button.setEnabled(has)

    def current_id(self) -> int | None:
        item = self.list.currentItem()
        return int(item.data(Qt.ItemDataRole.UserRole)) if item else None

    def start_rename(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def _current_changed(self, item: QListWidgetItem | None, _prev) -> None:
        if item is not None and not self._filling:
            self.sig_selected.emit(int(item.data(Qt.ItemDataRole.UserRole)))

    def _item_edited(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        title = item.text().strip()
        if title:
            self.sig_rename.emit(int(item.data(Qt.ItemDataRole.UserRole)), title)

    def _delete_current(self) -> None:
        cid = self.current_id()
        if cid is not None:
            self.sig_delete.emit(cid)

    def _context_menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        self.list.setCurrentItem(item)
        menu = QMenu(self)
        menu.addAction("Rename", self.start_rename)
        menu.addAction("Delete", self._delete_current)
        menu.exec(self.list.mapToGlobal(pos))
