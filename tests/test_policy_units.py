"""The cost model and Auto's parts, each against numbers worked out by hand in the test."""
from __future__ import annotations

import math

import pytest

from engine.decoding.events import DraftKind
from engine.decoding.policy import (
    MODEL_KEY, PROBE_BUDGET, Acceptance, AutoK, BlockCost, CostModel, DraftKey, DraftRequest, FixedK, NoDraft,
    RoundOutcome, make_policy,
)

LOOKUP3 = DraftKey(DraftKind.LOOKUP, 3)


def outcome(**kw) -> RoundOutcome:
    base = dict(k=0, drafted=0, accepted=0, draft_s=0.0, verify_s=0.1, overhead_s=0.0)
    return RoundOutcome(**{**base, **kw})


def test_draft_keys_read_as_kind_and_match_length():
    assert str(MODEL_KEY) == "model" and str(LOOKUP3) == "lookup:3" and str(DraftKey(DraftKind.LOOKUP)) == "lookup"


def test_block_cost_interpolates_and_extrapolates_in_proportion():
    b = BlockCost()
    assert b(4) is None
    b.add(2, 0.2)
    assert b(1) == pytest.approx(0.1) and b(2) == pytest.approx(0.2)  # below the smallest: in proportion
    b.add(8, 0.5)
    assert b(5) == pytest.approx(0.35)  # halfway between 2 (0.2) and 8 (0.5)
    assert b(16) == pytest.approx(1.0)  # beyond the largest: in proportion to it
    one = BlockCost()
    one.add(1, 0.3)
    assert one(1) == pytest.approx(0.3) and one(4) == pytest.approx(1.2)


def test_record_keeps_each_price_apart():
    c = CostModel()
    c.record(outcome(verify_s=0.1, overhead_s=0.004))  # a plain round
    assert c.verify_cost(1) == pytest.approx(0.1) and c.plain_overhead.value == pytest.approx(0.004)
    c.record(outcome(k=4, drafted=4, accepted=2, draft_s=0.2, verify_s=0.3, overhead_s=0.008,
                     catchup_s=0.6, catchup_tokens=30))
    assert c.verify_cost(5) == pytest.approx(0.3)
    assert c.draft_cost(1) == pytest.approx(0.05)  # 0.2 s over 4 drafted tokens, catch-up apart
    assert c.catchup_cost(30) == pytest.approx(0.6) and c.catchup_cost(15) == pytest.approx(0.3)
    assert c.overhead_per_draft_token.value == pytest.approx(0.001)  # (0.008 - 0.004) / 4
    assert c.round_overhead(0) == pytest.approx(0.004) and c.round_overhead(3) == pytest.approx(0.007)
    # A lookup round is not a drafting price: proposing is free.
    c.record(outcome(k=4, drafted=4, accepted=4, draft_s=0.4, verify_s=0.3, key=LOOKUP3))
    assert c.draft_cost(1) == pytest.approx(0.05)
    assert c.catchup_cost(0) == 0.0 and c.catchup_cost(-3) == 0.0


def test_unmeasured_prices_fall_back_to_what_is_known():
    c = CostModel()
    assert c.plain_token_cost() is None and c.estimated_plain_tokens_per_s() is None
    c.add_verify(1, 0.08)
    assert c.draft_cost(2) == pytest.approx(2 * 0.3 * 0.08)  # a third of a target step, twice
    assert c.catchup_cost(5) == pytest.approx(5 * 0.3 * 0.08)  # like drafting them
    c.overhead.add(0.02)  # starts at 0 worth one sample: (0 + 0.02) / 2
    assert c.plain_token_cost() == pytest.approx(0.09)  # before any plain round: the overall overhead
    assert c.estimated_plain_tokens_per_s() == pytest.approx(1 / 0.09)


def test_fixed_k_and_make_policy():
    with pytest.raises(ValueError):
        FixedK(-1)
    with pytest.raises(ValueError):
        make_policy(-2, CostModel(), True)
    f = FixedK(6)
    assert f.label == "fixed k=6" and f.drafts
    assert f.request(10) == DraftRequest(6, 6) and f.request(4) == DraftRequest(4, 4)
    assert f.request(0) == DraftRequest(0, 0) and f.request(-1) == DraftRequest(0, 0)
    assert not FixedK(0).drafts and not NoDraft().drafts and NoDraft().request(8) == DraftRequest()
    assert isinstance(make_policy(0, CostModel(), True), NoDraft)
    assert isinstance(make_policy("3", CostModel(), True), FixedK) and make_policy(3, CostModel(), True).k == 3
    auto = make_policy("auto", CostModel(), False)
    assert isinstance(auto, AutoK) and auto.drafter_is_model is False


