"""Messages as units: regenerate (own or current settings), edit and resend, delete, alternatives
stepped through and kept across a restart, schema 2 -> 3, refusal while a reply streams, and the
history the engine is given. Tiny real models, real SQLite files, the real Qt event loop.

The actions are driven through the chat view's signal, as its links emit it.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import sqlite3  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402
from app_support import (PROMPT, REPLY_TIMEOUT_MS, hold_after_first_token, install_tiny,  # noqa: E402
                              open_window, send, write_old_history)

from app.chat.actions import MessageAction  # noqa: E402
from app.chat.input_box import EDIT_HINT  # noqa: E402
from app.history.records import Role  # noqa: E402
from app.history.store import ChatStore, StoreMode, database_path  # noqa: E402
from engine.drafting.draft_choice import DraftLength, DraftSpec  # noqa: E402

#: A history file as Draftlight schema 2 wrote it: two chats whose messages interleave by id
#: (chat 1: 1, 2, 5, 6; chat 2: 3, 4), a finished reply with tokens and rounds.
SCHEMA_2 = """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO meta VALUES ('schema', '2');
    CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL);
    CREATE TABLE messages (id INTEGER PRIMARY KEY,
        conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE, role TEXT NOT NULL,
        content TEXT NOT NULL DEFAULT '', created REAL NOT NULL, target TEXT NOT NULL DEFAULT '',
        drafter TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', finish_reason TEXT, stats TEXT,
        error TEXT NOT NULL DEFAULT '');
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    CREATE TABLE rounds (message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE, round INTEGER NOT NULL,
        data TEXT NOT NULL, PRIMARY KEY (message_id, round));
    CREATE TABLE tokens (message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE, idx INTEGER NOT NULL,
        text TEXT NOT NULL, token_id INTEGER NOT NULL, source TEXT NOT NULL, round INTEGER NOT NULL, p REAL, q REAL,
        runner_up INTEGER, margin REAL, PRIMARY KEY (message_id, idx));
    INSERT INTO conversations VALUES (1, 'first chat', 0, 2), (2, 'second chat', 0, 1);
    INSERT INTO messages (id, conversation_id, role, content, created) VALUES (1, 1, 'user', 'hi', 0);
    INSERT INTO messages (id, conversation_id, role, content, created, target, drafter, finish_reason)
        VALUES (2, 1, 'assistant', 'yo', 0, 't.gguf', 'd.gguf', 'cancelled');
    INSERT INTO messages (id, conversation_id, role, content, created) VALUES (3, 2, 'user', 'other', 0);
    INSERT INTO messages (id, conversation_id, role, content, created, finish_reason)
        VALUES (4, 2, 'assistant', 'answer', 0, 'cancelled');
    INSERT INTO messages (id, conversation_id, role, content, created) VALUES (5, 1, 'user', 'again', 0);
    INSERT INTO messages (id, conversation_id, role, content, created, finish_reason)
        VALUES (6, 1, 'assistant', 'yes', 0, 'cancelled');
    INSERT INTO tokens VALUES (2, 0, 'y', 42, 'accepted', 1, 0.9, 0.8, 7, 0.5);
    INSERT INTO tokens VALUES (2, 1, 'o', 43, 'correction', 1, 0.7, NULL, NULL, NULL);
    INSERT INTO rounds VALUES (2, 1, '{"type": "round", "round": 1, "k": 2, "drafted": [42, 44], "drafted_text": ["y", "z"],
        "accepted": 1, "rejected": [44], "rejected_text": ["z"], "emitted": 2, "draft_s": 0.01, "verify_s": 0.02,
        "drafter": "model", "tokens_per_s": 50.0, "estimated_speedup": null}');
