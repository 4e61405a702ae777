"""The bar above the chat: target picker, drafter picker, draft length, sampling popover."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLayout,
    QPushButton,
    QSizePolicy,
    QSlider,
    QWidget,
)

from engine.assistant_fit import ASSISTANT_ARCH
from engine.assistant_fit import LABEL as ASSISTANT_LABEL
from engine.drafting.draft_choice import DraftLength, DraftSpec

from app.control.model_scan import DrafterOption, ModelEntry, entry_for, human_bytes
from app.models.elided_combo import SHORT_ROLE, ElidedCombo
from app.models.sampling_popover import SamplingPopover
from app.core.settings import AppSettings

BROWSE = "__browse__"
FAST_COPY = "__fast_copy__"
UNFIT = "__unfit__"


class ModelBar(QWidget):
    """Choices for the next reply. Emits what the person picked; it does not load anything itself."""

    sig_target_chosen = Signal(str)
    """A target model path was picked (from the list or a file dialog)."""
    sig_drafter_chosen = Signal(object)
    """A drafter was picked (DraftSpec)."""
    sig_draft_length = Signal(object)
    """Draft length changed (DraftLength: 1-16, or Auto)."""
    sig_fast_copy_wanted = Signal()
    """The person asked about a fast copy of the target for this CPU (where it is offered)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        # Sized to a minimum and stretched, not to the longest name: a narrow window elides the
        # shown name with "…" (the tooltip has all of it and the path) rather than forcing the window wider.
        self.target = ElidedCombo("Target: the model whose answer you get")
        self.target.setObjectName("target_picker")
        self.drafter = ElidedCombo("Drafter: who proposes tokens for the target to check: a small model with the "
                                   "same vocabulary, prompt lookup (copies from the conversation), or none")
        self.drafter.setObjectName("drafter_picker")
        for combo in (self.target, self.drafter):
            combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            combo.setMinimumContentsLength(10)
        self.length = QSlider(Qt.Orientation.Horizontal)
        self.length.setObjectName("draft_length")
        self.length.setRange(1, 16)
        self.length.setPageStep(1)
        self.length.setFixedWidth(90)
        self.length.setToolTip("Tokens drafted per round")
        self.length_label = QLabel()
        self.length_label.setMinimumWidth(34)
        self.auto = QCheckBox("Auto")
        self.auto.setToolTip("Let the engine choose the draft length from measured costs, down to no drafting "
                             "when speculation would be slower")
        self.sampling_button = QPushButton("Sampling ▾")
        self.sampling_button.setToolTip("Temperature, top-k, top-p, min-p, seed, max tokens, system prompt; "
                                        "drafting from past chats")
        self.sampling = SamplingPopover(self)
        self.sampling_button.clicked.connect(lambda: self.sampling.popup_under(self.sampling_button))
        for w, name in ((self.target, "Target model"), (self.drafter, "Drafter"), (self.length, "Draft length"),
                        (self.auto, "Automatic draft length"), (self.sampling_button, "Sampling settings")):
            w.setAccessibleName(name)

        # Two groups side by side, or one above the other when the window is too narrow for both.
        self.pickers, self.controls = QWidget(), QWidget()
        pl, ql = QHBoxLayout(self.pickers), QHBoxLayout(self.controls)
        for group in (pl, ql):
            group.setContentsMargins(0, 0, 0, 0)
        for text, combo in (("Target", self.target), ("Drafter", self.drafter)):
            label = QLabel(text)
            label.setBuddy(combo)
            pl.addWidget(label)
            pl.addWidget(combo, 1)
            pl.addSpacing(6)
        draft = QLabel("Draft")
        draft.setBuddy(self.length)
        ql.addWidget(draft)
        ql.addWidget(self.length)
        ql.addWidget(self.length_label)
        ql.addWidget(self.auto)
        ql.addSpacing(6)
        ql.addStretch(1)
        ql.addWidget(self.sampling_button)
        self.rows = QBoxLayout(QBoxLayout.Direction.LeftToRight, self)
        self.rows.setContentsMargins(0, 0, 0, 0)
        self.rows.setSizeConstraint(QLayout.SizeConstraint.SetNoConstraint)
        self.rows.addWidget(self.pickers, 2)
        self.rows.addWidget(self.controls, 0)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.target.activated.connect(self._target_activated)
        self.drafter.activated.connect(lambda _i: self.sig_drafter_chosen.emit(self.current_drafter()))
        self.length.valueChanged.connect(self._length_changed)
        self.auto.toggled.connect(self._length_changed)
        self._targets: list[ModelEntry] = []
        self._target_index = 0

    # -- narrow windows --------------------------------------------------------------------
    def _one_row_width(self) -> int:
        return (self.pickers.minimumSizeHint().width() + self.controls.minimumSizeHint().width()
                + self.rows.spacing())

    def minimumSizeHint(self) -> QSize:
        """Narrow enough for the two-row form."""
        return QSize(max(self.pickers.minimumSizeHint().width(), self.controls.minimumSizeHint().width()),
                     self.rows.minimumSize().height())

    def sizeHint(self) -> QSize:
        return QSize(self._one_row_width(), self.rows.sizeHint().height())

    def resizeEvent(self, e: QResizeEvent) -> None:
        super().resizeEvent(e)
        want = (QBoxLayout.Direction.LeftToRight if e.size().width() >= self._one_row_width()
                else QBoxLayout.Direction.TopToBottom)
        if self.rows.direction() != want:
            self.rows.setDirection(want)
            self.updateGeometry()

    # -- filling -------------------------------------------------------------------------
    def set_models(self, models: list[ModelEntry], current: str) -> None:
        self._targets = list(models)
        self.target.blockSignals(True)
        self.target.clear()
        if not models and not current:
            self.target.addItem("No model installed: open Models…", "")
        for m in models:
            if m.architecture == ASSISTANT_ARCH:
                continue  # it only drafts: it cannot answer alone
            self.target.addItem(m.label, str(m.path))
            self.target.setItemData(self.target.count() - 1, f"{m.path}\n{m.architecture}, {human_bytes(m.size_bytes)}",
                                    Qt.ItemDataRole.ToolTipRole)
            self.target.setItemData(self.target.count() - 1, m.short_label, SHORT_ROLE)
        if current and self.target.findData(current) < 0:
            self.target.addItem(Path(current).name, current)
        if (entry := entry_for(models, current)) is not None and entry.copyable:
            self.target.addItem("Make a fast copy for this CPU…", FAST_COPY)
            self.target.setItemData(self.target.count() - 1, "A copy of the target that checks drafts faster on this "
                                    "CPU (another model: Models… › Hardware says how it differs)",
                                    Qt.ItemDataRole.ToolTipRole)
        self.target.addItem("Choose a GGUF file…", BROWSE)
        i = self.target.findData(current) if current else 0
        self.target.setCurrentIndex(max(0, i))
        self._target_index = self.target.currentIndex()
        self.target.blockSignals(False)
        self.target.update_tip()

    def set_drafters(self, options: list[DrafterOption], current: DraftSpec) -> None:
        """Only compatible drafters are offered, each with prompt lookup in front (the fastest mode
        with Auto) and alone; then prompt lookup and none. Each item's data is its DraftSpec's text."""
        self.drafter.blockSignals(True)
        self.drafter.clear()
        for o in options:
            rides = o.model.architecture == ASSISTANT_ARCH
            if not o.compatible:
                if rides:  # said, not hidden: a Gemma 4 assistant looks as if it should fit any Gemma 4
                    self._add_unfit(o)
                continue
            tip = f"{o.model.path}" + (f"\nNote: {o.warning}" if o.warning else "")
            label, short = (f"{ASSISTANT_LABEL} · {o.model.short_label}", ASSISTANT_LABEL) if rides else (
                o.model.label, o.model.short_label)
            if rides:
                tip = (f"Drafts from the target's own hidden state and shares its cache: nothing to read "
                       f"before drafting, a step costs a few small layers.\n{tip}")
            self.drafter.addItem(f"prompt lookup + {label}", DraftSpec.with_lookup(o.model.path).text)
            self.drafter.setItemData(self.drafter.count() - 1, f"lookup + {short}", SHORT_ROLE)
            self.drafter.setItemData(self.drafter.count() - 1,
                                     "Prompt lookup drafts where the reply copies the conversation, the model where "
                                     f"it does not; with Auto, each only where it pays.\n{tip}",
                                     Qt.ItemDataRole.ToolTipRole)
            self.drafter.addItem(label, DraftSpec(Path(o.model.path)).text)
            self.drafter.setItemData(self.drafter.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
            self.drafter.setItemData(self.drafter.count() - 1, short, SHORT_ROLE)
        self.drafter.addItem("prompt lookup", DraftSpec.LOOKUP.text)
        self.drafter.setItemData(self.drafter.count() - 1,
                                 "Drafts by copying what followed the same words earlier in the conversation: "
                                 "no second model, good for edits of given text", Qt.ItemDataRole.ToolTipRole)
        self.drafter.addItem("none (plain decoding)", DraftSpec.NONE.text)
        self.drafter.setItemData(self.drafter.count() - 1, "none (plain)", SHORT_ROLE)  # fits a narrow picker
        i = self.drafter.findData(DraftSpec.parse(current).text)
        self.drafter.setCurrentIndex(i if i >= 0 else self.drafter.findData(DraftSpec.LOOKUP.text))
        self.drafter.blockSignals(False)
        self.drafter.update_tip()

    def _add_unfit(self, o: DrafterOption) -> None:
        """A drafter shown but not offered: greyed out, with why it does not fit."""
        why = "; ".join(o.reasons) or "it does not fit this target"
        self.drafter.addItem(f"{ASSISTANT_LABEL} · {o.model.short_label}: not for this target", UNFIT)
        i = self.drafter.count() - 1
        self.drafter.setItemData(i, f"{o.model.path}\nCannot draft for this target: {why}", Qt.ItemDataRole.ToolTipRole)
        self.drafter.setItemData(i, f"{ASSISTANT_LABEL}: not for this target", SHORT_ROLE)
        self.drafter.model().item(i).setEnabled(False)

    def drafter_choices(self) -> list[DraftSpec]:
        return [DraftSpec.parse(self.drafter.itemData(i)) for i in range(self.drafter.count())
                if self.drafter.itemData(i) != UNFIT]

    def current_drafter(self) -> DraftSpec:
        return DraftSpec.parse(self.drafter.currentData())

    def set_settings(self, s: AppSettings) -> None:
        self.length.blockSignals(True)
        self.auto.blockSignals(True)
        auto = s.draft_max.is_auto
        self.auto.setChecked(auto)
        self.length.setValue(4 if auto else s.draft_max.k)
        self.length.setEnabled(not auto)
        self.length_label.setText("" if auto else f"k = {s.draft_max.k}")
        self.length.blockSignals(False)
        self.auto.blockSignals(False)
        self.sampling.set_values(s)

    # -- reacting --------------------------------------------------------------------------
    def _target_activated(self, index: int) -> None:
        data = self.target.itemData(index)
        if data == FAST_COPY:
            self.target.setCurrentIndex(self._target_index)
            self.sig_fast_copy_wanted.emit()
            return
        if data == BROWSE:
            self.target.setCurrentIndex(self._target_index)  # the browse row is an action, not a choice
            path, _ = QFileDialog.getOpenFileName(self, "Choose a target model", str(Path.home()), "GGUF models (*.gguf)")
            if not path:
                return
            data = path
        self._target_index = self.target.currentIndex()
        if data:
            self.sig_target_chosen.emit(str(data))

    def _length_changed(self, *_args) -> None:
        auto = self.auto.isChecked()
        self.length.setEnabled(not auto)
        self.length_label.setText("" if auto else f"k = {self.length.value()}")
        self.sig_draft_length.emit(DraftLength.AUTO if auto else DraftLength.fixed(self.length.value()))
