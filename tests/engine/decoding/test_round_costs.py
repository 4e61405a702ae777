"""A round's costs reach the cost model once, its overhead as the engine's clock says (a clock the test moves)."""
from __future__ import annotations

import pytest

from engine.drafting.costs import CostModel, RoundOutcome
from engine.decoding.round_costs import RoundCosts


class Recording(CostModel):
    """The real cost model, keeping what it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[RoundOutcome] = []

    def record(self, o: RoundOutcome) -> None:
        self.seen.append(o)
        super().record(o)


def outcome(draft_s: float, catchup_s: float, verify_s: float) -> RoundOutcome:
    return RoundOutcome(k=4, drafted=4, accepted=2, draft_s=draft_s, verify_s=verify_s, catchup_s=catchup_s)


def test_each_round_is_recorded_once_with_what_was_neither_drafting_nor_verifying():
    now = [10.0]
    costs = Recording()
    rc = RoundCosts(costs, lambda: now[0])
    rc.begin(outcome(0.2, 0.05, 0.5))
    now[0] = 11.0  # the round and its events took 1 s: 0.75 s of it drafting, catching up and verifying
    rc.settle()
    rc.settle()  # nothing open: nothing more
    rc.begin(outcome(0.1, 0.0, 0.3))
    now[0] = 11.6  # counted from where the last round was settled
    rc.settle()
    assert [o.overhead_s for o in costs.seen] == pytest.approx([0.25, 0.2])
    assert [(o.draft_s, o.catchup_s, o.verify_s) for o in costs.seen] == [(0.2, 0.05, 0.5), (0.1, 0.0, 0.3)]


def test_overhead_is_never_negative():
    now = [0.0]
    costs = Recording()
    rc = RoundCosts(costs, lambda: now[0])
    rc.begin(outcome(0.4, 0.0, 0.5))
    now[0] = 0.8  # the loop's own timers read more than the clock (they overlap it)
    rc.settle()
    assert costs.seen[0].overhead_s == 0.0


def test_a_round_left_open_when_the_reply_ends_is_recorded_as_measured():
    costs = Recording()
    rc = RoundCosts(costs, lambda: 5.0)
    rc.close()
    assert costs.seen == []
    measured = outcome(0.1, 0.0, 0.2)
    rc.begin(measured)
    rc.close()
    rc.close()
    assert costs.seen == [measured]
