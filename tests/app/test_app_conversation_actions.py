"""Conversation actions in the window: Continue (after Stop, after the max tokens limit), Edit a reply, Fork, and
Import of the JSON Lines export, which holds every branch (round-tripped), with strangers' files refused.

Tiny real models, a real SQLite file, the real Qt event loop. Links are clicked with the mouse; the file
dialogs (which cannot be driven offscreen) are replaced by the path a person would pick. References: an
uninterrupted greedy reply (greedy speculative decoding is exact), texts written here, the store read back.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402
import sqlite3  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QFileDialog  # noqa: E402
from chat_view_support import anchor_position, click_link  # noqa: E402
from app_support import (PROMPT, REPLY_TIMEOUT_MS, hold_after_first_token, install_tiny,  # noqa: E402
                              open_window, send)

from app.chat.actions import MessageAction  # noqa: E402
from app.chat.app_links import LinkKind, href  # noqa: E402
from app.chat.input_box import EDIT_REPLY_HINT  # noqa: E402
from app.history.records import Role  # noqa: E402
from app.history.store import ChatStore, database_path  # noqa: E402
from engine.attachments import Attachment, AttachmentKind  # noqa: E402
from engine.decoding.events import DoneEvent, FinishReason  # noqa: E402


def link(action: MessageAction, message_id: int) -> str:
    return href(LinkKind.ACTION, action.value, message_id)


def click_and_wait(qtbot, w, action: MessageAction, message_id: int):
    """Click a message's action link that starts a reply; the reply once finished."""
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        click_link(qtbot, w.chat, link(action, message_id))
    return blocker.args[0]


def ids(reply) -> list[int]:
    return [t.token_id for t in reply.tokens]


def rows(sql: str, *args) -> list[tuple]:
    with sqlite3.connect(database_path()) as db:
        return db.execute(sql, args).fetchall()


def dones(w) -> list[DoneEvent]:
    got: list[DoneEvent] = []
    w.controller.worker.sig_event.connect(lambda _rid, e: got.append(e) if isinstance(e, DoneEvent) else None,
                                          Qt.ConnectionType.DirectConnection)
    return got


def requests(w) -> list:
    got: list = []
    w.controller.replies.sig_request.connect(got.append)
    return got


def window_with_a_file(qtbot, path, text: str):
    """The window, with a file of this text attached to the message being written."""
    path.write_text(text)
    w = open_window(qtbot)
    w.attachments.add_paths([path])
    qtbot.waitUntil(lambda: bool(w.attachments.files()), timeout=10_000)
    return w


def stopped_reply(qtbot, w):
    """Send PROMPT and press Stop while round 1 is held; the stopped reply."""
    gate, hold = hold_after_first_token(w)  # the engine thread waits inside round 1 until Stop is pressed
    try:
        w.input.setPlainText(PROMPT)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: w.controller.chat_reply is not None and bool(w.controller.chat_reply.message.tokens),
                        timeout=REPLY_TIMEOUT_MS)
        with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
            qtbot.mouseClick(w.stop_button, Qt.MouseButton.LeftButton)
            gate.set()
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
    return blocker.args[0]


