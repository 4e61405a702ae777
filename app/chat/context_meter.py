"""How full the model's context is with the open conversation: 'context 1.2k / 4k', warning near full.

The count is the engine's own: the last reply's prompt tokens plus its tokens (the next prompt
re-reads all of that). Messages after the last reply with numbers (a stopped or crashed reply, a
user message not answered yet) are estimated at four characters a token, and the text says '≈';
a reply being written counts the tokens it has so far, so the meter moves while it streams.
"""
from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QSizePolicy, QWidget

from engine.attachments import user_content

from app.core.theme import TokenColours
from app.history.records import Message

NEARLY_FULL = 0.8
"""From this share on, the meter warns."""
CHARS_PER_TOKEN = 4
"""Rough size of a token in English text and code, for messages the engine has not counted."""


def context_used(messages: Sequence[Message]) -> tuple[int, bool]:
    """Tokens the conversation fills in the context, and whether part of that is an estimate."""
    estimate = 0
    for m in reversed(messages):
        if m.stats is not None:
            return m.stats.prompt_tokens + m.stats.tokens + estimate, estimate > 0
        # A reply still being written has its tokens so far counted; text is estimated, a question's with
        # its attached files, as the model reads them.
        text = user_content(m.text, m.attachments)  # the text alone when nothing is attached
        estimate += len(m.tokens) if not m.finished else -(-len(text) // CHARS_PER_TOKEN)
    return estimate, estimate > 0


def short(n: int) -> str:
    """1234 -> '1.2k', 4096 -> '4k', 32768 -> '32k' (k = 1024, as context sizes are counted)."""
    if n < 1024:
        return str(n)
    k = n / 1024
    return f"{k:.0f}k" if k >= 10 or k == int(k) else f"{k:.1f}k"


class ContextMeter(QWidget):
    """A small bar and its words, beside the input."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setFixedSize(60, 8)
        self.bar.setRange(0, 1000)
        self.label = QLabel()
        self.label.setObjectName("context_meter")
        lay.addWidget(self.bar)
        lay.addWidget(self.label)
        self.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)
        self.setAccessibleName("Context used")
        self.colours: TokenColours | None = None
        self.used, self.size, self.estimated = 0, 0, False
        self.show_usage([], None)

    def set_colours(self, colours: TokenColours) -> None:
        self.colours = colours
        self._paint()

    def show_usage(self, messages: Sequence[Message], n_ctx: int | None) -> None:
        """`n_ctx` None or 0: no model loaded yet, so the size is not known."""
        self.used, self.estimated = context_used(messages)
        self.size = n_ctx or 0
        approx = "≈" if self.estimated else ""
        if self.size:
            share = self.used / self.size
            words = f"context {approx}{short(self.used)} / {short(self.size)}"
            if share >= 1:
                words += " · full"
            elif share >= NEARLY_FULL:
                words += " · nearly full"
            tip = (f"This chat fills {approx}{self.used:,} of the model's {self.size:,} context tokens "
                   f"({share:.0%}). When it is full, start a new chat or raise the context size.")
        else:
            words = f"context {approx}{short(self.used)} / –"
            tip = "How much of the model's context this chat fills (known once a model is loaded)."
        self.label.setText(words)
        self.setToolTip(tip)
        self.setAccessibleDescription(tip)
        self.bar.setValue(min(1000, round(1000 * self.used / self.size)) if self.size else 0)
        self._paint()

    @property
    def warning(self) -> bool:
        return bool(self.size) and self.used / self.size >= NEARLY_FULL

    def _paint(self) -> None:
        pal = QPalette()  # only the roles set here override what the window's palette gives
        if self.warning and self.colours is not None:
            colour = QColor(self.colours.warning_fg)
            pal.setColor(QPalette.ColorRole.WindowText, colour)
            pal.setColor(QPalette.ColorRole.Highlight, colour)
        self.label.setPalette(pal)
        self.bar.setPalette(pal)
