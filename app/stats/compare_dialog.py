"""Compare: a reply's prompt run again with its drafter and with the target alone, side by side.

Like for like: both runs use the reply's own system prompt, sampling and history (as recorded
with it), the pair loaded now, and each starts from empty caches (both cold), so neither reuses
what the other or the chat had already read. The verdict uses the stats panel's thresholds and
words (reply_stats.pace).
"""
from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QGridLayout, QLabel, QVBoxLayout, QWidget

from engine.decoding.events import DoneEvent, FinishReason, Stats

from app.chat.chat_view import ChatView, ViewOptions
from app.control.controller import ChatController, CompareRuns, drafter_label
from app.control.streaming_reply import StreamingReply
from app.core.errors import explain
from app.core.window_fit import resize_within
from app.history.records import Message, Role
from app.history.reply_stats import pace
from app.core.theme import colours_for


def describe(stats: Stats | None) -> str:
    if stats is None:
        return "–"
    gen_s = stats.tokens / stats.tokens_per_s if stats.tokens_per_s else 0.0
    out = (f"{stats.tokens} tokens in {gen_s:.2f} s · {stats.tokens_per_s:.1f} tokens/s · "
           f"first token after {stats.ttft_s:.2f} s")
    reused = (f"{stats.prompt_tokens_reused} of them reused from the cache" if stats.prompt_tokens_reused
              else "none reused from a cache")
    out += f"<br>prompt: {stats.prompt_tokens} tokens, {reused}"
    if stats.drafted:
        out += f"<br>{stats.acceptance_rate:.0%} of {stats.drafted} drafted tokens accepted, {stats.rounds} rounds"
    return out


