"""A round's costs, accounted in one place: what the cost model (engine.drafting.policy.CostModel) learns.

The loop (engine.decoding.speculative) times drafting and verifying as they happen, and the policy and
control rounds judge a round from those at once, before the next draft. The rest of a round (its events,
the stop-string watch, the stats: the engine's overhead) is known only once its events are out; the
RoundCosts of a reply adds it and hands each round to the cost model exactly once, a round whose consumer
stopped listening included (it was paid for all the same).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from engine.drafting.costs import CostModel, RoundOutcome


class RoundCosts:
    """One reply's rounds on their way to the cost model; `clock` is engine time (the consumer's taken out)."""

    def __init__(self, costs: CostModel, clock: Callable[[], float]) -> None:
        self.costs, self.clock = costs, clock
        self._start = clock()  # where the round in progress began, by `clock`
        self._open: RoundOutcome | None = None  # the round in progress, as the loop measured it

    def begin(self, measured: RoundOutcome) -> None:
        """The loop yielded a round (drafting and verifying timed; its events not out yet)."""
        self._open = measured

    def settle(self) -> None:
        """The round's events are out: its overhead is everything that was neither drafting nor verifying."""
        now, o = self.clock(), self._open
        if o is None:
            return
        self._open = None
        overhead = max(0.0, now - self._start - o.draft_s - o.catchup_s - o.verify_s)
        self.costs.record(replace(o, overhead_s=overhead))
        self._start = now

    def close(self) -> None:
        """The reply ended: a round still open (its consumer stopped listening mid-round) is recorded as measured."""
        if self._open is not None:
            o, self._open = self._open, None
            self.costs.record(o)