# -- Continue ---------------------------------------------------------------------------------------------------
def test_continue_after_stop_grows_the_same_reply_from_the_cache_as_if_it_never_stopped(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, draft_max=4, max_tokens=60, temperature=0.0)
    w = open_window(qtbot)
    whole = send(qtbot, w)  # the reference: the same question, never stopped
    w.controller.update_settings(max_tokens=30)
    w.controller.new_conversation()
    stopped = stopped_reply(qtbot, w)
    before = len(stopped.tokens)
    assert stopped.finish_reason is FinishReason.CANCELLED and 0 < before < 30 and before + 30 <= len(whole.tokens)
    assert "(stopped)" in w.chat.toPlainText()
    sent, ended = requests(w), dones(w)
    went_on = click_and_wait(qtbot, w, MessageAction.CONTINUE, stopped.id)  # up to 30 more: its own limit
    n = before + 30
    assert went_on.id == stopped.id and [m.id for m in w.controller.messages][1:] == [stopped.id]
    assert ids(went_on) == ids(whole)[:n]  # greedy: as if it had never stopped
    assert went_on.text == "".join(t.text for t in whole.tokens[:n])
    assert went_on.finish_reason is FinishReason.LENGTH and "(stopped)" not in w.chat.toPlainText()
    assert [t.index for t in went_on.tokens] == list(range(n))
    assert sorted(went_on.rounds) == list(range(1, len(went_on.rounds) + 1))
    assert {t.round for t in went_on.tokens} <= set(went_on.rounds)
    # The engine was given the reply so far, and read only its last token again: the cache held the rest.
    assert sent[-1].continuation.token_ids == tuple(ids(whole)[:before])
    assert sent[-1].messages == ({"role": "user", "content": PROMPT},)
    assert ended[-1].stats.prompt_tokens_reused == ended[-1].stats.prompt_tokens - 1
    assert went_on.stats.tokens == n  # the totals are those of both parts
    # One message in the store, its tokens numbered on.
    conv = w.controller.current_id
    assert rows("SELECT role, content, finish_reason FROM messages WHERE conversation_id=? ORDER BY id", conv) == [
        ("user", PROMPT, None), ("assistant", went_on.text, "length")]
    assert rows("SELECT idx, token_id FROM tokens WHERE message_id=? ORDER BY idx", stopped.id) == list(
        enumerate(ids(whole)[:n]))
    w.close()
    again = open_window(qtbot)
    reply = again.controller.messages[1]
    assert reply.text == went_on.text and ids(reply) == ids(whole)[:n] and reply.stats.tokens == n


def test_continue_after_the_max_tokens_limit_and_only_the_last_reply_offers_it(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, draft_max=3, max_tokens=16, temperature=0.0)
    w = open_window(qtbot)
    whole = send(qtbot, w)
    assert whole.finish_reason is FinishReason.LENGTH and len(whole.tokens) == 16
    w.controller.update_settings(max_tokens=8)
    w.controller.new_conversation()
    cut = send(qtbot, w)
    assert cut.finish_reason is FinishReason.LENGTH and ids(cut) == ids(whole)[:8]
    assert "stopped at the max tokens limit" in w.chat.toPlainText()
    went_on = click_and_wait(qtbot, w, MessageAction.CONTINUE, cut.id)  # 8 more: the limit it was made with
    assert ids(went_on) == ids(whole) and went_on.text == whole.text
    anchor_position(w.chat, link(MessageAction.CONTINUE, cut.id))  # cut again at the limit: it can go on again
    send(qtbot, w, "next question")
    with pytest.raises(AssertionError):  # no longer the last message: no Continue on it
        anchor_position(w.chat, link(MessageAction.CONTINUE, cut.id))


