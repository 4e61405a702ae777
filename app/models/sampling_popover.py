"""A popover under the 'Sampling' button: temperature, top-k, top-p, min-p, seed, max tokens, system prompt,
and drafting from past chats (opt-in) with its size cap and a way to forget them."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.engine_thread.past_chats_index import PastChatsStatus
from app.core.settings import AppSettings

#: Caps offered for the index of past chats, in MB (the settings file may hold another: it is shown too).
CAP_CHOICES_MB = (8, 16, 32, 64, 128, 256, 512)


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
    history_drafts: bool
    """Prompt lookup also drafts from an index of past chats."""
    history_cap_mb: int
    """Most megabytes that index may hold."""

    def changes(self) -> dict[str, Any]:
        """As keyword arguments for the settings (the field names are the same)."""
        return asdict(self)


class SamplingPopover(QFrame):
    """A Qt.Popup frame; closes when the user clicks elsewhere."""

    sig_changed = Signal(object)
    """The person changed a value (SamplingChoice)."""
    sig_forget = Signal()
    """The person confirmed deleting the index of past chats."""

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
        self._add_past_chats(lay)
        close = QPushButton("Done")
        close.clicked.connect(self.hide)
        lay.addWidget(close, alignment=Qt.AlignmentFlag.AlignRight)
        self.setMinimumWidth(300)
        self.setAccessibleName("Sampling settings")
        for w, name in ((self.temperature, "Temperature"), (self.top_k, "Top-k"), (self.top_p, "Top-p"),
                        (self.min_p, "Min-p"), (self.seed, "Seed"), (self.max_tokens, "Max tokens"),
                        (self.system_prompt, "System prompt"), (close, "Done"),
                        (self.history_drafts, "Draft from past chats"), (self.forget, "Forget past chats"),
                        (self.history_cap, "Most space for past chats")):
            w.setAccessibleName(name)
        for w in (self.temperature, self.top_p, self.min_p):
            w.valueChanged.connect(self._emit)
        for w in (self.top_k, self.seed, self.max_tokens):
            w.valueChanged.connect(self._emit)
        self.system_prompt.textChanged.connect(self._emit)
        self.history_drafts.toggled.connect(self._emit)
        self.history_cap.currentIndexChanged.connect(self._emit)
        self.forget.clicked.connect(self._confirm_forget)
        self._loading = False

    # -- drafting from past chats ------------------------------------------------------------------
    def _add_past_chats(self, lay: QVBoxLayout) -> None:
        self._status: PastChatsStatus | None = None
        self.history_drafts = QCheckBox("Draft from past chats")
        self.history_status = QLabel("")
        self.history_status.setWordWrap(True)
        self.history_status.setObjectName("past_chats_status")
        self.forget = QPushButton("Forget past chats…")
        self.forget.setToolTip("Delete the index of past chats from the data folder (your chats stay)")
        # A list, not a spin box: each step of a spin box would save and reopen the index.
        self.history_cap = QComboBox()
        for mb in CAP_CHOICES_MB:
            self.history_cap.addItem(f"{mb} MB", mb)
        self._select_cap(AppSettings().history_cap_mb)
        self.history_cap.setToolTip(
            "Most space the index of past chats may take, in memory and on disk (per model vocabulary). "
            "Lower than what is stored, the n-grams used least are dropped at once.")
        cap_label = QLabel("Keep at most")
        cap_label.setBuddy(self.history_cap)
        cap_row = QHBoxLayout()
        cap_row.addWidget(cap_label)
        cap_row.addWidget(self.history_cap)
        cap_row.addStretch(1)
        cap_row.addWidget(self.forget)
        line = QFrame()
        line.setFrameShape(QFrame.Shape.HLine)
        line.setFrameShadow(QFrame.Shadow.Sunken)
        lay.addWidget(line)
        lay.addWidget(self.history_drafts)
        lay.addWidget(self.history_status)
        lay.addLayout(cap_row)
        self._explain_past_chats()

    def show_past_chats(self, status: PastChatsStatus) -> None:
        """What the index holds now (from the engine thread)."""
        self._status = status
        text = status.summary
        if status.open and not status.drafting:
            text += " Drafts from it only with prompt lookup as the drafter; replies are still counted."
        self.history_status.setText(text.replace(" MB", "\u00a0MB").replace(" KB", "\u00a0KB"))  # a size on one line
        self.history_cap.setAccessibleDescription(status.summary)  # what is stored now, beside the cap
        self._explain_past_chats()

    def _explain_past_chats(self) -> None:
        s = self._status
        where = str(s.folder) if s is not None else "the data folder"
        cap = f"{s.cap_mb} MB" if s is not None else "the cap in the settings"
        self.history_drafts.setToolTip(
            "Prompt lookup also proposes what followed the same tokens in your earlier chats, where this chat "
            "has nothing to copy.\n\n"
            "What is stored: how often each token followed each run of 1 to 4 tokens in your chats (your "
            "messages and the replies): token n-gram counts, not the chats as written, though common phrases "
            f"can be read back from them.\nWhere: {where}, at most {cap}, one file per model vocabulary.\n"
            "Deleting a chat does not remove its counts; “Forget past chats” deletes them all.\n"
            "Drafts are checked by the target model: they change speed, not what it may write.")
        self.history_status.setToolTip(self.history_drafts.toolTip())
        self.history_drafts.setAccessibleDescription(self.history_drafts.toolTip())  # tooltips are hard to reach

    def _confirm_forget(self) -> None:
        self.hide()
        held = f" ({self._status.summary.rstrip('.')})" if self._status is not None else ""
        where = f" in {self._status.folder}" if self._status is not None else ""
        answer = QMessageBox.question(
            self.parentWidget() or self, "Forget past chats",
            f"Delete the index of past chats{held}{where}? Your chats themselves stay. While drafting from past "
            "chats is on, it starts again from nothing.")
        if answer == QMessageBox.StandardButton.Yes:
            self.sig_forget.emit()

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
            self.history_drafts.setChecked(s.history_drafts)
            self._select_cap(s.history_cap_mb)
        finally:
            self._loading = False

    def choice(self) -> SamplingChoice:
        seed = self.seed.value()
        return SamplingChoice(self.temperature.value(), self.top_k.value(), self.top_p.value(), self.min_p.value(),
                              None if seed < 0 else seed, self.max_tokens.value(), self.system_prompt.toPlainText(),
                              self.history_drafts.isChecked(), int(self.history_cap.currentData()))

    def _select_cap(self, mb: int) -> None:
        """Show `mb`, adding it in order when the settings file holds a cap not offered."""
        at = self.history_cap.findData(mb)
        if at < 0:
            at = sum(1 for i in range(self.history_cap.count()) if self.history_cap.itemData(i) < mb)
            self.history_cap.insertItem(at, f"{mb} MB", mb)
        self.history_cap.setCurrentIndex(at)

    def _emit(self, *_args) -> None:
        if not self._loading:
            self.sig_changed.emit(self.choice())

    def popup_under(self, anchor: QWidget) -> None:
        self.adjustSize()
        pos = anchor.mapToGlobal(anchor.rect().bottomLeft())
        self.move(pos)
        self.show()
        self.temperature.setFocus(Qt.FocusReason.PopupFocusReason)  # opened by keyboard (Alt+S): type at once
