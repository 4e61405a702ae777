"""The desktop window on the tiny real models: streaming, formats per source, stop, toggles, history."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import sqlite3  # noqa: E402
import threading  # noqa: E402

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QFont, QTextCharFormat, QTextCursor  # noqa: E402
from app_support import (PROMPT, REPLY_TIMEOUT_MS, hold_after_first_token, install_tiny, marks,  # noqa: E402
                              open_window, send)

from app.history.store import database_path  # noqa: E402
from app.core.theme import LIGHT_COLOURS, Mark, mark_format  # noqa: E402
from engine.drafting.draft_choice import DraftSpec  # noqa: E402
from engine.decoding.events import FinishReason, TokenEvent, TokenSource  # noqa: E402

STYLE_FIELDS = (
    ("background", lambda f: f.background().color().name() if f.hasProperty(QTextCharFormat.Property.BackgroundBrush) else None),
    ("foreground", lambda f: f.foreground().color().name() if f.hasProperty(QTextCharFormat.Property.ForegroundBrush) else None),
    ("weight", lambda f: f.fontWeight() if f.hasProperty(QTextCharFormat.Property.FontWeight) else int(QFont.Weight.Normal)),
    ("italic", lambda f: f.fontItalic()),
    ("underline", lambda f: f.underlineStyle()),
    ("strike", lambda f: f.fontStrikeOut()),
)


def visible(reply) -> list[int]:
    """Indices of the tokens that put characters on screen (a bare newline is only a block break)."""
    return [t.index for t in reply.tokens if t.text.replace("\n", "")]


def style(fmt: QTextCharFormat) -> dict:
    return {name: get(fmt) for name, get in STYLE_FIELDS}


def test_reply_streams_in_with_a_style_per_token_source(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    spans = []  # (first new token, tokens then) per announcement of the streaming reply
    w.controller.sig_reply_started.connect(
        lambda r: r.changed.connect(lambda _mid, start: spans.append((start, len(r.message.tokens)))))
    reply = send(qtbot, w)

    frags = list(w.chat.token_fragments())
    assert frags, "no reply tokens in the document"
    # Every token is in the document with its own provenance, in order; each piece shows characters of its
    # own token (the reply is rendered as Markdown: markup and line ends are not characters on screen).
    assert sorted({f.index for f in frags}) == visible(reply)
    assert all(f.text in reply.tokens[f.index].text for f in frags)
    assert [f.index for f in frags] == sorted(f.index for f in frags)
    for f in frags:
        token = reply.tokens[f.index]
        assert f.mark.value == token.source.value
        assert f.round == token.round
    seen = {f.mark for f in frags}
    assert {Mark.ACCEPTED, Mark.CORRECTION, Mark.BONUS} <= seen
    # Each source has its own look (whitespace carries none), and each look differs from the others without
    # colour too.
    for f in frags:
        assert style(f.format) == style(mark_format(f.mark, LIGHT_COLOURS) if f.text.strip() else QTextCharFormat())
    cues = set()  # what remains in greyscale: shading, weight, italic, underline, strike-out
    for m in Mark:
        s = style(mark_format(m, LIGHT_COLOURS))
        cues.add((s["background"] is not None, s["weight"], s["italic"], s["underline"], s["strike"]))
    assert len(cues) == len(Mark)
    # Every token announced once, in order: each announcement starts where the last one ended.
    assert spans and spans[0][0] == 0 and spans[-1][1] == len(reply.tokens)
    assert all(start == end for (_, end), (start, _) in zip(spans, spans[1:]))
    # The stats panel shows the finished reply's numbers and a verdict in words.
    snap = w.stats.snapshot
    assert snap.finished and snap.tokens == len(reply.tokens) and snap.rounds == len(reply.rounds)
    assert w.stats.fields["acceptance"].text().startswith(f"{reply.stats.acceptance_rate:.0%}")
    assert "plain decoding" in w.stats.verdict.text()
    # The legend shows each style with the very format used in the chat.
    assert w.legend.marks == [Mark.ACCEPTED, Mark.CORRECTION, Mark.BONUS, Mark.TARGET]


def test_shift_enter_is_a_new_line_and_plain_decoding_is_marked_target(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, drafter="none")
    w = open_window(qtbot)
    w.input.setPlainText("hello")
    w.input.moveCursor(QTextCursor.MoveOperation.End)
    qtbot.keyClick(w.input, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert w.input.toPlainText() == "hello\n" and not w.controller.busy
    w.input.setPlainText("")
    reply = send(qtbot, w, "tell me about the draft model")
    frags = list(w.chat.token_fragments())
    assert frags and {f.mark for f in frags} == {Mark.TARGET}
    assert all(style(f.format) == style(QTextCharFormat()) for f in frags)
    assert all(r.drafted == () for r in reply.rounds.values())
    assert "Plain decoding" in w.stats.verdict.text()


def test_stop_ends_the_reply_within_one_round_and_what_was_shown_is_saved(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=3000)
    w = open_window(qtbot)
    gate, first_token = threading.Event(), threading.Event()

    def hold(_rid, event):  # runs on the engine thread: hold it inside round 1 until Stop is pressed
        if isinstance(event, TokenEvent) and not first_token.is_set():
            first_token.set()
            gate.wait(20)

    w.controller.worker.sig_event.connect(hold, Qt.ConnectionType.DirectConnection)
    try:
        w.input.setPlainText(PROMPT)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(marks(w)) > 0, timeout=REPLY_TIMEOUT_MS)
        assert w.stop_button.isEnabled() and not w.send_button.isEnabled()
        shown = len(marks(w))
        reply = w.controller.chat_reply.message
        with sqlite3.connect(database_path()) as db:  # a second reader, as after a crash
            (saved,) = db.execute("SELECT COUNT(*) FROM tokens WHERE message_id=?", (reply.id,)).fetchone()
        assert saved >= shown
        with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
            qtbot.mouseClick(w.stop_button, Qt.MouseButton.LeftButton)
            gate.set()
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
    assert reply.finish_reason == FinishReason.CANCELLED
    assert list(reply.rounds) == [1] and len(reply.tokens) == reply.rounds[1].emitted
    assert "(stopped)" in w.chat.toPlainText()
    assert w.send_button.isEnabled() and not w.stop_button.isEnabled()


def test_rejected_drafts_and_highlighting_toggles(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    reply = send(qtbot, w)
    assert not any(m == "rejected" for _, m in marks(w))

    w.act_rejected.trigger()
    frags = list(w.chat.token_fragments())
    rejected = [i for i, f in enumerate(frags) if f.mark == Mark.REJECTED]
    corrections = [f for f in frags if f.mark == Mark.CORRECTION]
    with_rejections = [f for f in corrections if reply.rounds[f.round].rejected_text]
    assert rejected and len(rejected) == len(with_rejections)
    for i in rejected:
        r, nxt = frags[i], frags[i + 1]
        assert nxt.mark == Mark.CORRECTION and nxt.round == r.round  # struck out just before its correction
        assert r.text == "".join(reply.rounds[r.round].rejected_text).replace("\n", "⏎")
        assert r.format.fontStrikeOut()
    assert w.controller.settings.show_rejected
    assert Mark.REJECTED in w.legend.marks
    w.act_rejected.trigger()
    assert not any(m == "rejected" for _, m in marks(w))

    shown = w.chat.toPlainText()
    w.act_highlight.trigger()  # off: the same rendered text, plain; provenance kept for the tooltip
    frags = list(w.chat.token_fragments())
    assert frags and all(style(f.format) == style(QTextCharFormat()) for f in frags)
    assert w.chat.toPlainText() == shown
    tip = w.chat.tooltip_for(next(f for f in frags if f.mark == Mark.CORRECTION))
    assert "correction" in tip and "round" in tip and "target p =" in tip and "draft" in tip
    assert "runner-up was" in tip  # greedy: how close the target's second choice came
    w.act_highlight.trigger()
    assert all(style(f.format) == style(mark_format(f.mark, LIGHT_COLOURS) if f.text.strip() else QTextCharFormat())
               for f in w.chat.token_fragments())
    assert sorted({f.index for f in w.chat.token_fragments()}) == visible(reply)


def test_history_with_highlighting_survives_a_restart(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    send(qtbot, w)
    send(qtbot, w, "speculative decoding is fast")
    before = marks(w)
    title = w.conversations.list.item(0).text()
    w.close()

    w2 = open_window(qtbot)
    assert w2.conversations.list.count() == 1 and w2.conversations.list.item(0).text() == title
    assert marks(w2) == before
    assert w2.stats.snapshot is not None and w2.stats.snapshot.finished
    # The next message continues the same conversation.
    send(qtbot, w2, "write code")
    assert w2.conversations.list.count() == 1
    assert len(w2.controller.messages) == 6


def test_damaged_database_and_settings_are_set_aside_with_a_message(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    db = database_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(b"this is not a database" * 200)
    w = open_window(qtbot)
    assert "damaged" in w.notice.text() and w.notice.isVisible()
    kept = [p for p in db.parent.iterdir() if p.name.startswith(db.name + ".damaged-")]
    assert len(kept) == 1 and kept[0].read_bytes().startswith(b"this is not a database")
    send(qtbot, w)  # the fresh database works
    w.close()

    from app.core.settings import settings_path

    settings_path().write_text("{ not json", encoding="utf-8")
    from app.window import MainWindow

    w2 = MainWindow()
    qtbot.addWidget(w2)
    w2.show()
    assert "settings file was damaged" in w2.notice.text()
    assert any(p.name.startswith("settings.json.damaged-") for p in settings_path().parent.iterdir())
    assert w2.conversations.list.count() == 1  # the new database kept the chat


def test_a_missing_model_is_explained_with_what_to_do(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, target=str(isolated_home / "gone.gguf"), drafter="lookup")
    from app.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: "not there any more" in w.notice.text(), timeout=REPLY_TIMEOUT_MS)
    assert w.notice.action_button.isVisible() and w.notice.action_button.text() == "Open Models…"
    assert w.controller.loaded is None


def test_changing_the_drafter_during_a_reply_stops_it_then_reloads(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=3000)
    w = open_window(qtbot)
    gate, hold = hold_after_first_token(w)
    try:
        w.input.setPlainText(PROMPT)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(marks(w)) > 0, timeout=REPLY_TIMEOUT_MS)
        with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS) as loaded:
            w.controller.update_settings(drafter="lookup")
            gate.set()
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
    assert loaded.args[0].request.drafter == DraftSpec.LOOKUP
    assert w.controller.messages[-1].finish_reason == FinishReason.CANCELLED
    assert "stopped to switch models" in w.notice.text()
    w.controller.update_settings(max_tokens=40)
    reply = send(qtbot, w, "write code")
    assert reply.finished and {t.source for t in reply.tokens} <= set(TokenSource)


def test_conversations_new_rename_search_delete(qtbot, tiny, isolated_home, monkeypatch):
    install_tiny(tiny, isolated_home, max_tokens=20)
    w = open_window(qtbot)
    send(qtbot, w, "hello world")
    qtbot.mouseClick(w.conversations.new_button, Qt.MouseButton.LeftButton)
    assert w.chat.toPlainText() == "" and w.conversations.list.count() == 2
    send(qtbot, w, "write code")
    lst = w.conversations.list
    assert [lst.item(i).text() for i in range(2)] == ["write code", "hello world"]
    lst.item(0).setText("Coding")  # what an in-place edit does
    assert w.controller.store.conversation(w.controller.current_id).title == "Coding"
    w.conversations.search.setText("hello")
    qtbot.waitUntil(lambda: lst.count() == 1, timeout=REPLY_TIMEOUT_MS)
    assert lst.item(0).text() == "hello world"
    w.conversations.search.setText("")
    qtbot.waitUntil(lambda: lst.count() == 2, timeout=REPLY_TIMEOUT_MS)
    lst.setCurrentRow(1)
    assert w.controller.messages[0].content == "hello world"
    from PySide6.QtWidgets import QMessageBox

    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    qtbot.mouseClick(w.conversations.delete_button, Qt.MouseButton.LeftButton)
    assert lst.count() == 1 and lst.item(0).text() == "Coding"
    assert w.controller.messages[0].content == "write code"  # the remaining chat is open


def test_a_message_too_long_for_the_context_says_what_to_do_and_keeps_the_text(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, n_ctx=256, max_tokens=32)
    w = open_window(qtbot)
    text = "the model is fast " * 200
    w.input.setPlainText(text)
    with qtbot.waitSignal(w.controller.sig_input_restore, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    assert "does not fit" in w.notice.text() and w.notice.action_button.text() == "New chat"
    assert w.input.toPlainText().strip() == text.strip()
    assert w.controller.messages == [] and not list(w.chat.token_fragments())
    assert w.send_button.isEnabled()
