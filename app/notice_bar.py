"""A bar over the top of the chat for errors and notices: what happened, what to do, and a button to do it.

It floats over the chat rather than taking a row of the layout: a notice coming or going once pushed the
chat, the legend and the input down and back up (the layout jumped)."""
from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from app.core.errors import Action, Level, Notice
from app.core.theme import OKABE_ITO

_ACTION_LABELS = {Action.OPEN_MODELS: "Open Models…", Action.NEW_CHAT: "New chat", Action.SETTINGS: "Settings…"}
_LEVEL_COLOURS = {Level.INFO: OKABE_ITO["sky_blue"], Level.WARNING: OKABE_ITO["orange"],
                  Level.ERROR: OKABE_ITO["vermillion"]}
_LEVEL_WORDS = {Level.INFO: "Note", Level.WARNING: "Warning", Level.ERROR: "Problem"}


class NoticeBar(QFrame):
    """Hidden until `show_notice`; the newest notice replaces the previous one."""

    sig_action = Signal(object)
    """The notice's button was pressed (Action)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("notice_bar")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 6, 6)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setObjectName("notice_text")
        self.action_button = QPushButton()
        self.close_button = QPushButton("✕")
        self.close_button.setFlat(True)
        self.close_button.setFixedWidth(28)
        self.close_button.setToolTip("Dismiss")
        self.close_button.setAccessibleName("Dismiss the notice")
        lay.addWidget(self.label, 1)
        lay.addWidget(self.action_button)
        lay.addWidget(self.close_button)
        self.close_button.clicked.connect(self.hide)
        self.action_button.clicked.connect(self._act)
        self.notice: Notice | None = None
        self._under: list[QWidget] = []
        self.hide()

    def float_over(self, widgets: list[QWidget]) -> None:
        """Float over the top edge of whichever of `widgets` is shown (siblings in this bar's parent)."""
        self._under = list(widgets)
        for w in widgets:
            w.installEventFilter(self)
        self._place()

    def eventFilter(self, obj: QObject, e: QEvent) -> bool:
        if e.type() in (QEvent.Type.Resize, QEvent.Type.Move, QEvent.Type.Show):
            self._place()
        return super().eventFilter(obj, e)

    def _place(self) -> None:
        under = next((w for w in self._under if w.isVisible()), None)
        if under is None:
            return
        g = under.geometry()
        height = self.heightForWidth(g.width()) if self.hasHeightForWidth() else self.sizeHint().height()
        self.setGeometry(g.x(), g.y(), g.width(), max(height, self.minimumSizeHint().height()))
        self.raise_()

    def show_notice(self, notice: Notice) -> None:
        self.notice = notice
        colour = _LEVEL_COLOURS[notice.level]
        self.setStyleSheet(f"#notice_bar {{ border: 1px solid {colour}; border-left: 6px solid {colour}; "
                           "border-radius: 3px; background-color: palette(window); }")
        lines = html.escape(notice.text).replace("\n", "<br>")  # a list of refused files, one a line
        self.label.setText(f"<b>{_LEVEL_WORDS[notice.level]}:</b> {lines}")
        label = _ACTION_LABELS.get(notice.action)
        self.action_button.setVisible(label is not None)
        if label:
            self.action_button.setText(label)
            self.action_button.setAccessibleName(label)
        self.show()
        self._place()

    def text(self) -> str:
        return self.notice.text if self.notice and self.isVisible() else ""

    def _act(self) -> None:
        if self.notice is not None:
            self.sig_action.emit(self.notice.action)
            self.hide()
