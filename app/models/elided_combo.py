"""A combo box that shows its current item elided with "…" when it is too narrow, and the whole of it in a tooltip.

Qt's combo box cuts a long item at the box's edge without a sign ("Qwen2.5 Coder 1", "none (plain decoding");
here an item may also carry a short form (SHORT_ROLE, e.g. "Qwen2.5 Coder 1.5B") shown while the box is
closed, elided in the middle so that its end (a model's size) stays; the list and the tooltip hold the whole item.
"""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QPaintEvent
from PySide6.QtWidgets import QComboBox, QStyle, QStyleOptionComboBox, QStylePainter, QWidget


SHORT_ROLE = Qt.ItemDataRole.UserRole + 1
"""Item data: the words to show while the box is closed (default: the item's text)."""


class ElidedCombo(QComboBox):
    """`role` is the box's own tooltip line ('The model whose answer you get'); the current item's text and
    its own tooltip follow it."""

    def __init__(self, role: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = role
        self.setToolTip(role)
        self.currentIndexChanged.connect(lambda _i: self.update_tip())

    def shown_text(self) -> str:
        """The current item as drawn: whole, or elided to the room the box has."""
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        room = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, opt,
                                           QStyle.SubControl.SC_ComboBoxEditField, self).width()
        short = self.currentData(SHORT_ROLE)
        text = short if isinstance(short, str) and short else self.currentText()
        return self.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, max(0, room - 2))

    def paintEvent(self, _e: QPaintEvent) -> None:
        p = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        p.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        opt.currentText = self.shown_text()
        p.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)

    def update_tip(self) -> None:
        """The tooltip for the current item (call after filling the box with its signals blocked)."""
        index = self.currentIndex()
        if index < 0:
            self.setToolTip(self.role)
            return
        detail = self.itemData(index, Qt.ItemDataRole.ToolTipRole)
        self.setToolTip(f"{self.role}\n\n{self.itemText(index)}" + (f"\n{detail}" if detail else ""))
