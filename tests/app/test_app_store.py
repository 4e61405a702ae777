"""The app's storage, settings, exports and live stats, on a real SQLite file and a real tiny-model reply."""
from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

from app.history.export import to_markdown, trace_records
from app.history.records import Role
from app.history.reply_stats import Pace, ReplyStats, Tone, pace, verdict
from app.core.settings import AUTO, AppSettings, load_settings, save_settings, settings_path
from app.history.store import ChatStore, database_path
from app.core.theme import Theme
from app_support import SCHEMA_1, write_old_history
from engine.decoding.events import Certainty, DoneEvent, RoundEvent, TokenEvent
from engine.decoding.session import GenerationSettings, Session
from engine.llama.types import LoadSettings


@pytest.fixture(scope="module")
def events(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_threads=1))
    try:
        return list(s.chat([{"role": "user", "content": "the model is fast"}], GenerationSettings(draft_max=4, max_tokens=80)))
    finally:
        s.close()


def test_live_stats_agree_with_the_engine_totals(events):
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    live = ReplyStats(auto=False)
    for r in rounds:
        live.add_round(r)
    snap = live.snapshot()  # before the DoneEvent: computed from the rounds alone
    st = done.stats
    assert (snap.tokens, snap.rounds, snap.drafted, snap.accepted) == (st.tokens, st.rounds, st.drafted, st.accepted)
    assert snap.acceptance_rate == pytest.approx(st.acceptance_rate)
    assert snap.mean_accepted == pytest.approx(st.mean_accepted_per_round)
    assert snap.by_position == pytest.approx(st.acceptance_by_position)
    assert [n for n, _ in snap.speed_series][-1] == st.tokens
    live.finish(st)
    assert live.snapshot().finished and live.snapshot().tokens_per_s == st.tokens_per_s


def test_each_round_carries_the_running_totals_the_stats_end_with(events):
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    done = events[-1]
    totals = [r.totals for r in rounds]
    assert [t.rounds for t in totals] == list(range(1, len(rounds) + 1))
    tokens = [sum(r.emitted for r in rounds[: i + 1]) for i in range(len(rounds))]
    assert [t.tokens for t in totals] == tokens  # after each round, what it and those before emitted
    last, st = totals[-1], done.stats
    assert (last.tokens, last.rounds, last.drafted, last.accepted) == (st.tokens, st.rounds, st.drafted, st.accepted)
    assert last.acceptance_by_position == st.acceptance_by_position and last.by_drafter == st.rounds_by_drafter
    assert (last.draft_s, last.verify_s) == (st.draft_s, st.verify_s)


def test_verdict_in_words():
    base = ReplyStats(auto=False)
    assert "Waiting" in verdict(base.snapshot())

    def snap(speedup, auto, drafted=True):
        s = ReplyStats(auto)
        s.add_round(RoundEvent(1, 4, (1, 2, 3, 4) if drafted else (), ("a",) * (4 if drafted else 0), 2, (3, 4),
                               ("c", "d"), 3, 0.01, 0.02, "model", 50.0, speedup))
        return s.snapshot()

    assert verdict(snap(1.6, False)).startswith("Speculation is helping")
    slow = verdict(snap(0.6, False))
    assert "slower than plain decoding" in slow and "Auto would turn it off" in slow and slow.tone is Tone.BAD
    assert "Auto is shortening" in verdict(snap(0.6, True))
    assert "about the same" in verdict(snap(1.0, False))
    assert "Plain decoding" in verdict(snap(None, False, drafted=False))
    # One decision for the panel and Compare: 5% either side of 1 is "about the same".
    for x, word in ((1.14, Pace.HELPING), (1.05, Pace.HELPING), (1.049, Pace.SAME), (1.03, Pace.SAME),
                    (0.951, Pace.SAME), (0.95, Pace.SLOWER), (0.5, Pace.SLOWER)):
        assert pace(x) is word, x
        assert word in verdict(snap(x, False)), x


