"""A reply read back from the store reads its token and round rows only when asked (opening a long chat
must not build every event first), and gives then exactly what was written: values written out here."""
from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.chat.chat_view import ChatView, ViewOptions  # noqa: E402
from app.chat.message_labels import footer  # noqa: E402
from app.chat.token_story import token_story  # noqa: E402
from app.core.theme import Mark  # noqa: E402
from app.history.records import UNREADABLE, Role, round_from_dict  # noqa: E402
from app.history.reply_stats import Tone  # noqa: E402
from app.history.store import ChatStore  # noqa: E402
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent, TokenSource  # noqa: E402
from chat_view_support import (PIECES, SHOWN, TEXT, make_view, merged, rounds_for, stats,  # noqa: E402
                                tokens_of)

A, C, B, T = TokenSource.ACCEPTED, TokenSource.CORRECTION, TokenSource.BONUS, TokenSource.TARGET
#: Round 1 drafted four and kept two (then a correction); round 2 kept all four (then a bonus); round 3 plain.
TOKENS = [TokenEvent("Hi", 101, A, 1, 0.9, 0.8, 0), TokenEvent(" there", 102, A, 1, 0.8, 0.7, 1),
          TokenEvent(",", 103, C, 1, 0.6, 0.1, 2, 7, 0.12),
          TokenEvent(" how", 104, A, 2, 0.95, 0.9, 3), TokenEvent(" are", 105, A, 2, 0.9, 0.85, 4),
          TokenEvent(" you", 106, A, 2, 0.99, 0.97, 5), TokenEvent(" doing", 107, A, 2, 0.7, 0.6, 6),
          TokenEvent("?", 108, B, 2, 0.5, None, 7), TokenEvent("\n", 109, T, 3, 0.4, None, 8)]
ROUNDS = [RoundEvent(1, 4, (101, 102, 9, 10), ("Hi", " there", "!", " How"), 2, (9, 10), ("!", " How"), 3,
                     0.004, 0.02, "model", 20.0, 1.5),
          RoundEvent(2, 4, (104, 105, 106, 107), (" how", " are", " you", " doing"), 4, (), (), 5,
                     0.003, 0.021, "model", 25.0, 0.9),
          RoundEvent(3, 0, (), (), 0, (), (), 1, 0.0, 0.018, "none", 24.0, None)]
TEXT_1 = "Hi there, how are you doing?\n"


def store_reply(store: ChatStore, tokens, rounds, done: DoneEvent | None, text: str) -> int:
    conv = store.new_conversation()
    store.add_message(conv.id, Role.USER, "hello")
    m = store.add_message(conv.id, Role.ASSISTANT, "", "t.gguf", "d.gguf")
    store.append(m.id, rounds, tokens)
    store.finish(m.id, done, text)
    return conv.id


def reads(store: ChatStore) -> list[str]:
    """Every statement the store runs from now on."""
    seen: list[str] = []
    store.db.set_trace_callback(seen.append)
    return seen


def touches(statements: list[str], table: str) -> bool:
    return any(f"FROM {table} " in s for s in statements)


def test_opening_reads_no_token_or_round_rows_and_asking_gives_them_as_written():
    store = ChatStore()
    conv = store_reply(store, TOKENS, ROUNDS, None, TEXT_1)
    seen = reads(store)
    _, m = store.messages(conv)
    assert not touches(seen, "tokens") and not touches(seen, "rounds")
    assert m.text == TEXT_1 and m.finish_reason == FinishReason.CANCELLED  # a reply without totals reads as stopped
    assert m.tokens == [
        TokenEvent("Hi", 101, A, 1, 0.9, 0.8, 0), TokenEvent(" there", 102, A, 1, 0.8, 0.7, 1),
        TokenEvent(",", 103, C, 1, 0.6, 0.1, 2, 7, 0.12), TokenEvent(" how", 104, A, 2, 0.95, 0.9, 3),
        TokenEvent(" are", 105, A, 2, 0.9, 0.85, 4), TokenEvent(" you", 106, A, 2, 0.99, 0.97, 5),
        TokenEvent(" doing", 107, A, 2, 0.7, 0.6, 6), TokenEvent("?", 108, B, 2, 0.5, None, 7),
        TokenEvent("\n", 109, T, 3, 0.4, None, 8)]
    assert touches(seen, "tokens") and not touches(seen, "rounds")
    assert list(m.rounds) == [1, 2, 3]
    r1, r2, r3 = m.rounds.values()
    assert (r1.k, r1.drafted, r1.drafted_text, r1.accepted, r1.rejected, r1.rejected_text, r1.emitted) == \
        (4, (101, 102, 9, 10), ("Hi", " there", "!", " How"), 2, (9, 10), ("!", " How"), 3)
    assert (r2.accepted, r2.emitted, r2.tokens_per_s, r2.estimated_speedup) == (4, 5, 25.0, 0.9)
    assert (r3.k, r3.drafted, r3.drafter, r3.verify_s, r3.estimated_speedup) == (0, (), "none", 0.018, None)
    n = len(seen)
    assert m.tokens[2].runner_up == 7 and m.rounds[2].drafted_text[3] == " doing" and len(seen) == n  # read once


