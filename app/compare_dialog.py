"""Compare: the recorded speculative reply next to the same prompt decoded plainly, with times and speedup."""
from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QGridLayout, QLabel, QVBoxLayout, QWidget

from engine.decoding.events import DoneEvent, RoundEvent, Stats, TokenEvent

from .chat_view import ChatView, ViewOptions
from .controller import ChatController
from .errors import explain
from .records import Message, Role
from .theme import colours_for


def describe(stats: Stats | None) -> str:
    if stats is None:
        return "–"
    gen_s = stats.tokens / stats.tokens_per_s if stats.tokens_per_s else 0.0
    out = (f"{stats.tokens} tokens in {gen_s:.2f} s · {stats.tokens_per_s:.1f} tokens/s · "
           f"first token after {stats.ttft_s:.2f} s")
    if stats.drafted:
        out += f"<br>{stats.acceptance_rate:.0%} of {stats.drafted} drafted tokens accepted, {stats.rounds} rounds"
    return out


def first_difference(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class _PlainRun:
    """Reply handler for the plain-decoding run."""

    def __init__(self, dialog: "CompareDialog") -> None:
        self.dialog = dialog
        self.done: DoneEvent | None = None
        self.error: BaseException | None = None

    def on_events(self, events: list) -> None:
        for r in events:
            if isinstance(r, RoundEvent):
                self.dialog.plain_reply.rounds[r.round] = r  # for the tooltips
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        if tokens:
            self.dialog.append_plain(tokens)
        for e in events:
            if isinstance(e, DoneEvent):
                self.done = e

    def on_failed(self, exc: BaseException) -> None:
        self.error = exc

    def on_finished(self) -> None:
        self.dialog.plain_finished(self)


class CompareDialog(QDialog):
    """Left: the reply as recorded. Right: plain decoding of the same prompt, streamed now."""

    def __init__(self, controller: ChatController, messages: Sequence[Message], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Compare with plain decoding")
        self.resize(1000, 620)
        self.controller = controller
        self.reply = messages[-1]
        self.prompt_messages = list(messages[:-1])
        lay = QVBoxLayout(self)
        intro = QLabel("The same prompt, decoded by the target alone (no drafter), with the same sampling settings. "
                       "With greedy decoding (temperature 0) both texts should be the same: speculation changes "
                       "the speed, not the answer.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        grid = QGridLayout()
        self.left_title = QLabel(f"<b>Speculative</b> ({html.escape(self.reply.target)} ← "
                                 f"{html.escape(self.reply.drafter or 'none')}, as recorded)")
        self.right_title = QLabel("<b>Plain decoding</b> (running…)")
        # The recorded reply keeps its token highlighting; the plain run is all the target's own.
        self.left = ChatView()
        s = controller.settings
        self.left.set_options(ViewOptions(colours_for(s.theme), s.highlight, s.show_rejected, rendered=False))
        self.left.show_messages([self.reply])
        self.right = ChatView()
        self.right.set_options(ViewOptions(colours_for(s.theme), s.highlight, False, rendered=False))
        target = controller.loaded.request.target.name if controller.loaded else self.reply.target
        self.plain_reply = Message(-1, Role.ASSISTANT, "", target, "none")
        self.right.show_messages([self.plain_reply])
        self.left_stats = QLabel(describe(self.reply.stats))
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
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.run: _PlainRun | None = None

    def start(self) -> None:
        c = self.controller
        history = [{"role": "system", "content": c.settings.system_prompt}] if c.settings.system_prompt.strip() else []
        history += [{"role": m.role.value, "content": m.text} for m in self.prompt_messages
                    if m.role == Role.USER or m.text]
        loaded = c.loaded.request.target.name if c.loaded else None
        if loaded and loaded != self.reply.target:
            self.verdict.setText(f"Note: {html.escape(loaded)} is loaded now, but the reply came from "
                                 f"{html.escape(self.reply.target)}; the comparison is not like for like.")
        c.ensure_loaded()
        self.run = _PlainRun(self)
        c.request_reply(history, c.generation_settings(plain=True), self.run)
        c.sig_busy.emit(True)

    @property
    def plain_text(self) -> str:
        return self.plain_reply.text

    def append_plain(self, tokens: list[TokenEvent]) -> None:
        self.plain_reply.tokens.extend(tokens)
        self.right.append_tokens(self.plain_reply, tokens)

    def plain_finished(self, run: _PlainRun) -> None:
        self.controller.sig_busy.emit(self.controller.busy)
        if run.error is not None or run.done is None:
            self.right_title.setText("<b>Plain decoding</b> (failed)")
            self.verdict.setText(html.escape(explain(run.error).text) if run.error else "The run did not finish.")
            return
        self.right_title.setText("<b>Plain decoding</b> (target alone)")
        self.plain_reply.content = run.done.text
        self.plain_reply.finish_reason = run.done.finish_reason
        self.plain_reply.stats = run.done.stats
        self.right.finish_reply(self.plain_reply)
        plain = run.done.stats
        self.right_stats.setText(describe(plain))
        spec = self.reply.stats
        parts = []
        if spec is not None and plain.tokens_per_s > 0 and spec.tokens_per_s > 0:
            x = spec.tokens_per_s / plain.tokens_per_s
            word = "faster" if x >= 1 else "slower"
            parts.append(f"Speculative decoding ran at <b>{x:.2f}×</b> the speed of plain decoding "
                         f"({spec.tokens_per_s:.1f} vs {plain.tokens_per_s:.1f} tokens/s): {word}.")
        diff = first_difference(self.reply.text, run.done.text)
        if diff is None:
            parts.append("The texts are <b>identical</b>.")
        else:
            greedy = self.controller.settings.temperature <= 0
            why = ("With greedy decoding they can differ only where two tokens tie numerically."
                   if greedy else "With sampling (temperature above 0) they are expected to differ.")
            parts.append(f"The texts <b>differ</b> from character {diff + 1}. {why}")
        self.verdict.setText(" ".join(parts))

    def done(self, result: int) -> None:
        if self.run is not None and self.run.done is None and self.run.error is None:
            self.controller.stop()  # closing the dialog ends the plain run
        super().done(result)
