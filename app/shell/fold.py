"""A side pane that folds to a narrow strip and back: for the statistics beside the chat in a narrow window.

Folded, the pane is a strip with its name written upwards; a click on it (or the command that folds it)
opens it again at the width it had. The pane sits in a QSplitter, which gives the width to its neighbours.
"""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QAbstractButton,
    QSizePolicy,
    QSplitter,
    QStyle,
    QStyleOptionToolButton,
    QStylePainter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

STRIP = 26
"""Width of the folded strip."""
DEFAULT_WIDTH = 300
"""Width an unfolded pane gets when it never had one (it was folded at the last start)."""


class VerticalTab(QAbstractButton):
    """A button as tall as the pane, its text written bottom to top."""

    ARROW = "◂"
    """Drawn upright above the text: the pane opens to the left."""

    def sizeHint(self) -> QSize:
        fm = self.fontMetrics()
        return QSize(fm.height() + 10, fm.horizontalAdvance(self.text()) + 2 * fm.height() + 24)

    def minimumSizeHint(self) -> QSize:
        return QSize(self.sizeHint().width(), 40)

    def paintEvent(self, _e: QPaintEvent) -> None:
        p = QStylePainter(self)
        opt = QStyleOptionToolButton()
        opt.initFrom(self)
        opt.state |= QStyle.StateFlag.State_AutoRaise
        if self.isDown():
            opt.state |= QStyle.StateFlag.State_Sunken
        if self.underMouse() or self.isDown():
            p.drawPrimitive(QStyle.PrimitiveElement.PE_PanelButtonTool, opt)
        line = self.fontMetrics().height()
        p.drawText(0, 8, self.width(), line, int(Qt.AlignmentFlag.AlignCenter), self.ARROW)
        p.rotate(-90)  # the name reads bottom to top, under the arrow
        p.drawText(-self.height() + 12, 0, self.height() - 2 * line - 12, self.width(),
                   int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter), self.text())


class FoldingPane(QWidget):
    """`content`, or when folded a strip that says what is there; `set_folded` switches."""

    sig_fold_requested = Signal(bool)
    """The person clicked the strip (False: open it) or the fold button (True: fold it)."""

    def __init__(self, content: QWidget, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.content = content
        self.folded = False
        self._width = 0
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(content, 1)
        self.strip = VerticalTab(self)
        self.strip.setText(name)
        self.strip.setObjectName("fold_strip")
        self.strip.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # the View menu's command is the keyboard's way
        self.strip.setAccessibleName(f"Show the {name.lower()}")
        self.strip.setCursor(Qt.CursorShape.PointingHandCursor)
        self.strip.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Expanding)  # the pane's whole height
        lay.addWidget(self.strip, 1)
        self.strip.hide()
        self.fold_button = QToolButton(self)  # over the content's top right corner
        self.fold_button.setText("▸")
        self.fold_button.setObjectName("fold_button")
        self.fold_button.setAutoRaise(True)
        self.fold_button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.fold_button.setAccessibleName(f"Fold the {name.lower()}")
        self.strip.clicked.connect(lambda: self.sig_fold_requested.emit(False))
        self.fold_button.clicked.connect(lambda: self.sig_fold_requested.emit(True))

    def set_tips(self, fold: str, unfold: str) -> None:
        """Tooltips of the fold button and the strip (the command's, with its shortcut)."""
        self.fold_button.setToolTip(fold)
        self.strip.setToolTip(unfold)

    def set_folded(self, folded: bool) -> None:
        if folded == self.folded:
            return
        splitter = self.parentWidget() if isinstance(self.parentWidget(), QSplitter) else None
        sizes = splitter.sizes() if splitter is not None else []
        me = splitter.indexOf(self) if splitter is not None else -1
        self.folded = folded
        if folded:
            self._width = self.width() if self.isVisible() else self._width
            self.content.hide()
            self.fold_button.hide()
            self.strip.show()
            self.setFixedWidth(STRIP)
        else:
            self.setMinimumWidth(0)
            self.setMaximumWidth(16_777_215)
            self.strip.hide()
            self.content.show()
            self.fold_button.show()
            self.fold_button.raise_()
        if splitter is not None and me >= 0 and sizes:
            # The pane's width goes to (or comes from) the widest neighbour, the chat.
            want = STRIP if folded else max(self._width or DEFAULT_WIDTH, self.content.minimumSizeHint().width())
            widest = max((i for i in range(len(sizes)) if i != me), key=lambda i: sizes[i])
            sizes[widest] = max(1, sizes[widest] + sizes[me] - want)
            sizes[me] = want
            splitter.setSizes(sizes)

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        b = self.fold_button.sizeHint()
        self.fold_button.setGeometry(self.width() - b.width() - 4, 4, b.width(), b.height())
        self.fold_button.raise_()