def test_verdict_says_when_auto_started_from_earlier_replies(events):
    done = events[-1]
    carried = ReplyStats(auto=True)
    carried.finish(dataclasses.replace(done.stats, draft_mode="auto", auto_rounds_before=37))
    text = verdict(carried.snapshot())
    assert text.endswith("Auto started from what it learned over 37 rounds of earlier replies.")
    fresh = ReplyStats(auto=True)
    fresh.finish(dataclasses.replace(done.stats, draft_mode="auto", auto_rounds_before=0))
    assert "earlier replies" not in verdict(fresh.snapshot())
    fixed = ReplyStats(auto=False)
    fixed.finish(dataclasses.replace(done.stats, draft_mode="fixed k=4", auto_rounds_before=37))
    assert "earlier replies" not in verdict(fixed.snapshot())


def test_store_keeps_every_token_and_round_and_reads_them_back(events):
    store = ChatStore()
    conv = store.new_conversation()
    user = store.add_message(conv.id, Role.USER, "the model is fast")
    reply = store.add_message(conv.id, Role.ASSISTANT, "", "tiny-target.gguf", "tiny-drafter.gguf")
    # Written round by round, as the window does; a second connection sees each batch at once.
    batch_rounds, batch_tokens = [], []
    for e in events:
        if isinstance(e, RoundEvent):
            if batch_rounds:
                store.append(reply.id, batch_rounds, batch_tokens)
            batch_rounds, batch_tokens = [e], []
        elif isinstance(e, TokenEvent):
            batch_tokens.append(e)
    store.append(reply.id, batch_rounds, batch_tokens)
    reader = sqlite3.connect(database_path())
    n_tokens = sum(isinstance(e, TokenEvent) for e in events)
    assert reader.execute("SELECT COUNT(*) FROM tokens").fetchone()[0] == n_tokens
    assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # Before the reply finished (as after a crash): the tokens still make the reply.
    crashed = ChatStore().messages(conv.id)[1]
    assert crashed.text == "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert "interrupted" in crashed.error

    done = events[-1]
    store.finish(reply.id, done, done.text)
    store.set_title_if_default(conv.id, "about the model")
    store.close()
    again = ChatStore()
    msgs = again.messages(conv.id)
    assert [m.role for m in msgs] == [Role.USER, Role.ASSISTANT] and msgs[0].id == user.id
    got = msgs[1]
    assert got.tokens == [e for e in events if isinstance(e, TokenEvent)]
    assert list(got.rounds.values()) == [e for e in events if isinstance(e, RoundEvent)]
    assert got.stats == done.stats and got.finish_reason == done.finish_reason and got.text == done.text
    assert [c.title for c in again.conversations("model")] == ["about the model"]
    assert again.conversations("no such words") == []
    assert again.conversations("100%") == []  # LIKE wildcards are matched literally
    again.delete(conv.id)
    assert again.conversations() == [] and reader.execute("SELECT COUNT(*) FROM tokens").fetchone()[0] == 0


def test_exports_markdown_and_a_jsonl_trace(events):
    store = ChatStore()
    conv = store.new_conversation("Trace me")
    store.add_message(conv.id, Role.USER, "the model is fast")
    reply = store.add_message(conv.id, Role.ASSISTANT, "", "tiny-target.gguf", "tiny-drafter.gguf")
    store.append(reply.id, [e for e in events if isinstance(e, RoundEvent)], [e for e in events if isinstance(e, TokenEvent)])
    store.finish(reply.id, events[-1], events[-1].text)
    msgs = store.messages(conv.id)
    md = to_markdown(conv, msgs)
    assert md.startswith("# Trace me") and events[-1].text in md and "tokens/s" in md
    records = [json.loads(json.dumps(r)) for r in trace_records(conv, store.tree(conv.id))]
    types = [r["type"] for r in records]
    assert types[0] == "conversation" and types.count("message") == 2 and types[-1] == "done"
    engine_stream = [e.to_dict() for e in events[:-1]]
    got = [{k: v for k, v in r.items() if k != "message"} for r in records if r["type"] in ("round", "token")]
    assert got == engine_stream  # the trace is the engine's own event stream, in order


