"""The toolbar: a button per command while they fit, and a "More" menu with the rest when the window is narrow.

Qt's own overflow is a small "»" at the toolbar's end that a person rarely notices (at 800 px it hid Show
rejected drafts and Token details); here what does not fit goes into a labelled "More ▾" menu, in order,
and every command is in the menu bar too.
"""
from __future__ import annotations

from PySide6.QtCore import QPoint, QSize, Qt
from PySide6.QtGui import QAction, QColor, QPainter, QPaintEvent, QPalette, QResizeEvent
from PySide6.QtWidgets import QMenu, QSizePolicy, QToolBar, QToolButton, QWidget

from app.core.commands import plain_text

GAP = 2
"""Pixels between two buttons."""
SEPARATOR = 9
"""Width of a separator (a thin line with room on both sides)."""


class Separator(QWidget):
    """A thin upright line between groups of buttons, a third of the way from the window's colour to its text's
    (so it shows in both themes)."""

    def paintEvent(self, _e: QPaintEvent) -> None:
        pal = self.palette()
        a, b = pal.color(QPalette.ColorRole.Window), pal.color(QPalette.ColorRole.WindowText)
        painter = QPainter(self)
        painter.setPen(QColor.fromRgbF(*(x + (y - x) / 3 for x, y in ((a.redF(), b.redF()), (a.greenF(), b.greenF()),
                                                                       (a.blueF(), b.blueF())))))
        x = self.width() // 2
        painter.drawLine(x, 3, x, self.height() - 4)


class ActionStrip(QWidget):
    """Buttons for `actions` (None = a separator), laid out left to right; those past the right edge go
    into the More menu."""

    def __init__(self, actions: list[QAction | None], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.items: list[tuple[QAction | None, QWidget]] = []
        for action in actions:
            if action is None:
                self.items.append((None, Separator(self)))
                continue
            button = QToolButton(self)
            button.setDefaultAction(action)
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
            button.setAutoRaise(True)
            button.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # reached by the menu bar and shortcuts instead
            button.setAccessibleName(plain_text(action))
            self.items.append((action, button))
        self.more_menu = QMenu(self)
        self.more = QToolButton(self)
        self.more.setText("More ▾")
        self.more.setObjectName("toolbar_more")
        self.more.setToolTip("The toolbar's other commands (all of them are in the menu bar too)")
        self.more.setAccessibleName("More toolbar actions")
        self.more.setAutoRaise(True)
        self.more.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        # The menu opens on a click rather than as the button's own menu, whose extra arrow the ▾ already says.
        self.more.clicked.connect(self._open_more)
        self.more.hide()
        self.overflow: list[QAction] = []
        """The actions now in the More menu, in order."""

    def _open_more(self) -> None:
        """Under the More button, its right edge at the button's (it sits at the window's right edge)."""
        at = self.more.mapToGlobal(self.more.rect().bottomRight())
        self.more_menu.exec(QPoint(at.x() - self.more_menu.sizeHint().width() + 1, at.y() + 1))

    def button_for(self, action: QAction) -> QToolButton | None:
        return next((w for a, w in self.items if a is action), None)

    def _width(self, widget: QWidget) -> int:
        return SEPARATOR if isinstance(widget, Separator) else widget.sizeHint().width()

    def _height(self) -> int:
        return max([w.sizeHint().height() for a, w in self.items if a is not None] + [self.more.sizeHint().height()])

    def sizeHint(self) -> QSize:
        return QSize(sum(self._width(w) + GAP for _a, w in self.items), self._height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self.more.sizeHint().width(), self._height())

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        self.relayout()

    def relayout(self) -> None:
        """Place the buttons that fit; the rest go into the More menu."""
        width, height = self.width(), self.height()
        fits_all = self.sizeHint().width() - GAP <= width
        room = width if fits_all else width - self.more.sizeHint().width() - GAP
        x, overflowing = 0, False
        overflow: list[QAction | None] = []
        for action, widget in self.items:
            w = self._width(widget)
            overflowing = overflowing or x + w > room
            if overflowing:
                widget.hide()
                overflow.append(action)
                continue
            h = widget.sizeHint().height() if action is not None else height - 8
            widget.setGeometry(x, (height - h) // 2, w, h)
            widget.show()
            x += w + GAP
        while overflow and overflow[0] is None:  # a separator that would open the menu
            overflow.pop(0)
        self.overflow = [a for a in overflow if a is not None]
        self.more_menu.clear()
        for action in overflow:
            if action is None:
                self.more_menu.addSeparator()
            else:
                self.more_menu.addAction(action)
        self.more.setVisible(bool(self.overflow))
        if self.overflow:
            mw = self.more.sizeHint().width()
            self.more.setGeometry(min(x, width - mw), (height - self.more.sizeHint().height()) // 2, mw,
                                  self.more.sizeHint().height())


def overflow_toolbar(title: str, name: str, actions: list[QAction | None]) -> tuple[QToolBar, ActionStrip]:
    """A fixed toolbar holding one ActionStrip that takes its whole width."""
    bar = QToolBar(title)
    bar.setObjectName(name)
    bar.setMovable(False)
    bar.setFloatable(False)
    strip = ActionStrip(actions)
    bar.addWidget(strip)
    if (qt_more := bar.findChild(QToolButton, "qt_toolbar_ext_button")) is not None:
        qt_more.setAccessibleName("More toolbar actions")  # Qt's own, shown only if even "More" cannot fit
    return bar, strip
