"""When the machine's load changed during a reply, the window says the verdict is uncertain instead of
printing a number (issue 20, item 1): a helper running an overloaded benchmark beside the app once saw
"Speculation is helping: about 21.56x" for a reply that ran at 0.6 tok/s.

The reply is a real one on the tiny pair; its totals are then given the certainty and speedup a load
change leaves (the engine's side of that is tests/engine/decoding/test_verdict.py, with a clock the test controls).
"""
from __future__ import annotations

import dataclasses
import os
import re

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app_support import install_tiny, open_window, send  # noqa: E402

from app.chat.message_labels import footer  # noqa: E402
from app.history.reply_stats import ReplyStats, Tone  # noqa: E402
from engine.decoding.events import Certainty  # noqa: E402
from engine.frontends.cli import stats_line  # noqa: E402

NUMBER = re.compile(r"\d")


def shown(qtbot, w, reply, certainty: Certainty, speedup: float):
    reply.stats = dataclasses.replace(reply.stats, certainty=certainty, estimated_speedup=speedup)
    w.stats.show_snapshot(ReplyStats.of_rounds([], reply.stats, True).snapshot())
    return w.stats.fields["speedup"].text(), w.stats.verdict.text(), w.stats.speed_chart.plain, footer(reply)


def test_a_reply_whose_load_changed_gets_no_number_anywhere(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, draft_max=4)
    w = open_window(qtbot)
    reply = send(qtbot, w)
    assert reply.stats.drafted > 0

    speedup, sentence, plain, foot = shown(qtbot, w, reply, Certainty.LOAD_CHANGED, 21.56)
    assert speedup == "uncertain (load changed)"
    assert "changed" in sentence and not NUMBER.search(sentence) and "helping:" not in sentence
    assert plain is None  # no plain-decoding line in the chart
    assert (foot.chip, foot.tone) == ("load changed", Tone.NEUTRAL) and not NUMBER.search(foot.sentence)
    assert "21.56" not in stats_line(reply_done(reply))

    # The same reply with a settled estimate: the number, the verdict and the line are back.
    speedup, sentence, plain, foot = shown(qtbot, w, reply, Certainty.SETTLED, 1.5)
    assert speedup == "1.50×" and "1.50×" in sentence and plain is not None
    assert (foot.chip, foot.tone) == ("helping", Tone.GOOD)


def reply_done(reply):
    from engine.decoding.events import DoneEvent

    return DoneEvent(reply.finish_reason, reply.content, reply.stats)


def test_a_reply_that_ran_on_fewer_threads_says_so_and_the_store_keeps_it(qtbot, tiny, isolated_home):
    """The engine's rounds say when the target ran on fewer threads than loaded (other programs kept cores
    busy: engine.llama.thread_governor); the stats panel says so beside the speed, and a stored round
    reads back the same."""
    from app.history.records import round_from_dict

    install_tiny(tiny, isolated_home, draft_max=4)
    w = open_window(qtbot)
    reply = send(qtbot, w)
    rounds = [reply.rounds[n] for n in sorted(reply.rounds)]
    assert rounds and all(r.threads is None for r in rounds)  # a quiet machine (and 1 thread in the tests)
    w.stats.show_snapshot(ReplyStats.of_rounds(rounds, reply.stats, True).snapshot())
    assert "threads" not in w.stats.fields["speed"].text()

    fewer = [*rounds[:-1], dataclasses.replace(rounds[-1], threads=(1, 2))]
    stored = [round_from_dict(r.to_dict()) for r in fewer]
    assert stored[-1].threads == (1, 2) and stored[0].threads is None
    w.stats.show_snapshot(ReplyStats.of_rounds(stored, reply.stats, True).snapshot())
    assert "on 1 of 2 CPU threads: other programs keep cores busy" in w.stats.fields["speed"].text()
    bad = dict(rounds[-1].to_dict(), threads=["x"])
    assert round_from_dict(bad).threads is None
