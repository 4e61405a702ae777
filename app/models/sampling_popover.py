"""A popover under the 'Sampling' button: temperature, top-k, top-p, min-p, seed, max tokens, system prompt."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.settings import AppSettings


@dataclass(frozen=True, slots=True)
class SamplingChoice:
    """What the popover edits."""

    temperature: float
    """0 = greedy."""
    top_k: int
    """0 = all."""
    top_p: float
    """Nucleus mass."""
    min_p: float
    """Drop tokens below min_p times the top probability (0 = off)."""
    seed: int | None
    """None = fresh each reply."""
    max_tokens: int
    """Longest reply."""
    system_prompt: str
    """Sent first (empty: none)."""

    def changes(self) -> dict[str, Any]:
        """As keyword arguments for the settings (the field names are the same)."""
        return asdict(self)


class SamplingPopover(QFrame):
    """A Qt.Popup frame; closes when the user clicks elsewhere."""

    sig_changed = Signal(object)
    """The person changed a value (SamplingChoice)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.05)
        self.temperature.setDecimals(2)
        self.temperature.setSpecialValueText("0 (greedy)")
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setSpecialValueText("0 (all)")
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setDecimals(2)
        self.min_p = QDoubleSpinBox()
        self.min_p.setRange(0.0, 0.99)
        self.min_p.setSingleStep(0.01)
        self.min_p.setDecimals(2)
        self.min_p.setSpecialValueText("0 (off)")
        self.min_p.setToolTip("Drop tokens less likely than min-p times the most likely one")
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 32768)
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("e.g. You are a concise coding assistant.")
        self.system_prompt.setFixedHeight(70)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-k", self.top_k)
        form.addRow("Top-p", self.top_p)
        form.addRow("Min-p", self.min_p)
        form.addRow("Seed", self.seed)
        form.addRow("Max tokens", self.max_tokens)
        lay.addLayout(form)
        prompt_label = QLabel("System prompt")
        prompt_label.setBuddy(self.system_prompt)
        lay.addWidget(prompt_label)
        lay.addWidget(self.system_prompt)
        hint = QLabel("Greedy decoding (temperature 0) gives the same text with or without a drafter.")
        hint.setWordWrap(True)
        lay.addWidget(hint)
        close = QPushButton("Done")
        close.clicked.connect(self.hide)
        lay.addWidget(close, alignment=Qt.AlignmentFlag.AlignRight)
        self.setMinimumWidth(300)
        self.setAccessibleName("Sampling settings")
        for w, name in ((self.temperature, "Temperature"), (self.top_k, "Top-k"), (self.top_p, "Top-p"),
                        (self.min_p, "Min-p"), (self.seed, "Seed"), (self.max_tokens, "Max tokens"),
                        (self.system_prompt, "System prompt"), (close, "Done")):
            w.setAccessibleName(name)
        for w in (self.temperature, self.top_p, self.min_p):
            w.valueChanged.connect(self._emit)
        for w in (self.top_k, self.seed, self.max_tokens):
            w.valueChanged.connect(self._emit)
        self.system_prompt.textChanged.connect(self._emit)
        self._loading = False

    def set_values(self, s: AppSettings) -> None:
        self._loading = True
        try:
            self.temperature.setValue(s.temperature)
            self.top_k.setValue(s.top_k)
            self.top_p.setValue(s.top_p)
            self.min_p.setValue(s.min_p)
            self.seed.setValue(-1 if s.seed is None else s.seed)
            self.max_tokens.setValue(s.max_tokens)
            if self.system_prompt.toPlainText() != s.system_prompt:
                self.system_prompt.setPlainText(s.system_prompt)
        finally:
            self._loading = False

    def choice(self) -> SamplingChoice:
        seed = self.seed.value()
        return SamplingChoice(self.temperature.value(), self.top_k.value(), self.top_p.value(), self.min_p.value(),
                              None if seed < 0 else seed, self.max_tokens.value(), self.system_prompt.toPlainText())

    def _emit(self, *_args) -> None:
        if not self._loading:
            self.sig_changed.emit(self.choice())

    def popup_under(self, anchor: QWidget) -> None:
        self.adjustSize()
        pos = anchor.mapToGlobal(anchor.rect().bottomLeft())
        self.move(pos)
        self.show()