def test_a_footer_with_the_engines_totals_reads_no_rounds_and_one_without_them_counts_the_rounds():
    store = ChatStore()
    done = DoneEvent(FinishReason.STOP, TEXT_1, stats(9))
    with_totals = store_reply(store, TOKENS, ROUNDS, done, TEXT_1)
    without = store_reply(store, TOKENS, ROUNDS, None, TEXT_1)
    seen = reads(store)
    ft = footer(store.messages(with_totals)[1])
    assert (ft.numbers, ft.chip, ft.tone) == ("42.5 tok/s · 67% accepted", "helping", Tone.GOOD)  # stats(): 20 of 30
    assert not touches(seen, "rounds")
    # From the rounds alone: the last round's speed (24.0), 6 of 8 drafted kept, the last estimate said (0.9x).
    ft = footer(store.messages(without)[1])
    assert (ft.numbers, ft.chip, ft.tone) == ("24.0 tok/s · 75% accepted · model 2 · plain 1 rounds", "slower", Tone.BAD)
    assert ft.sentence == "Speculation is slower than plain decoding here (0.90×): Auto would turn it off."


def test_a_stored_chat_renders_as_the_one_it_was_written_from(qtbot):
    store = ChatStore()
    rounds = rounds_for(len(PIECES))
    conv = store_reply(store, tokens_of(PIECES), [rounds[n] for n in sorted(rounds)],
                       DoneEvent(FinishReason.STOP, TEXT, stats(len(PIECES))), TEXT)
    seen = reads(store)
    v = make_view(qtbot)
    v.show_messages(store.messages(conv))
    assert merged(v) == SHOWN
    assert not touches(seen, "rounds")  # neither the text nor the footer needed them
    v.set_options(ViewOptions(show_rejected=True))
    frags = list(v.token_fragments())
    # Each round rejected "no⏎" (rounds_for): shown before the corrections 2, 6, ..., the last at the end.
    rejected = [i for i, f in enumerate(frags) if f.mark == Mark.REJECTED]
    assert [frags[i + 1].index for i in rejected[:-1]] == [2, 6, 10, 14, 18, 24, 26, 31, 35]
    assert all(frags[i].text == "no⏎" for i in rejected) and rejected[-1] == len(frags) - 1
    v.set_options(ViewOptions(highlight=False))
    assert merged(v) == SHOWN


def test_unreadable_rows_cost_the_token_view_not_the_text(qtbot):
    store = ChatStore()
    conv = store_reply(store, TOKENS, ROUNDS, DoneEvent(FinishReason.STOP, TEXT_1, stats(9)), TEXT_1)
    reply_id = store.messages(conv)[1].id
    store.db.execute("UPDATE tokens SET source='teleported' WHERE message_id=? AND idx=4", (reply_id,))
    m = store.messages(conv)[1]
    assert m.error == ""  # nothing read yet
    v: ChatView = make_view(qtbot)
    v.show_messages([m])
    assert m.tokens == [] and m.rounds == {} and m.error == UNREADABLE
    assert "Hi there, how are you doing?" in v.toPlainText() and f"({UNREADABLE})" in v.toPlainText()
    assert list(v.token_fragments()) == []

    # A damaged round: the tokens stay on screen and keep their stories, without the round's draft.
    store.db.execute("UPDATE tokens SET source='accepted' WHERE message_id=? AND idx=4", (reply_id,))
    store.db.execute("UPDATE rounds SET data='{\"round\": 1' WHERE message_id=? AND round=1", (reply_id,))
    m = store.messages(conv)[1]
    v.show_messages([m])
    assert [f.text for f in v.token_fragments()][:3] == ["Hi", " there", ","]
    story = token_story(m, Mark.CORRECTION, 2, 1)
    assert "token “,” (id 103), position 3 in the reply" in story and "round 1 draft" not in story
    assert m.rounds == {} and m.error == UNREADABLE and len(m.tokens) == 9


def test_a_round_where_the_drafter_looked_tells_its_story_and_the_store_keeps_it():
    """Round 3 drafted nothing: Auto's drafter caught up and guessed 4 of the reply's last 6 tokens (a look,
    engine.drafting.policy.DraftRequest.look); its 80 ms were reading, not drafting."""
    looked = [*ROUNDS[:2], dataclasses.replace(ROUNDS[2], looked=(6, 4), draft_s=0.08)]
    store = ChatStore()
    conv = store_reply(store, TOKENS, looked, DoneEvent(FinishReason.STOP, TEXT_1, stats(9)), TEXT_1)
    m = store.messages(conv)[1]
    story = token_story(m, Mark.TARGET, 8, 3)
    assert m.rounds[3].looked == (6, 4) and m.rounds[1].looked is None
    assert "the drafter caught up and guessed 4 of the reply's last 6 tokens" in story
    assert "reading 80.0 ms · verifying 18.0 ms" in story and "no draft (plain decoding)" not in story
    assert "drafting 4.0 ms" in token_story(m, Mark.ACCEPTED, 0, 1)  # a round that drafted
    for bad in (["x", 1], [1], [True, 2], "6,4", {"n": 6}):
        assert round_from_dict(dict(ROUNDS[2].to_dict(), looked=bad)).looked is None
