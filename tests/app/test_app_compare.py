"""Compare on the tiny real models: like for like with the reply, both runs cold, one verdict, one busy state."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from app_support import (PROMPT, REPLY_TIMEOUT_MS, hold_after_first_token, install_tiny, marks,  # noqa: E402
                              open_window, send)

from engine.decoding.events import DoneEvent, FinishReason  # noqa: E402
from engine.sampling import SamplingParams  # noqa: E402
from engine.decoding.session import GenerationSettings, Session  # noqa: E402
from engine.llama.types import LoadSettings


def open_compare(qtbot, w):
    from app.stats.compare_dialog import CompareDialog

    dlg = CompareDialog(w.controller, w.controller.messages, w)
    qtbot.addWidget(dlg)
    assert dlg.start()
    dlg.show()
    return dlg


def reference(target, messages, max_tokens):
    """Plain greedy decoding of the same conversation by a fresh session: what the plain run must say."""
    s = Session(target, "none", target_load=LoadSettings(n_threads=1), calibrate=False)
    try:
        events = list(s.chat(messages, GenerationSettings(SamplingParams(temperature=0.0), draft_max=0,
                                                          max_tokens=max_tokens)))
    finally:
        s.close()
    done = events[-1]
    assert isinstance(done, DoneEvent)
    return done


def test_compare_uses_the_replys_own_settings_and_history_from_a_cold_cache(qtbot, tiny, isolated_home):
    installed = install_tiny(tiny, isolated_home, max_tokens=24, system_prompt="Be brief.")
    w = open_window(qtbot)
    first = send(qtbot, w, "write code")
    reply = send(qtbot, w)  # the compared reply has history before it, and warmed the cache
    # Settings change after the reply; Compare must use the ones the reply was made with.
    w.controller.update_settings(system_prompt="Answer like a pirate.", max_tokens=5, temperature=0.9)
    dlg = open_compare(qtbot, w)
    qtbot.waitUntil(lambda: dlg.complete, timeout=REPLY_TIMEOUT_MS)

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "write code"},
                {"role": "assistant", "content": first.text}, {"role": "user", "content": PROMPT}]
    ref = reference(installed["target"], messages, max_tokens=24)
    spec, plain = dlg.spec.done.stats, dlg.plain.done.stats
    assert dlg.plain.done.text == ref.text and plain.tokens == ref.stats.tokens
    assert plain.prompt_tokens == spec.prompt_tokens == ref.stats.prompt_tokens
    assert plain.prompt_tokens_reused == 0 and spec.prompt_tokens_reused == 0  # both cold
    assert plain.drafted == 0 and spec.drafted > 0
    assert {f.mark.value for f in dlg.right.token_fragments()} == {"target"}
    assert {f.mark.value for f in dlg.left.token_fragments()} > {"accepted"}
    assert dlg.spec.done.text == reply.text  # greedy, same prompt: the recorded reply again
    assert "empty cache" in dlg.left_title.text() and "empty cache" in dlg.right_title.text()
    assert "none reused" in dlg.left_stats.text() and "none reused" in dlg.right_stats.text()


def test_compare_and_the_stats_panel_use_the_same_words(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=40)
    w = open_window(qtbot)
    send(qtbot, w)
    dlg = open_compare(qtbot, w)
    qtbot.waitUntil(lambda: dlg.complete, timeout=REPLY_TIMEOUT_MS)
    x = dlg.spec.done.stats.tokens_per_s / dlg.plain.done.stats.tokens_per_s
    word = "helping" if x >= 1.05 else ("slower" if x <= 0.95 else "about the same")
    assert f"{x:.2f}×" in dlg.verdict.text() and f"<b>{word}</b>" in dlg.verdict.text()
    identical = dlg.spec.done.text == dlg.plain.done.text
    assert ("identical" in dlg.verdict.text()) == identical


def test_nothing_can_be_sent_while_compare_runs_and_closing_it_leaves_the_chat_alone(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=3000)
    w = open_window(qtbot)
    w.controller.update_settings(max_tokens=30)
    send(qtbot, w)
    before = [(m.id, m.text, m.finish_reason) for m in w.controller.messages]
    w.controller.update_settings(max_tokens=3000)  # the compared reply keeps its own 30
    gate, hold = hold_after_first_token(w)
    try:
        dlg = open_compare(qtbot, w)
        qtbot.waitUntil(lambda: len(dlg.spec_reply.tokens) > 0, timeout=REPLY_TIMEOUT_MS)
        assert w.controller.busy and not w.send_button.isEnabled() and not w.act_compare.isEnabled()
        w.input.setPlainText("write code")
        qtbot.keyClick(w.input, Qt.Key.Key_Return)  # Enter, not only the button, is refused
        assert w.input.toPlainText() == "write code"
        assert [(m.id, m.text, m.finish_reason) for m in w.controller.messages] == before
        with qtbot.waitSignal(w.controller.sig_busy, timeout=REPLY_TIMEOUT_MS, check_params_cb=lambda b: not b):
            dlg.close()  # stops Compare's own runs
            gate.set()
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
    assert dlg.spec.done is not None and dlg.spec.done.finish_reason == FinishReason.CANCELLED
    assert w.send_button.isEnabled()
    assert [(m.id, m.text, m.finish_reason) for m in w.controller.messages] == before

    # Compare finished and left open; a chat reply is running when it is closed: the reply goes on.
    w.controller.update_settings(max_tokens=30)
    dlg2 = open_compare(qtbot, w)
    qtbot.waitUntil(lambda: dlg2.complete, timeout=REPLY_TIMEOUT_MS)
    gate, hold = hold_after_first_token(w)
    try:
        w.input.setPlainText("write code")
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: w.controller.chat_reply is not None and bool(w.controller.chat_reply.message.tokens),
                        timeout=REPLY_TIMEOUT_MS)
        with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as finished:
            dlg2.close()
            gate.set()
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
    assert finished.args[0].finish_reason != FinishReason.CANCELLED
    assert "(stopped)" not in w.chat.toPlainText()
    assert marks(w)


def test_compare_is_refused_while_a_reply_runs(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=3000)
    w = open_window(qtbot)
    w.controller.update_settings(max_tokens=20)
    send(qtbot, w)
    w.controller.update_settings(max_tokens=3000)
    gate, hold = hold_after_first_token(w)
    try:
        w.input.setPlainText(PROMPT)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(marks(w)) > 0, timeout=REPLY_TIMEOUT_MS)
        assert not w.act_compare.isEnabled()
        w.open_compare()  # e.g. a shortcut: refused with a message, the reply untouched
        assert "Wait for the reply" in w.notice.text()
        with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
            w.controller.stop()
            gate.set()
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