def first_difference(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class _Run:
    """One of the two runs: a StreamingReply (no store) that its pane observes."""

    def __init__(self, dialog: "CompareDialog", view: ChatView, message: Message) -> None:
        self.dialog, self.view, self.message = dialog, view, message
        self.reply = StreamingReply(message, auto=True)
        self.finished = False
        self.reply.changed.connect(view.reply_changed)
        self.reply.finished.connect(self._finished)

    @property
    def done(self) -> DoneEvent | None:
        return self.reply.done

    @property
    def error(self) -> BaseException | None:
        return self.reply.error

    def _finished(self, _reply: StreamingReply) -> None:
        self.finished = True
        if self.done is not None:
            self.view.finish_reply(self.message)
        self.dialog.run_finished(self)


class CompareDialog(QDialog):
    """Left: the reply's prompt with the drafter. Right: the same with the target alone. Both run now."""

    def __init__(self, controller: ChatController, messages: Sequence[Message], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare with plain decoding")
        self.controller = controller
        self.messages = list(messages)
        self.reply = messages[-1]
        lay = QVBoxLayout(self)
        intro = QLabel("The prompt of this reply, run twice now with the reply's own system prompt, sampling and "
                       "history: once with the drafter, once with the target alone. Both runs start from an empty "
                       "cache, so neither reuses what the other read. With greedy decoding (temperature 0) both texts "
                       "should be the same: speculation changes the speed, not the answer.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        grid = QGridLayout()
        loaded = controller.loaded.request if controller.loaded is not None else None
        target = loaded.target.name if loaded else self.reply.target
        drafter = drafter_label(loaded.drafter) if loaded else self.reply.drafter
        self.left_title = QLabel(f"<b>Speculative</b> ({html.escape(target)} ← {html.escape(drafter)}) (waiting…)")
        self.right_title = QLabel(f"<b>Plain decoding</b> ({html.escape(target)} alone) (waiting…)")
        s = controller.settings
        self.left = ChatView()
        self.left.set_options(ViewOptions(colours_for(s.theme), s.highlight, s.show_rejected, actions=False))
        self.right = ChatView()
        self.right.set_options(ViewOptions(colours_for(s.theme), s.highlight, False, actions=False))
        self.left.setAccessibleName("Speculative reply")
        self.right.setAccessibleName("Plain decoding reply")
        self.spec_reply = Message(-1, Role.ASSISTANT, "", target, drafter)
        self.plain_reply = Message(-2, Role.ASSISTANT, "", target, "none")
        self.left.show_messages([self.spec_reply])
        self.right.show_messages([self.plain_reply])
        for title in (self.left_title, self.right_title):
            title.setWordWrap(True)  # a long pair name wraps: the dialog keeps its width while the runs report
        self.left_stats = QLabel("–")
        self.right_stats = QLabel("–")
        for w in (self.left_stats, self.right_stats):
            w.setWordWrap(True)
            w.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        grid.addWidget(self.left_title, 0, 0)
        grid.addWidget(self.right_title, 0, 1)
        grid.addWidget(self.left, 1, 0)
        grid.addWidget(self.right, 1, 1)
        grid.addWidget(self.left_stats, 2, 0)
        grid.addWidget(self.right_stats, 2, 1)
        lay.addLayout(grid, 1)
        self.verdict = QLabel("")
        self.verdict.setObjectName("compare_verdict")
        self.verdict.setWordWrap(True)
        lay.addWidget(self.verdict)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.button(QDialogButtonBox.StandardButton.Close).setAccessibleName("Close")
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        resize_within(self, 1000, 620)
        self.spec = _Run(self, self.left, self.spec_reply)
        self.plain = _Run(self, self.right, self.plain_reply)
        self.runs: CompareRuns | None = None

    def start(self) -> bool:
        """Queue both runs; False (and a message) when the engine is busy."""
        self.runs = self.controller.compare(self.messages, self.spec.reply, self.plain.reply)
        if self.runs is None:
            self.verdict.setText("Wait for the reply to finish, then compare.")
            return False
        self.left_title.setText(self.left_title.text().replace("(waiting…)", "(running…)"))
        if self.runs.notes:
            self.verdict.setText("Note: " + html.escape(" ".join(self.runs.notes)))
        return True

    @property
    def plain_text(self) -> str:
        return self.plain_reply.text

    @property
    def complete(self) -> bool:
        return self.spec.finished and self.plain.finished

    def run_finished(self, run: _Run) -> None:
        title, stats = (self.left_title, self.left_stats) if run is self.spec else (self.right_title, self.right_stats)
        head = title.text().split(" (running…)")[0].split(" (waiting…)")[0]
        if run.done is None:
            title.setText(f"{head} (failed)")
            stats.setText(html.escape(explain(run.error).text) if run.error else "The run did not finish.")
        else:
            title.setText(f"{head} (from an empty cache)")
            stats.setText(describe(run.done.stats))
        if run is self.spec and not self.plain.finished:
            self.right_title.setText(self.right_title.text().replace("(waiting…)", "(running…)"))
        if self.complete:
            self._verdict()

    def _verdict(self) -> None:
        spec, plain = self.spec.done, self.plain.done
        parts = [f"Note: {html.escape(' '.join(self.runs.notes))}"] if self.runs and self.runs.notes else []
        if spec is None or plain is None:
            parts.append("One of the runs did not finish, so there is nothing to compare.")
            self.verdict.setText(" ".join(parts))
            return
        if FinishReason.CANCELLED in (spec.finish_reason, plain.finish_reason):
            parts.append("A run was stopped before it finished, so the speeds are not comparable.")
            self.verdict.setText(" ".join(parts))
            return
        a, b = spec.stats.tokens_per_s, plain.stats.tokens_per_s
        if a > 0 and b > 0:
            x = a / b
            parts.append(f"Speculative decoding ran at <b>{x:.2f}×</b> the speed of plain decoding "
                         f"({a:.1f} vs {b:.1f} tokens/s): <b>{pace(x)}</b>.")
        greedy = self.runs is not None and self.runs.settings.temperature <= 0
        diff = first_difference(spec.text, plain.text)
        if diff is None:
            parts.append("The texts are <b>identical</b>.")
        else:
            why = ("With greedy decoding they can differ only where two tokens tie numerically."
                   if greedy else "With sampling (temperature above 0) they are expected to differ.")
            parts.append(f"The texts <b>differ</b> from character {diff + 1}. {why}")
        if spec.text != self.reply.text:
            parts.append("The speculative run's text is not the recorded reply's"
                         + (" (a near tie, or another pair)." if greedy else " (sampling)."))
        self.verdict.setText(" ".join(parts))

    def done(self, result: int) -> None:
        if self.runs is not None and not self.complete:
            self.controller.stop_requests(self.runs.ids)  # Compare's own runs, never a chat reply
        super().done(result)