# -- Edit a reply ---------------------------------------------------------------------------------------------------
def test_an_edited_reply_is_kept_beside_the_original_and_is_what_the_model_reads_next(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    reply = send(qtbot, w)
    question = w.controller.messages[0]
    w.input.setPlainText("half typed")
    click_link(qtbot, w.chat, link(MessageAction.EDIT, reply.id))
    assert w.input.editing == reply.id and w.input.toPlainText() == reply.text
    assert w.input.banner.text() == EDIT_REPLY_HINT and not w.act_attach.isEnabled() and w.send_button.text() == "Save"
    w.input.setPlainText("A better answer, written by hand.")
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    edited = w.controller.messages[1]
    assert [(m.id, m.variant, m.variants) for m in w.controller.messages] == [(question.id, 1, 1), (edited.id, 2, 2)]
    assert edited.text == "A better answer, written by hand." and edited.edited and edited.tokens == []
    assert edited.parent_id == question.id and edited.finish_reason is FinishReason.STOP
    assert "Edited by you" in w.chat.toPlainText() and "A better answer, written by hand." in w.chat.toPlainText()
    assert w.input.editing is None and w.input.toPlainText() == "half typed" and w.act_attach.isEnabled()
    assert w.send_button.text() == "Send"
    # The stats panel has no numbers for an edit (not zeros, as if a reply were waiting for its first round).
    assert w.stats.snapshot is None and w.stats.fields["tokens"].text() == "–"
    assert rows("SELECT COUNT(*) FROM messages WHERE role='assistant'") == [(2,)]
    sent = requests(w)
    w.input.clear()
    send(qtbot, w, "go on")
    assert sent[-1].messages == ({"role": "user", "content": PROMPT},
                                 {"role": "assistant", "content": "A better answer, written by hand."},
                                 {"role": "user", "content": "go on"})
    click_link(qtbot, w.chat, link(MessageAction.PREVIOUS, edited.id))  # the reply as the model wrote it
    assert [m.id for m in w.controller.messages] == [question.id, reply.id]
    w.close()
    again = open_window(qtbot)
    assert [m.id for m in again.controller.messages] == [question.id, reply.id]  # the choice was kept too
    assert ChatStore().load([edited.id])[edited.id].edited


# -- Fork ---------------------------------------------------------------------------------------------------------
def test_fork_opens_a_new_chat_holding_the_conversation_up_to_that_message(qtbot, tiny, isolated_home, tmp_path):
    install_tiny(tiny, isolated_home, max_tokens=8)
    w = window_with_a_file(qtbot, tmp_path / "a.py", "x = 1\n")
    r1 = send(qtbot, w, "first question")
    send(qtbot, w, "second question")
    original = w.controller.current_id
    title = w.controller.current_conversation().title
    click_link(qtbot, w.chat, link(MessageAction.FORK, r1.id))
    forked = w.controller.current_id
    assert forked != original and w.controller.current_conversation().title == f"Fork: {title}"
    got = w.controller.messages
    assert [(m.role, m.text) for m in got] == [(Role.USER, "first question"), (Role.ASSISTANT, r1.text)]
    assert got[0].attachments == (Attachment("a.py", 6, AttachmentKind.TEXT, "x = 1\n"),)
    assert ids(got[1]) == ids(r1) and got[1].stats == r1.stats and got[1].id != r1.id
    lst = w.conversations.list
    assert sorted(lst.item(i).text() for i in range(lst.count())) == sorted([title, f"Fork: {title}"])
    assert len(ChatStore().messages(original)) == 4  # the original is as it was
    send(qtbot, w, "a different second question")  # the fork goes its own way
    assert [m.text for m in ChatStore().messages(original)][2] == "second question"


# -- Export and Import -------------------------------------------------------------------------------------------------
def toolbar_click(qtbot, w, action) -> None:
    button = w.toolbar_strip.button_for(action)
    assert button is not None and button.isVisible(), action.text()  # on the toolbar, not folded into More
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def shape(store: ChatStore, conv_id: int) -> list[tuple]:
    """A chat's whole tree, ids replaced by positions: what an import must give back."""
    tree = store.tree(conv_id)
    place = {m.id: i for i, (m, _) in enumerate(tree)}
    stamps = sorted(s for _, s in tree)
    out = []
    for m, stamp in tree:
        out.append((place.get(m.parent_id), m.role, m.text, m.target, m.drafter, m.settings, m.finish_reason, m.error,
                    m.attachments, [t for t in m.tokens], sorted(m.rounds.items()), m.stats, stamps.index(stamp)))
    return out


def test_export_writes_every_branch_and_import_gives_the_same_tree_back(qtbot, tiny, isolated_home, tmp_path,
                                                                       monkeypatch):
    install_tiny(tiny, isolated_home, max_tokens=10)
    w = window_with_a_file(qtbot, tmp_path / "notes.md", "# Plan\n\n- one\n- two\n")
    r1 = send(qtbot, w, "first question")
    click_and_wait(qtbot, w, MessageAction.REGENERATE_CURRENT, r1.id)  # a second reply beside the first
    send(qtbot, w, "second question")
    q2 = w.controller.messages[2]
    click_link(qtbot, w.chat, link(MessageAction.EDIT, q2.id))
    w.input.setPlainText("second question, edited")
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    last = w.controller.messages[-1]
    click_link(qtbot, w.chat, link(MessageAction.EDIT, last.id))
    w.input.setPlainText("an answer by hand")
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    click_link(qtbot, w.chat, link(MessageAction.PREVIOUS, w.controller.messages[1].id))  # an older branch shown
    conv = w.controller.current_conversation()
    shown = [m.text for m in w.controller.messages]
    store = w.controller.store
    assert len(store.tree(conv.id)) == 8 and len(w.controller.messages) == 2  # the first reply has no follow-up

    out = tmp_path / "chat.jsonl"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), "JSON Lines (*.jsonl)"))
    toolbar_click(qtbot, w, w.act_export_trace)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records[0] == {"type": "conversation", "id": conv.id, "title": conv.title, "format": "draftlight-chat",
                          "version": 2}
    messages = [r for r in records if r["type"] == "message"]
    assert len(messages) == 8 and sum(r["parent"] is None for r in messages) == 1
    assert messages[0]["attachments"] == [{"name": "notes.md", "size": 20, "kind": "text",
                                           "text": "# Plan\n\n- one\n- two\n"}]

    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(out), "JSON Lines (*.jsonl)"))
    toolbar_click(qtbot, w, w.act_import)
    qtbot.waitUntil(lambda: w.controller.current_id != conv.id, timeout=10_000)  # read off the GUI thread
    imported = w.controller.current_id
    assert imported != conv.id and w.controller.current_conversation().title == conv.title
    assert shape(store, imported) == shape(store, conv.id)
    assert [m.text for m in w.controller.messages] == shown  # the same branch is shown
    assert w.controller.messages[0].attachments[0].name == "notes.md"