def test_acceptance_windows_and_positions():
    a = Acceptance(k_max=4, window=32, pooled_window=32, prior=0.6, prior_weight=3)
    bonus = lambda n: 0.15 / math.sqrt(n + 3)  # noqa: E731  the optimism while evidence is thin
    assert a.pooled_value() == pytest.approx(0.6 + bonus(0))
    a.observe(verified=4, accepted=2)  # positions 0, 1 kept, 2 rejected, 3 never judged
    assert [len(d) for d in a.at] == [1, 1, 1, 0]
    assert a.pooled_value() == pytest.approx((2 + 1.8) / 6 + bonus(3))
    a.observe(verified=10, accepted=10)  # longer than the table: only its 4 positions
    assert [len(d) for d in a.at] == [2, 2, 2, 1]
    for _ in range(10):
        a.observe(verified=1, accepted=0)
    pooled = a.pooled_value()
    assert a.value(3) == pytest.approx(pooled)  # 1 judgement of its own: the pooled stands in
    assert a.value(0) == pytest.approx((2 + 2 * pooled) / (12 + 2))  # 12 of its own, shrunk to the pooled
    assert a.expected_tokens(2, perfect=True) == 3.0
    assert a.expected_tokens(1) == pytest.approx(1 + a.value(0))


def test_lookup_lengths_start_from_all_lookup_drafts():
    auto = AutoK(CostModel())
    for _ in range(20):
        auto.observe(outcome(k=8, drafted=8, accepted=8, key=DraftKey(DraftKind.LOOKUP, 5)))
    fresh = auto.table(DraftKey(DraftKind.LOOKUP, 2))
    assert fresh.pooled_value() > 0.9  # borrowed from the lookup parent, not the 0.6 prior
    assert auto.table(MODEL_KEY).pooled_value() < 0.8  # model drafts learn on their own


def test_probe_price_adds_the_catch_up_and_takes_off_the_expected_gain():
    c = CostModel()
    for n, v in {1: 0.10, 2: 0.12, 3: 0.14}.items():
        c.add_verify(n, v)
    c.draft_per_token.add(0.01)
    c.catchup.add(10, 0.05)
    auto = AutoK(c)
    e = auto.table(MODEL_KEY).expected_tokens(2)
    # Drafting 2 costs 0.04 more to verify and 0.02 to draft; reading 10 unseen tokens 0.05;
    # it saves (E - 1) plain rounds of 0.10.
    want = 0.04 + 0.02 + 0.05 - (e - 1) * 0.10
    assert auto._probe_net_cost(MODEL_KEY, 2, behind=11, with_draft_cost=True) == pytest.approx(max(0.0, want))
    assert auto._probe_net_cost(MODEL_KEY, 2, behind=1, with_draft_cost=True) == pytest.approx(max(0.0, want - 0.05))
    # A lookup probe: no drafting, no catch-up.
    assert auto._probe_net_cost(LOOKUP3, 2, behind=11, with_draft_cost=False) == pytest.approx(
        max(0.0, 0.04 - (auto.table(LOOKUP3).expected_tokens(2) - 1) * 0.10))


def test_probe_budget_and_idle_time():
    c = CostModel()
    c.add_verify(1, 0.1)
    auto = AutoK(c)
    auto.request(8)  # a decision creates the model drafts' probe state
    probe = auto.probes[MODEL_KEY]
    auto.observe(outcome(verify_s=0.1, draft_s=0.0, overhead_s=0.02))  # a plain round: time passes
    assert probe.idle_s == pytest.approx(0.12)
    assert probe.due(PROBE_BUDGET * 0.12) and not probe.due(PROBE_BUDGET * 0.12 + 1e-6)
    auto._probing.add(MODEL_KEY)
    auto.observe(outcome(k=2, drafted=2, accepted=2, verify_s=0.12))
    assert probe.idle_s == 0.0 and probe.again and probe.due(1e9)
    auto.observe(outcome(k=2, drafted=2, accepted=1, verify_s=0.12))  # not a probe, not fully accepted
    assert not probe.again


def test_prune_leaves_model_drafts_alone():
    auto = AutoK(CostModel())
    assert auto.prune(MODEL_KEY, 7) == 7
    assert auto.prune(LOOKUP3, 7) == 0  # nothing measured yet: plain decoding first
    assert auto.request(0) == DraftRequest(0, 0)
