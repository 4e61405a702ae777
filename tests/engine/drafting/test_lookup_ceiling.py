"""scripts/lookup_ceiling.py's ceiling and coverage on hand-made traces, against values worked out by hand."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from engine.decoding.replay import Trace, fixed_policy, linear_profile, simulate
from tree import ROOT

_spec = importlib.util.spec_from_file_location("lookup_ceiling", ROOT / "scripts" / "lookup_ceiling.py")
lookup_ceiling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lookup_ceiling)

#: Verifying n tokens costs 1 + n: a plain step 2, a block of 4 costs 5.
PROFILE = linear_profile("test", 1.0, 1.0, 0.0)


def test_no_proposals_is_plain_decoding():
    assert lookup_ceiling.ceiling(Trace("t", "c", "0" * 6), PROFILE) == (6, 12.0)


def test_the_ceiling_keeps_right_tokens_only_where_they_pay():
    # 8 tokens. At 0 lookup proposes 6 with 3 right; at 4, 5 with 4 right; at 5, 4 with 1 right.
    # Best path: keep 3 at 0 (verify 4 = 5, to position 4), keep 3 of the 4 at 4 (verify 4 = 5,
    # to 8): 10, against 16 plain. Keeping all 4 at 4 emits 5 but only 4 remain: also verify 5 = 6.
    trace = Trace("t", "c", "0" * 8, {0: (2, 6, 3), 4: (3, 5, 4), 5: (2, 4, 1)})
    assert lookup_ceiling.ceiling(trace, PROFILE) == (8, 10.0)
    assert lookup_ceiling.coverage(trace) == 7  # positions 0-2 and 4-7 (5 is inside 4's run)


def test_the_ceiling_is_never_below_a_fixed_k_replayed_on_the_same_trace():
    trace = Trace("t", "c", "0" * 10, {1: (2, 4, 4), 2: (3, 3, 3), 6: (2, 5, 2), 7: (2, 2, 0)})
    n, seconds = lookup_ceiling.ceiling(trace, PROFILE)
    assert n == 10
    for k in range(17):
        assert n / seconds >= simulate(trace, PROFILE, fixed_policy(k), "lookup").rate - 1e-12


@pytest.mark.parametrize("k,want", [(0, 1.0), (1, 4 / 3), (3, 8 / 5)])
def test_all_accepted_speedup(k, want):
    assert lookup_ceiling.all_accepted_speedup(k, PROFILE) == pytest.approx(want)