def test_an_export_of_the_shown_path_only_still_imports_as_a_list(qtbot, tiny, isolated_home, tmp_path):
    install_tiny(tiny, isolated_home)
    old = tmp_path / "old.jsonl"  # as Draftlight wrote it before branches were exported (one token shown)
    old.write_text("\n".join(json.dumps(r) for r in [
        {"type": "conversation", "id": 7, "title": "Old export"},
        {"type": "message", "id": 1, "role": "user", "content": "hi", "target": "", "drafter": ""},
        {"type": "message", "id": 2, "role": "assistant", "content": "yo", "target": "t.gguf", "drafter": "none"},
        {"message": 2, "type": "round", "round": 1, "k": 0, "drafted": [], "drafted_text": [], "accepted": 0,
         "rejected": [], "rejected_text": [], "emitted": 1, "draft_s": 0.0, "verify_s": 0.01, "drafter": "none",
         "tokens_per_s": 50.0, "estimated_speedup": None},
        {"message": 2, "type": "token", "text": "yo", "token_id": 42, "source": "target", "round": 1, "p": 0.9,
         "q": None, "index": 0},
        {"type": "message", "id": 3, "role": "user", "content": "again", "target": "", "drafter": ""},
    ]) + "\n")
    w = open_window(qtbot)
    assert w.controller.import_chat(old)
    got = w.controller.messages
    assert [(m.role, m.text) for m in got] == [(Role.USER, "hi"), (Role.ASSISTANT, "yo"), (Role.USER, "again")]
    assert [m.parent_id for m in got] == [None, got[0].id, got[1].id] and got[1].tokens[0].token_id == 42
    assert w.controller.current_conversation().title == "Old export"


@pytest.mark.parametrize("lines, said", [
    (["not json at all"], "line 1 is not JSON"),
    (['{"type": "conversation", "title": "x"}'], "the file holds no messages"),
    (['{"type": "message", "id": 1, "role": "user", "content": "q", "parent": 9}'],
     "line 1: message 1 follows message 9, which does not come before it"),
    (['{"type": "message", "id": 1, "role": "robot", "content": "q"}'], "line 1: 'robot' is not a valid Role"),
    (['{"type": "message", "id": 1, "role": "user", "content": "q"}',
      '{"type": "message", "id": 2, "role": "assistant", "content": "a"}',
      '{"message": 2, "type": "token", "text": "a", "token_id": 5, "source": "target", "round": 1, "p": 1, "q": null, '
      '"index": 3}'], "line 3: token 3 of message 2 comes where token 0 belongs"),
    (['{"type": "message", "id": 1, "role": "user", "content": "q", "attachments": [{"name": "a"}]}'],
     "line 1: a field is missing (text)"),
    (['[1, 2]'], "line 1 is not a record"),
])
def test_a_file_that_is_not_a_chat_export_is_refused_and_nothing_is_imported(qtbot, tiny, isolated_home, tmp_path,
                                                                            lines, said):
    install_tiny(tiny, isolated_home)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    w = open_window(qtbot)
    before = rows("SELECT COUNT(*) FROM conversations")
    assert not w.controller.import_chat(bad)
    assert w.notice.text().startswith(f"Could not import bad.jsonl: {said}") and "Nothing was imported." in \
        w.notice.text()
    assert rows("SELECT COUNT(*) FROM conversations") == before


