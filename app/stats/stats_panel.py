"""The live numbers of the reply on screen, the verdict in words, and two charts."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QFormLayout, QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from engine.decoding.events import Certainty

from app.stats.charts import AcceptanceChart, SpeedChart
from app.history.reply_stats import StatsSnapshot, Tone, verdict
from app.core.theme import OKABE_ITO


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.0%}"


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


class StatsPanel(QFrame):
    """Shows a StatsSnapshot; `show_snapshot(None)` clears it."""

    sig_fast_copy = Signal()
    """The person followed the hint to a fast copy of the target for this CPU."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setMinimumWidth(230)
        self.setAccessibleName("Reply statistics")
        lay = QVBoxLayout(self)
        self.heading = QLabel("<b>This reply</b>")
        lay.addWidget(self.heading)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignLeft)
        form.setHorizontalSpacing(12)
        # Values wrap rather than run past the panel's edge; a narrow panel puts each under its name.
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self.fields: dict[str, QLabel] = {}
        for key, label, tip in (
            ("acceptance", "Acceptance", "Share of drafted tokens the target kept"),
            ("mean", "Accepted per round", "Mean accepted draft tokens in rounds that drafted"),
            ("speed", "Tokens/s", "Cumulative: tokens so far / generation time"),
            ("rounds", "Rounds", "Draft-verify rounds (plain decoding: one per token)"),
            ("tokens", "Tokens", "Tokens in the reply so far"),
            ("time", "Drafting / verifying", "Seconds the drafter spent proposing / the target verifying"),
            ("speedup", "Estimated speedup", "Against plain decoding of the target, from measured costs"),
        ):
            value = QLabel("–")
            value.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            value.setObjectName(f"stat_{key}")
            value.setWordWrap(True)
            value.setAccessibleName(label)
            name = QLabel(label)
            name.setBuddy(value)
            name.setToolTip(tip)
            value.setToolTip(tip)
            form.addRow(name, value)
            self.fields[key] = value
        lay.addLayout(form)
        self.verdict = QLabel("")
        self.verdict.setObjectName("verdict")
        self.verdict.setAccessibleName("Verdict")
        self.verdict.setWordWrap(True)
        self.verdict.setMinimumHeight(48)
        self.verdict.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        # A bar at the verdict's left edge carries its tone; the words say it too.
        self.tone_bar = QFrame()
        self.tone_bar.setFixedWidth(5)
        row = QHBoxLayout()
        row.setSpacing(8)
        row.addWidget(self.tone_bar)
        row.addWidget(self.verdict, 1)
        lay.addLayout(row)
        # Where speculation does not pay and this CPU has the remedy, the verdict says where it is.
        self.fast_copy_hint = QLabel('<a href="fast-copy">A fast copy of the target for this CPU</a> checks drafts '
                                     "faster, so they pay more often here (it is another model).")
        self.fast_copy_hint.setObjectName("fast_copy_hint")
        self.fast_copy_hint.setWordWrap(True)
        self.fast_copy_hint.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse
                                                    | Qt.TextInteractionFlag.LinksAccessibleByKeyboard)
        self.fast_copy_hint.linkActivated.connect(lambda _href: self.sig_fast_copy.emit())
        self.fast_copy_hint.hide()
        lay.addWidget(self.fast_copy_hint)
        self.fast_copy_offered = False
        """Set by the window: the current target has a fast copy to offer (Models › Hardware)."""
        self.acceptance_chart = AcceptanceChart()
        self.speed_chart = SpeedChart()
        lay.addWidget(self.acceptance_chart)
        lay.addWidget(self.speed_chart)
        lay.addStretch(1)
        self.snapshot: StatsSnapshot | None = None

    def show_snapshot(self, s: StatsSnapshot | None, title: str = "This reply") -> None:
        self.snapshot = s
        self.heading.setText(f"<b>{title}</b>")
        if s is None:
            for v in self.fields.values():
                v.setText("–")
            self.verdict.setText("Send a message to see how the drafter does.")
            self.fast_copy_hint.hide()
            self.tone_bar.setStyleSheet("")
            self.acceptance_chart.set_values(())
            self.speed_chart.set_points(())
            return
        f = self.fields
        f["acceptance"].setText(f"{_pct(s.acceptance_rate)}  ({s.accepted}/{s.drafted})" if s.drafted else "– (no drafts)")
        f["mean"].setText(_num(s.mean_accepted))
        f["speed"].setText(f"{s.tokens_per_s:.1f}" + (f"\non {s.threads[0]} of {s.threads[1]} CPU threads: other "
                                                       "programs keep cores busy" if s.threads else ""))
        f["rounds"].setText(str(s.rounds))
        f["tokens"].setText(str(s.tokens))
        total = s.draft_s + s.verify_s
        share = f"\n{s.draft_s / total:.0%} of the time drafting" if total > 0 else ""
        f["time"].setText(f"{s.draft_s:.2f} s / {s.verify_s:.2f} s{share}")
        f["speedup"].setText(_speedup_text(s))
        v = verdict(s)
        self.verdict.setText(v)
        colour = {Tone.GOOD: OKABE_ITO["bluish_green"], Tone.BAD: OKABE_ITO["vermillion"]}.get(v.tone)
        self.tone_bar.setStyleSheet(f"background-color: {QColor(colour).name()};" if colour else "")
        self.fast_copy_hint.setVisible(self.fast_copy_offered and v.tone is not Tone.GOOD and (s.auto or s.drafted > 0)
                                       and s.certainty is not Certainty.LOAD_CHANGED)
        self.acceptance_chart.set_values(s.by_position)
        # With the load changed there is no one plain-decoding speed to draw.
        plain = s.tokens_per_s / s.estimated_speedup if s.estimated_speedup and s.certainty is Certainty.SETTLED \
            else None
        self.speed_chart.set_points(s.speed_series, plain)


def _speedup_text(s) -> str:
    """The estimate, or why there is none yet: a number from two rounds is noise, not a verdict."""
    if s.estimated_speedup is None or s.certainty is Certainty.UNKNOWN:
        return "–"
    if s.certainty is Certainty.FEW_ROUNDS:
        return "too few rounds yet"
    if s.certainty is Certainty.LOAD_CHANGED:
        return "uncertain (load changed)"
    return f"{s.estimated_speedup:.2f}×"
