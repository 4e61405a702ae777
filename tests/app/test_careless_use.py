"""Small things a careless person runs into, in the real window with tiny real models, a real SQLite file and a
real settings.json: each was found by using the app so, and each test failed on the code before its fix.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402
import sqlite3  # noqa: E402

from PySide6.QtCore import Qt  # noqa: E402
from test_app_attachments import chips_read, drop  # noqa: E402
from app_support import REPLY_TIMEOUT_MS, hold_after_first_token, install_tiny, open_window  # noqa: E402

from app.core.settings import settings_path  # noqa: E402
from app.history.store import database_path  # noqa: E402

LONG = "hello world " * 400  # far past a 256-token context


def titles() -> list[str]:
    with sqlite3.connect(database_path()) as db:
        return [r[0] for r in db.execute("SELECT title FROM conversations")]


def type_and_enter(qtbot, w, text: str) -> None:
    w.input.setFocus()
    w.input.setPlainText(text)
    qtbot.keyClick(w.input, Qt.Key.Key_Return)


def test_a_refused_first_question_leaves_no_chat_and_its_notice_goes_with_the_next_send(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=8, n_ctx=256)
    w = open_window(qtbot)
    before = titles()
    type_and_enter(qtbot, w, LONG)
    qtbot.waitUntil(lambda: "too long" in w.notice.text(), timeout=REPLY_TIMEOUT_MS)
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=REPLY_TIMEOUT_MS)
    assert w.input.toPlainText() == LONG.strip()  # given back to edit
    assert titles() == before  # no chat titled with the question, empty, kept across restarts
    assert w.conversations.list.count() == len(before)
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        type_and_enter(qtbot, w, "hi")
    assert "too long" not in w.notice.text(), w.notice.text()  # no longer holds
    assert titles() == before + ["hi"]


def test_a_moved_file_warning_goes_when_its_chip_is_removed(qtbot, tiny, isolated_home, tmp_path):
    install_tiny(tiny, isolated_home, max_tokens=8)
    f = tmp_path / "notes.txt"
    f.write_text("notes")
    w = open_window(qtbot)
    drop(w, f)
    chip = chips_read(qtbot, w, 1)[0]
    f.unlink()
    type_and_enter(qtbot, w, "what do they say?")
    assert w.notice.text().startswith("notes.txt was moved or deleted after it was attached")
    qtbot.mouseClick(chip.remove, Qt.MouseButton.LeftButton)
    assert not w.notice.isVisible()
    assert w.input.toPlainText() == "what do they say?"


def test_enter_in_a_new_chat_while_another_chat_streams_says_why_and_keeps_the_text(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=40)
    w = open_window(qtbot)
    gate, hold = hold_after_first_token(w)
    try:
        type_and_enter(qtbot, w, "first chat")
        qtbot.waitUntil(lambda: w.controller.busy, timeout=REPLY_TIMEOUT_MS)
        qtbot.keyClick(w.input, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
        type_and_enter(qtbot, w, "second chat")
        assert w.notice.text() == ("Wait for the reply in “first chat” to finish (or press Stop) before sending: one "
                                   "reply is written at a time. What you typed is kept.")
        assert w.input.toPlainText() == "second chat"
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=REPLY_TIMEOUT_MS)


def test_a_context_of_zero_in_settings_json_is_not_the_models_own_32k(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    data = json.loads(settings_path().read_text())
    data["n_ctx"] = 0
    settings_path().write_text(json.dumps(data))
    w = open_window(qtbot)
    assert w.controller.settings.n_ctx == 4096 and w.controller.loaded.n_ctx == 4096


def test_stop_before_the_first_round_does_not_leave_the_statistics_waiting(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=40)
    w = open_window(qtbot)
    type_and_enter(qtbot, w, "hello there")
    qtbot.keyClick(w.input, Qt.Key.Key_Escape)  # Stop, before the engine thread has begun the reply
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=REPLY_TIMEOUT_MS)
    qtbot.wait(20)
    assert "Waiting for the first round" not in w.stats.verdict.text()
    if w.stats.snapshot is not None and w.stats.snapshot.rounds == 0:
        assert w.stats.verdict.text() == "Stopped before the first round: nothing was measured."


def test_a_reply_that_fails_while_another_chat_is_shown_names_its_chat_and_keeps_the_question(qtbot, tiny,
                                                                                               isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=6, n_ctx=256)
    w = open_window(qtbot)
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        type_and_enter(qtbot, w, "hi")
    first = w.controller.current_id
    qtbot.keyClick(w.input, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    type_and_enter(qtbot, w, LONG)  # refused by the engine, but not before the next line: the answer is queued
    lst = w.conversations.list
    row = next(i for i in range(lst.count()) if lst.item(i).text() == "hi")
    qtbot.mouseClick(lst.viewport(), Qt.MouseButton.LeftButton, pos=lst.visualItemRect(lst.item(row)).center())
    assert w.controller.current_id == first
    qtbot.waitUntil(lambda: "too long" in w.notice.text(), timeout=REPLY_TIMEOUT_MS)
    title = LONG.strip()[:40]
    assert w.notice.text().startswith("In “"), w.notice.text()
    other = [t for t in titles() if t != "hi"]
    assert len(other) == 1 and w.notice.text().startswith(f"In “{other[0]}”: ") and other[0][:10] == title[:10]
    assert [m.text for m in w.controller.messages][0] == "hi"  # the chat on screen is untouched
    with sqlite3.connect(database_path()) as db:  # the refused question stays in its chat, to retry
        assert db.execute("SELECT COUNT(*) FROM messages WHERE role='user' AND content=?", (LONG.strip(),)
                          ).fetchone()[0] == 1