def test_the_totals_of_a_continued_reply_are_those_of_both_parts():
    from app.history.reply_stats import joined_stats
    from engine.decoding.events import RoundEvent, Stats, with_totals
    from engine.drafting.draft_choice import DraftKind

    def part(tokens, rounds, drafted, accepted, tps, plain, modes, **kw):
        base = dict(tokens=tokens, rounds=rounds, drafted=drafted, accepted=accepted, acceptance_rate=0.0,
                    mean_accepted_per_round=0.0, tokens_per_round=0.0, acceptance_by_position=(), target_passes=rounds,
                    drafter_passes=0, prompt_tokens=40, prompt_tokens_reused=0, ttft_s=0.5, tokens_per_s=tps,
                    itl_p50_s=0.1, itl_p95_s=0.3, wall_s=3.0, prefill_s=0.5, draft_s=0.0, verify_s=2.0, python_s=0.1,
                    estimated_plain_tokens_per_s=plain, estimated_speedup=tps / plain, draft_mode="auto",
                    rounds_by_drafter=modes)
        return Stats(**{**base, **kw})

    def rnd(n, drafted, accepted):
        return RoundEvent(n, len(drafted), tuple(drafted), tuple("x" for _ in drafted), accepted,
                          tuple(drafted[accepted:]), (), accepted + 1, 0.0, 0.1, "lookup" if drafted else "none", 1.0, None)

    # 10 tokens at 5/s (2 s), then 10 at 10/s (1 s); plain would have taken 10/4 + 10/5 = 4.5 s.
    first = part(10, 6, 6, 3, 5.0, 4.0, {DraftKind.LOOKUP: 3, DraftKind.NONE: 3}, prompt_tokens_reused=0)
    then = part(10, 4, 8, 6, 10.0, 5.0, {DraftKind.LOOKUP: 3, DraftKind.NONE: 1}, prompt_tokens=52,
                prompt_tokens_reused=51, itl_p95_s=0.5, note="dropped the 2 oldest messages to fit the context")
    rounds = [rnd(1, [1, 2], 1), rnd(2, [1, 2], 2), rnd(3, [], 0), rnd(4, [5, 6, 7, 8], 0)]
    s = joined_stats(first, then, with_totals(rounds)[-1].totals)
    assert (s.tokens, s.rounds, s.drafted, s.accepted, s.target_passes) == (20, 10, 14, 9, 10)
    assert s.acceptance_rate == 9 / 14 and s.mean_accepted_per_round == 9 / 6 and s.tokens_per_round == 2.0
    assert s.tokens_per_s == pytest.approx(20 / 3) and s.estimated_plain_tokens_per_s == pytest.approx(20 / 4.5)
    assert s.estimated_speedup == pytest.approx(4.5 / 3)
    # Position 1 is tried by every drafting round (3; kept in rounds 1 and 2), position 2 after a kept
    # position 1 (rounds 1 and 2; kept in round 2).
    assert s.acceptance_by_position == (2 / 3, 1 / 2)
    assert s.rounds_by_drafter == {DraftKind.LOOKUP: 6, DraftKind.NONE: 4}
    assert (s.prompt_tokens, s.prompt_tokens_reused, s.ttft_s) == (40, 0, 0.5)  # the first part's
    assert (s.wall_s, s.itl_p95_s, s.note) == (6.0, 0.5, "dropped the 2 oldest messages to fit the context")