"""


def act(w, action: MessageAction, message_id: int) -> None:
    w.chat.action_requested.emit(action.value, message_id)


def act_and_wait(qtbot, w, action: MessageAction, message_id: int):
    """An action that starts a reply: returns the new reply once it has finished."""
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        act(w, action, message_id)
    return blocker.args[0]


def shown(w) -> list[tuple[int, int, int]]:
    """The shown path as (id, variant, variants)."""
    return [(m.id, m.variant, m.variants) for m in w.controller.messages]


def notices(w) -> list[str]:
    got: list[str] = []
    w.controller.sig_notice.connect(lambda n: got.append(n.text))
    return got


def requests(w) -> list:
    got: list = []
    w.controller.replies.sig_request.connect(got.append)
    return got


def row_count(sql: str, *args) -> int:
    with sqlite3.connect(database_path()) as db:
        return db.execute(sql, args).fetchone()[0]


def test_regenerate_uses_the_replys_own_settings_and_loads_its_pair(qtbot, tiny, isolated_home):
    home = install_tiny(tiny, isolated_home, draft_max=4, max_tokens=16, temperature=0.0, top_k=40, seed=None)
    w = open_window(qtbot)
    first = send(qtbot, w)
    # The model bar moves on: another drafter (a new load), k, sampling and system prompt.
    with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS):
        w.controller.update_settings(drafter="lookup", draft_max=2, temperature=0.8, top_k=5, seed=11,
                                     system_prompt="Answer in French.")
    said = notices(w)
    sent = requests(w)
    with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS) as loaded:
        again = act_and_wait(qtbot, w, MessageAction.REGENERATE, first.id)
    assert loaded.args[0].request.drafter == DraftSpec(home["drafter"])  # the reply's own pair was loaded first
    assert any("the pair this reply was made with" in t for t in said), said
    s = again.settings
    assert (s["target"], s["drafter"], s["draft_max"]) == (str(home["target"]), str(home["drafter"]), 4)
    assert (s["temperature"], s["top_k"], s["seed"], s["max_tokens"], s["system_prompt"]) == (0.0, 40, None, 16, "")
    assert (again.target, again.drafter) == ("tiny-target.gguf", "tiny-drafter.gguf")
    assert sent[-1].messages == ({"role": "user", "content": PROMPT},)  # no system prompt: the reply had none
    assert sent[-1].settings.draft_max == DraftLength.fixed(4) and sent[-1].settings.sampling.temperature == 0.0
    # Greedy speculative decoding is exact: the same pair and sampling give the same text.
    assert again.text == first.text and again.id != first.id
    user = w.controller.messages[0]
    assert shown(w) == [(user.id, 1, 1), (again.id, 2, 2)]
    assert again.parent_id == user.id
    act(w, MessageAction.PREVIOUS, again.id)
    assert shown(w) == [(user.id, 1, 1), (first.id, 1, 2)]


def test_regenerate_with_current_settings_records_the_model_bars_pair_k_and_sampling(qtbot, tiny, isolated_home):
    home = install_tiny(tiny, isolated_home, draft_max=4, max_tokens=16)
    w = open_window(qtbot)
    first = send(qtbot, w)
    w.controller.update_settings(draft_max="auto", temperature=0.5, top_k=10, top_p=0.9, min_p=0.1, seed=7,
                                 max_tokens=12, system_prompt="Be brief.")
    sent = requests(w)
    again = act_and_wait(qtbot, w, MessageAction.REGENERATE_CURRENT, first.id)
    s = again.settings
    assert (s["target"], s["drafter"], s["draft_max"]) == (str(home["target"]), str(home["drafter"]), "auto")
    assert (s["temperature"], s["top_k"], s["top_p"], s["min_p"], s["seed"], s["max_tokens"], s["system_prompt"]) == (
        0.5, 10, 0.9, 0.1, 7, 12, "Be brief.")
    assert sent[-1].messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT})
    assert sent[-1].settings.draft_max == DraftLength.AUTO and len(again.tokens) <= 12
    assert w.controller.store.reply_settings(again.id) == s  # as stored, not only in memory
    assert [m.id for m in w.controller.messages][1:] == [again.id] and again.variant == 2


def test_edit_and_resend_keeps_the_old_branch_as_an_alternative(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=12)
    w = open_window(qtbot)
    r1 = send(qtbot, w, "first question")
    r2 = send(qtbot, w, "second question")
    u1, u2 = w.controller.messages[0], w.controller.messages[2]
    w.input.setPlainText("half typed")
    act(w, MessageAction.EDIT, u2.id)
    assert w.input.editing == u2.id and w.input.toPlainText() == "second question"
    assert w.input.banner.isVisible() and w.input.banner.text() == EDIT_HINT and w.send_button.text() == "Resend"
    assert EDIT_HINT == "Editing a message — Enter resends, Esc cancels"
    w.input.setPlainText(PROMPT)
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    r3 = blocker.args[0]
    u2b = w.controller.messages[2]
    assert u2b.content == PROMPT and u2b.parent_id == r1.id
    assert shown(w) == [(u1.id, 1, 1), (r1.id, 1, 1), (u2b.id, 2, 2), (r3.id, 1, 1)]
    assert w.input.editing is None and w.input.toPlainText() == "half typed" and not w.input.banner.isVisible()
    assert w.send_button.text() == "Send"
    # The old question is an alternative, and brings its own reply back with it.
    act(w, MessageAction.PREVIOUS, u2b.id)
    assert shown(w) == [(u1.id, 1, 1), (r1.id, 1, 1), (u2.id, 1, 2), (r2.id, 1, 1)]
    assert [m.content for m in w.controller.messages[::2]] == ["first question", "second question"]
    act(w, MessageAction.NEXT, u2.id)
    assert shown(w) == [(u1.id, 1, 1), (r1.id, 1, 1), (u2b.id, 2, 2), (r3.id, 1, 1)]
    act(w, MessageAction.NEXT, u2b.id)  # past the last one: nothing changes
    assert [m.id for m in w.controller.messages] == [u1.id, r1.id, u2b.id, r3.id]


def test_esc_leaves_edit_mode_and_gives_back_the_draft(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    reply = send(qtbot, w, "a question")
    w.input.setPlainText("half typed")
    act(w, MessageAction.EDIT, w.controller.messages[0].id)
    assert w.input.toPlainText() == "a question"
    qtbot.keyClick(w.input, Qt.Key.Key_Escape)
    assert w.input.editing is None and w.input.toPlainText() == "half typed"
    assert [m.id for m in w.controller.messages] == [w.controller.messages[0].id, reply.id]
    assert row_count("SELECT COUNT(*) FROM messages") == 2
    act(w, MessageAction.EDIT, w.controller.messages[0].id)
    w.controller.new_conversation()  # the edited message left the screen: so does the edit
    assert w.input.editing is None and w.input.toPlainText() == "half typed"


def test_delete_moves_what_followed_up_asks_before_losing_a_reply_and_the_next_history_is_the_path(
        qtbot, tiny, isolated_home, monkeypatch):
    install_tiny(tiny, isolated_home, max_tokens=10)
    w = open_window(qtbot)
    r1 = send(qtbot, w, "first question")
    r2 = send(qtbot, w, "second question")
    u1, u2 = w.controller.messages[0], w.controller.messages[2]
    asked: list[str] = []
    answer = [QMessageBox.StandardButton.No]
    monkeypatch.setattr(QMessageBox, "question", lambda _parent, _title, text, *a: asked.append(text) or answer[0])

    act(w, MessageAction.DELETE, r1.id)  # declined: nothing happens
    assert len(asked) == 1 and "Delete this reply" in asked[0]
    assert [m.id for m in w.controller.messages] == [u1.id, r1.id, u2.id, r2.id]
    answer[0] = QMessageBox.StandardButton.Yes
    act(w, MessageAction.DELETE, r1.id)
    assert len(asked) == 2
    assert shown(w) == [(u1.id, 1, 1), (u2.id, 1, 1), (r2.id, 1, 1)]
    assert w.controller.messages[1].parent_id == u1.id
    assert row_count("SELECT COUNT(*) FROM messages WHERE id=?", r1.id) == 0
    assert row_count("SELECT COUNT(*) FROM tokens WHERE message_id=?", r1.id) == 0
    assert row_count("SELECT parent_id FROM messages WHERE id=?", u2.id) == u1.id

    sent = requests(w)
    r3 = send(qtbot, w, "third question")
    # Two questions in a row after the delete: sent as one turn, so the roles alternate.
    assert sent[-1].messages == ({"role": "user", "content": "first question\n\nsecond question",
                                  "earlier_messages": "1", "earlier_chars": str(len("first question\n\n"))},
                                 {"role": "assistant", "content": r2.text},
                                 {"role": "user", "content": "third question"})
    u3 = w.controller.messages[3]
    act(w, MessageAction.DELETE, u2.id)  # a question: no reply is lost, so no question is asked
    assert len(asked) == 2
    assert [m.id for m in w.controller.messages] == [u1.id, r2.id, u3.id, r3.id]
    assert w.controller.messages[1].parent_id == u1.id


def test_alternatives_are_stepped_through_and_survive_a_restart(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    ra = send(qtbot, w, "first question")
    u1 = w.controller.messages[0]
    rb = act_and_wait(qtbot, w, MessageAction.REGENERATE, ra.id)
    rc = act_and_wait(qtbot, w, MessageAction.REGENERATE_CURRENT, rb.id)
    r2 = send(qtbot, w, "second question")
    u2 = w.controller.messages[2]
    assert shown(w) == [(u1.id, 1, 1), (rc.id, 3, 3), (u2.id, 1, 1), (r2.id, 1, 1)]
    act(w, MessageAction.PREVIOUS, rc.id)
    assert shown(w) == [(u1.id, 1, 1), (rb.id, 2, 3)]
    act(w, MessageAction.PREVIOUS, rb.id)
    assert shown(w) == [(u1.id, 1, 1), (ra.id, 1, 3)]
    act(w, MessageAction.PREVIOUS, ra.id)  # before the first one: nothing changes
    assert shown(w) == [(u1.id, 1, 1), (ra.id, 1, 3)]
    act(w, MessageAction.NEXT, ra.id)
    act(w, MessageAction.NEXT, rb.id)  # the third reply brings back the turn that followed it
    assert shown(w) == [(u1.id, 1, 1), (rc.id, 3, 3), (u2.id, 1, 1), (r2.id, 1, 1)]
    act(w, MessageAction.PREVIOUS, rc.id)
    conv = w.controller.current_id
    w.close()

    store = ChatStore()
    assert [(m.id, m.variant, m.variants) for m in store.messages(conv)] == [(u1.id, 1, 1), (rb.id, 2, 3)]
    assert store.siblings(rb.id) == [ra.id, rb.id, rc.id]
    store.close()
    w2 = open_window(qtbot)
    assert w2.controller.current_id == conv
    assert shown(w2) == [(u1.id, 1, 1), (rb.id, 2, 3)]
    act(w2, MessageAction.NEXT, rb.id)
    assert shown(w2) == [(u1.id, 1, 1), (rc.id, 3, 3), (u2.id, 1, 1), (r2.id, 1, 1)]
    assert w2.controller.messages[3].text == r2.text and w2.controller.messages[3].tokens  # read from the file


def test_actions_are_refused_while_a_reply_streams(qtbot, tiny, isolated_home, monkeypatch):
    install_tiny(tiny, isolated_home, max_tokens=10)
    w = open_window(qtbot)
    r1 = send(qtbot, w, "first question")
    u1 = w.controller.messages[0]
    asked: list[str] = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a: asked.append(a[2]) or QMessageBox.StandardButton.Yes)
    said = notices(w)
    gate, hold = hold_after_first_token(w)
    try:
        w.input.setPlainText("second question")
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        assert w.controller.busy
        before = row_count("SELECT COUNT(*) FROM messages")
        path = [m.id for m in w.controller.messages]
        for action, target in ((MessageAction.REGENERATE, r1.id), (MessageAction.REGENERATE_CURRENT, r1.id),
                               (MessageAction.EDIT, u1.id), (MessageAction.DELETE, r1.id),
                               (MessageAction.DELETE, u1.id), (MessageAction.PREVIOUS, r1.id),
                               (MessageAction.NEXT, r1.id)):
            said.clear()
            act(w, action, target)
            assert said and said[-1].startswith("Wait for the reply to finish"), (action, said)
        assert w.controller.resend_edit(u1.id, "changed") is False
        assert asked == [] and w.input.editing is None
        assert row_count("SELECT COUNT(*) FROM messages") == before
        assert [m.id for m in w.controller.messages] == path
        with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
            gate.set()
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
    assert not w.controller.busy
    again = act_and_wait(qtbot, w, MessageAction.REGENERATE, r1.id)  # and accepted once it is over
    assert again.variant == 2 and [m.id for m in w.controller.messages] == [u1.id, again.id]


def test_the_history_sent_is_the_shown_path_only(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=10)
    w = open_window(qtbot)
    r1 = send(qtbot, w, "first question")
    u1 = w.controller.messages[0]
    act(w, MessageAction.EDIT, u1.id)
    w.input.setPlainText("edited question")
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(w.send_button, Qt.MouseButton.LeftButton)  # the button resends too
    u1b = w.controller.messages[0]
    assert (u1b.content, u1b.variant, u1b.variants, w.input.editing) == ("edited question", 2, 2, None)
    act(w, MessageAction.PREVIOUS, u1b.id)
    assert [m.id for m in w.controller.messages] == [u1.id, r1.id]
    sent = requests(w)
    send(qtbot, w, "second question")
    assert sent[-1].messages == ({"role": "user", "content": "first question"},
                                 {"role": "assistant", "content": r1.text},
                                 {"role": "user", "content": "second question"})
    # Regenerating the first reply answers the path up to its question, nothing after it.
    act_and_wait(qtbot, w, MessageAction.REGENERATE_CURRENT, r1.id)
    assert sent[-1].messages == ({"role": "user", "content": "first question"},)


def test_a_schema_2_file_is_migrated_each_message_following_the_previous_one_of_its_chat():
    path = write_old_history(SCHEMA_2)
    store = ChatStore()
    assert store.notice is None and store.mode == StoreMode.WRITABLE
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == "5"
        parents = dict(db.execute("SELECT id, parent_id FROM messages"))
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    assert parents == {1: None, 2: 1, 5: 2, 6: 5, 3: None, 4: 3}
    first = store.messages(1)
    assert [(m.id, m.content, m.variant, m.variants) for m in first] == [
        (1, "hi", 1, 1), (2, "yo", 1, 1), (5, "again", 1, 1), (6, "yes", 1, 1)]
    reply = first[1]
    assert [(t.text, t.token_id, t.runner_up) for t in reply.tokens] == [("y", 42, 7), ("o", 43, None)]
    assert list(reply.rounds) == [1] and reply.rounds[1].rejected_text == ("z",) and reply.error == ""
    assert [m.id for m in store.messages(2)] == [3, 4]
    # The migrated chat takes alternatives like a new one, and keeps them.
    alt = store.add_message(1, Role.ASSISTANT, "another", parent_id=5)
    assert [(m.id, m.variant, m.variants) for m in store.messages(1)][2:] == [(5, 1, 1), (alt.id, 2, 2)]
    store.close()
    again = ChatStore()
    assert [(m.id, m.variant, m.variants) for m in again.messages(1)] == [(1, 1, 1), (2, 1, 1), (5, 1, 1), (alt.id, 2, 2)]
    again.close()


def test_deleting_a_shown_alternative_shows_the_one_shown_before_and_children_take_its_place():
    store = ChatStore()
    c = store.new_conversation().id
    u1 = store.add_message(c, Role.USER, "q")
    ra = store.add_message(c, Role.ASSISTANT, "a", parent_id=u1.id)
    rb = store.add_message(c, Role.ASSISTANT, "b", parent_id=u1.id)
    rc = store.add_message(c, Role.ASSISTANT, "c", parent_id=u1.id)
    store.choose(ra.id)
    store.choose(rc.id)  # shown: c, and before it a
    u2 = store.add_message(c, Role.USER, "q2")  # after the shown path's end: under c
    assert u2.parent_id == rc.id
    assert [(m.content, m.variant, m.variants) for m in store.messages(c)] == [("q", 1, 1), ("c", 3, 3), ("q2", 1, 1)]
    store.delete_message(rb.id)  # not shown, no children: nothing else moves
    assert [(m.content, m.variant, m.variants) for m in store.messages(c)] == [("q", 1, 1), ("c", 2, 2), ("q2", 1, 1)]
    store.delete_message(rc.id)  # shown, with a child: the child takes its place among a's siblings
    assert [(m.content, m.variant, m.variants) for m in store.messages(c)] == [("q", 1, 1), ("q2", 2, 2)]
    store.delete_message(u2.id)  # shown, no child: the one shown before it comes back
    assert [(m.content, m.variant, m.variants) for m in store.messages(c)] == [("q", 1, 1), ("a", 1, 1)]
    store.delete_message(u1.id)  # the first message: its reply becomes the first
    assert [(m.content, m.parent_id) for m in store.messages(c)] == [("a", None)]
    store.close()


@pytest.mark.parametrize("bad", ["loop", "dangling"])
def test_a_hand_edited_tree_still_shows_its_messages_without_hanging(bad):
    store = ChatStore()
    c = store.new_conversation().id
    u = store.add_message(c, Role.USER, "q")
    r = store.add_message(c, Role.ASSISTANT, "a")
    store.close()
    with sqlite3.connect(database_path()) as db:
        db.execute("PRAGMA foreign_keys=OFF")
        if bad == "loop":
            db.execute("UPDATE messages SET parent_id=? WHERE id=?", (r.id, u.id))
        else:
            db.execute("UPDATE messages SET parent_id=999 WHERE id=?", (u.id,))
    store = ChatStore()
    assert [m.content for m in store.messages(c)] == ["q", "a"]  # the oldest message of a loop, or an orphan, starts it
    store.close()


def test_regenerate_says_why_when_the_reply_cannot_be_made_again_with_its_own_settings(qtbot, tiny, isolated_home):
    store = ChatStore()  # a reply from before settings were recorded
    conv = store.new_conversation("old chat").id
    old_q = store.add_message(conv, Role.USER, "an old question")
    old_r = store.add_message(conv, Role.ASSISTANT, "an old answer", "tiny-target.gguf", "tiny-drafter.gguf")
    store.close()
    home = install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    assert [m.id for m in w.controller.messages] == [old_q.id, old_r.id]
    said = notices(w)
    act(w, MessageAction.REGENERATE, old_r.id)
    assert "settings were not recorded" in said[-1] and "Regenerate with current settings" in said[-1]
    assert not w.controller.busy and row_count("SELECT COUNT(*) FROM messages") == 2

    reply = send(qtbot, w)
    with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS):
        w.controller.update_settings(drafter="lookup")
    home["drafter"].unlink()  # the reply's drafter is gone from the model folder
    act(w, MessageAction.REGENERATE, reply.id)
    assert "the drafter tiny-drafter.gguf is not installed any more" in said[-1], said[-1]
    assert not w.controller.busy and row_count("SELECT COUNT(*) FROM messages") == 4
    assert w.controller.settings.drafter == DraftSpec.LOOKUP  # the model bar did not move
    again = act_and_wait(qtbot, w, MessageAction.REGENERATE_CURRENT, reply.id)  # today's pair still can
    assert again.settings["drafter"] == "lookup" and again.drafter == "prompt lookup" and again.variant == 2


def test_a_regenerated_reply_that_fails_before_its_first_token_takes_back_only_itself(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    r1 = send(qtbot, w, "first question")
    u1 = w.controller.messages[0]
    w.controller.update_settings(system_prompt="word " * 6000)  # longer than the context: refused before a token
    said = notices(w)
    with qtbot.waitSignal(w.controller.sig_busy, timeout=REPLY_TIMEOUT_MS, check_params_cb=lambda busy: not busy):
        act(w, MessageAction.REGENERATE_CURRENT, r1.id)
    assert any("too long" in t for t in said), said
    assert shown(w) == [(u1.id, 1, 1), (r1.id, 1, 1)]  # the question stays, the old reply is shown again
    assert row_count("SELECT COUNT(*) FROM messages") == 2 and w.input.toPlainText() == ""


def test_a_reply_whose_question_was_deleted_is_not_regenerated(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    r1 = send(qtbot, w, "first question")
    r2 = send(qtbot, w, "second question")
    act(w, MessageAction.DELETE, w.controller.messages[2].id)  # a question: its reply moves up under r1
    assert [m.id for m in w.controller.messages][1:] == [r1.id, r2.id]
    said = notices(w)
    act(w, MessageAction.REGENERATE, r2.id)
    assert "question was deleted" in said[-1] and not w.controller.busy
    assert row_count("SELECT COUNT(*) FROM messages") == 3