def test_settings_round_trip_and_a_damaged_file_is_set_aside():
    s = AppSettings(target="/m/t.gguf", drafter="lookup", draft_max=7, temperature=0.7, seed=5, theme=Theme.DARK,
                    show_rejected=True)
    save_settings(s)
    assert load_settings() == (s, None)
    assert [p.name for p in settings_path().parent.iterdir()] == ["settings.json"]  # no temporary left over
    # Values out of range fall back one by one; unknown keys are ignored.
    raw = json.loads(settings_path().read_text())
    raw.update(draft_max=99, top_p=7, unknown=1, theme="purple")
    settings_path().write_text(json.dumps(raw))
    loaded, note = load_settings()
    assert note is None and loaded.draft_max == AUTO and loaded.top_p == 0.95 and loaded.theme == Theme.SYSTEM
    assert loaded.temperature == 0.7
    settings_path().write_bytes(b"\x00\xff garbage")
    loaded, note = load_settings()
    assert loaded == AppSettings() and "damaged" in note
    kept = [p for p in settings_path().parent.iterdir() if p.name.startswith("settings.json.damaged-")]
    assert len(kept) == 1 and not settings_path().exists()


def test_errors_become_notices_that_say_what_to_do():
    from app.core.errors import Action, explain
    from engine.errors import ContextFullError, IncompatiblePairError, ModelFileError, ModelLoadError

    cases = [
        (ModelFileError("x.gguf is damaged or truncated"), Action.OPEN_MODELS, "Download it again"),
        (IncompatiblePairError("d cannot draft for t: vocabulary type differs"), Action.OPEN_MODELS, "prompt lookup"),
        (ContextFullError("the message is too long"), Action.NEW_CHAT, "Start a new chat"),
        (ModelLoadError("llama.cpp could not load t.gguf: failed to allocate buffer"), Action.OPEN_MODELS,
         "Not enough memory"),
        (ModelLoadError("unknown model architecture: 'xyz'"), Action.OPEN_MODELS, "architecture"),
        (MemoryError(), Action.OPEN_MODELS, "smaller model"),
    ]
    for exc, action, words in cases:
        n = explain(exc)
        assert n.action == action and words in n.text, (exc, n)


def test_a_schema_1_database_is_upgraded_in_place_keeping_its_chats():
    path = write_old_history(SCHEMA_1)
    store = ChatStore()
    assert store.notice is None  # upgraded, not set aside
    reply = store.messages(1)[1]
    assert [t.text for t in reply.tokens] == ["yo"] and reply.tokens[0].runner_up is None
    assert sqlite3.connect(path).execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == "5"
    store.close()


def test_verdict_counts_a_late_first_token(events):
    """A reply as fast as plain decoding after its first token, which came 0.2 s later than plain decoding's would
    have, is not "about the same": the wait is named and the verdict is "slower" (values written here)."""
    done = events[-1]
    assert done.stats.first_token_delay_s is not None  # the engine prices it for every reply

    def final(speedup, delay, drafted=12):
        s = ReplyStats(auto=True)
        s.finish(dataclasses.replace(done.stats, draft_mode="auto", estimated_speedup=speedup, drafted=drafted,
                                     first_token_delay_s=delay, certainty=Certainty.SETTLED, auto_rounds_before=0))
        return verdict(s.snapshot())

    late = final(1.0, 0.2)
    assert late == "Speculation was slower than plain decoding here: its first token came 0.20 s later than plain " \
                   "decoding's would have (then 1.00×)." and late.tone is Tone.BAD
    assert "about the same" in final(1.0, 0.09)  # under 0.1 s a person does not notice it
    helping = final(1.6, 0.25)
    assert helping.startswith("Speculation is helping") and "0.25 s later" in helping and helping.tone is Tone.GOOD
    plain = final(None, 0.3, drafted=0)  # Auto read ahead and never drafted: the wait is all there is to say
    assert plain == "Speculation was slower than plain decoding here: its first token came 0.30 s later than plain " \
                    "decoding's would have." and plain.tone is Tone.BAD
    assert "later" not in final(1.0, None) and "later" not in final(1.0, -0.05)
