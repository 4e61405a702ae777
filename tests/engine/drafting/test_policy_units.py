"""The cost model and Auto's parts, each against numbers worked out by hand in the test."""
from __future__ import annotations

import math
from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.drafting.draft_choice import DraftKind
from engine.drafting.draft_choice import DraftLength
from engine.drafting.acceptance import Acceptance
from engine.drafting.policy import _Probe, PROBE_BUDGET, REPLY_HORIZON, AutoK, FixedK, NoDraft, make_policy
from engine.drafting.request import MODEL_KEY, DraftKey, DraftRequest, lookup_key
from engine.drafting.costs import BlockCost, CostModel, Ewma, QuietDrafter, RoundOutcome, pair_class
from engine.drafting.costs import DepthLine

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


def test_the_drafters_catch_up_follows_the_speed_of_plain_rounds():
    """A catch-up timed quiet is charged at the speed plain rounds measure now; one timed under load is kept
    at the calibration's speed; drafting rounds, whose shape may be wrong, do not move it (values by hand)."""
    c = CostModel()
    c.add_verify(1, 0.1)
    c.add_verify(4, 0.2)
    c.catchup.add(100, 0.5)  # timed at load, on a quiet machine
    for _ in range(40):  # drafting rounds 1.5x slower than the shape says (a wrong shape, or load)
        c.record(outcome(k=3, drafted=3, accepted=3, draft_s=0.03, verify_s=0.3))
    assert c.catchup_cost(100) == pytest.approx(0.5)
    for _ in range(40):  # the machine slows 3x: every plain round takes 0.3 s
        c.record(outcome(verify_s=0.3))
    assert c.plain_speed.value == pytest.approx(3.0, rel=1e-3)
    assert c.catchup_cost(100) == pytest.approx(1.5, rel=1e-3)
    assert c.catchup_cost(50) == pytest.approx(0.75, rel=1e-3)
    # Under that load a 200-token read takes 3 s: at the calibration's speed, 1 s.
    c.record(outcome(k=4, drafted=4, accepted=4, draft_s=0.1, verify_s=0.6, catchup_s=3.0, catchup_tokens=200))
    assert c.catchup(200) == pytest.approx(1.0, rel=1e-3)
    assert c.catchup_cost(200) == pytest.approx(3.0, rel=1e-3)
    # One quiet plain round moves that speed as fast as the target's (weight 0.3): 3 + 0.3 x (1 - 3) = 2.4.
    c.record(outcome(verify_s=0.1))
    assert c.catchup_cost(100) == pytest.approx(0.5 * 2.4, rel=1e-3)

def test_the_drafters_step_follows_the_speed_of_plain_rounds():
    """A drafting step timed while the machine was busy is charged at the speed plain rounds measure now
    (values by hand): calibrated at 20 ms beside a load that made the target 2x slow, a quiet machine
    pays 10 ms, and the draft a quiet machine times is kept at the calibration's speed."""
    c = CostModel()
    c.add_verify(1, 0.2)  # measured busy: the quiet step is 0.1 s
    c.add_verify(4, 0.5)
    c.draft_per_token.add(0.02)
    assert c.draft_cost(3) == pytest.approx(0.06)
    for _ in range(40):  # the load is gone: plain rounds take 0.1 s
        c.record(outcome(verify_s=0.1))
    assert c.plain_speed.value == pytest.approx(0.5, rel=1e-3)
    assert c.draft_cost(3) == pytest.approx(0.03, rel=1e-3)
    # Drafting 3 tokens in 0.024 s at that speed: 0.008 s a token now, 0.016 at the calibration's speed.
    c.draft_per_token = Ewma()
    c.record(outcome(k=3, drafted=3, accepted=3, draft_s=0.024, verify_s=0.25, key=MODEL_KEY))
    assert c.draft_per_token.value == pytest.approx(0.016, rel=1e-3)
    assert c.draft_cost(1) == pytest.approx(0.008, rel=1e-3)


def test_what_is_kept_of_the_drafter_moves_only_with_its_undisturbed_passes():
    """The drafter's kept step and reads (CostModel.quiet_drafter) follow rounds whose drafter passes got their
    share of the CPU, in seconds, whatever plain rounds say; today's price follows every round (values by
    hand). Found: a session drafting beside a test run wrote a 63 ms step for a drafter whose undisturbed
    step is 15-24 ms, and Auto priced the drafter out at every later launch."""
    c = CostModel()
    c.add_verify(1, 0.06)
    c.add_verify(5, 0.1)
    c.draft_per_token.add(0.015)
    c.catchup.add(16, 0.04)
    c.quiet_drafter = QuietDrafter.seeded(0.015, {16: 0.04})
    for _ in range(30):  # beside a busy process: steps of 60 ms, a 16-token read in 160 ms, no plain round
        c.record(outcome(k=4, drafted=4, accepted=4, draft_s=0.24, verify_s=0.4, key=MODEL_KEY, share=0.5,
                         draft_steps=4, draft_share=0.55, catchup_s=0.16, catchup_tokens=16))
    assert c.draft_cost(1) == pytest.approx(0.06, rel=1e-2)  # today's price: the busy step
    assert c.catchup_cost(16) == pytest.approx(0.16, rel=1e-2)
    assert c.quiet_drafter.step.value == pytest.approx(0.015)  # kept: untouched
    assert c.quiet_drafter.catchup(16) == pytest.approx(0.04)
    # An undisturbed round moves the kept figures by the Ewma's weight, 0.15 (the seed counts as 8 rounds).
    c.record(outcome(k=4, drafted=4, accepted=4, draft_s=0.08, verify_s=0.1, key=MODEL_KEY,
                     draft_steps=4, draft_share=0.95, catchup_s=0.048, catchup_tokens=16))
    assert c.quiet_drafter.step.value == pytest.approx(0.015 + 0.15 * (0.02 - 0.015))
    assert c.quiet_drafter.catchup(16) == pytest.approx(0.04 + 0.15 * (0.048 - 0.04))
    # A read of a size never kept starts its own figure; a lookup round's time is never a step.
    c.record(outcome(catchup_s=0.012, catchup_tokens=3, draft_share=0.9))
    c.record(outcome(k=4, drafted=4, accepted=4, draft_s=0.5, verify_s=0.1, key=LOOKUP3, draft_share=0.9))
    assert c.quiet_drafter.catchup.by_size[3].value == pytest.approx(0.012)
    assert c.quiet_drafter.step.value == pytest.approx(0.01575)


def test_a_step_is_the_drafters_time_over_its_passes_not_its_tokens():
    """Drafting that stops on an unsure token pays a pass for it and proposes nothing from it: 2 tokens in 3
    passes of 10 ms is a 10 ms step, not 15 (values by hand)."""
    c = CostModel()
    c.add_verify(1, 0.06)
    c.add_verify(3, 0.08)
    c.record(outcome(k=4, drafted=2, accepted=2, draft_s=0.03, verify_s=0.07, key=MODEL_KEY, draft_steps=3))
    assert c.draft_per_token.value == pytest.approx(0.01)
    assert c.quiet_drafter.step.value == pytest.approx(0.01)
    c.record(outcome(k=4, drafted=2, accepted=2, draft_s=0.02, verify_s=0.07, key=MODEL_KEY))  # steps not given
    assert c.draft_per_token.value == pytest.approx(0.01)


def test_a_fresh_key_is_as_sure_as_its_parent():
    """A lookup key never seen starts from its parent's posterior, mean and weight (up to PARENT_WEIGHT
    judgements), not from the parent's mean at a prior's weight of 2, whose long tail made three fresh
    keys each verify 15 tokens that were all rejected (values by hand)."""
    auto = AutoK(CostModel())
    parent = auto.table(DraftKey(DraftKind.LOOKUP))
    parent.observe(2, 2)  # prior (0.5, 2) + 2 kept: Beta(3, 1)
    assert parent.beta() == pytest.approx((3.0, 1.0))
    child = auto.table(DraftKey(DraftKind.LOOKUP, 5))
    # The child's prior weight is the parent's (4, above PRIOR_FLOOR and the faded prior), its mean 0.75.
    assert child.beta() == pytest.approx((3.0, 1.0))
    for _ in range(10):
        parent.observe(4, 3)  # 3 kept, 1 rejected each: Beta(33, 11) at most 16 judgements in the window...
    a, b = parent.beta()
    mean = a / (a + b)
    # ...and a child inherits at most 16 of them: 16 * 16 / (16 + 0) with no rounds of its own.
    assert auto.table(DraftKey(DraftKind.LOOKUP, 4)).beta() == pytest.approx((16 * mean, 16 * (1 - mean)))


def test_a_draft_is_at_most_twice_its_longest_run_plus_three():
    """A key's drafts are cut to 2 x its longest kept run of the last 32 rounds + 3 (4 before any, or its
    parent's); not where a wholly rejected draft costs at most one plain step more (values by hand)."""
    c = CostModel()
    for n in (1, 2, 4, 8, 16):
        c.add_verify(n, 0.1 * n)  # a CPU: n tokens cost n steps
    auto = AutoK(c)
    assert auto._reach(LOOKUP3, 16) == 4
    auto.table(LOOKUP3).observe(4, 4)
    assert auto._reach(LOOKUP3, 16) == 11
    assert auto._reach(LOOKUP3, 8) == 8
    assert auto._reach(DraftKey(DraftKind.LOOKUP, 4), 16) == 11  # a fresh key: its parent's (all lookups')
    auto.table(LOOKUP3).observe(11, 0)
    assert auto._reach(LOOKUP3, 16) == 11  # the longest run of the window still counts
    for _ in range(30):
        auto.table(LOOKUP3).observe(3, 1)
    assert auto._reach(LOOKUP3, 16) == 11  # round 32: the 4-token run of round 1 is in the window...
    auto.table(LOOKUP3).observe(3, 1)
    assert auto._reach(LOOKUP3, 16) == 5  # ...and at round 33 it has left
    assert auto._reach(MODEL_KEY, 16) == 4  # the model drafter's own runs: none yet
    auto.table(MODEL_KEY).observe(5, 5)
    assert auto._reach(MODEL_KEY, 16) == 13
    g = CostModel()
    for n in (1, 2, 4, 8, 16):
        g.add_verify(n, 0.1 + 0.005 * n)  # a GPU: a block costs about one token
    assert AutoK(g)._reach(LOOKUP3, 16) == 16
    h = CostModel()
    for n, v in {1: 0.1, 2: 0.15, 4: 0.2, 8: 0.4}.items():
        h.add_verify(n, v)
    assert AutoK(h)._reach(LOOKUP3, 16) == 4  # a fifth draft token: V(6) = 0.3 > 2 x V(1), not extended


def test_auto_is_cautious_where_a_long_draft_costs_more_than_three_tokens():
    """Cautious where verifying k_max + 1 tokens costs more than 3 x one token (values by hand)."""
    assert AutoK(CostModel()).cautious()  # nothing measured: cautious
    cpu, gpu = CostModel(), CostModel()
    for n in (1, 2, 4, 8, 16):
        cpu.add_verify(n, 0.1 * n)
        gpu.add_verify(n, 0.1 + 0.005 * n)
    assert AutoK(cpu).cautious() and not AutoK(gpu).cautious()
    edge = CostModel()  # V(5) exactly 3 x V(1) (binary fractions: no rounding), V(6) more
    for n, v in {1: 0.25, 2: 0.375, 3: 0.5, 5: 0.75, 6: 0.875}.items():
        edge.add_verify(n, v)
    assert not AutoK(edge, k_max=4).cautious()  # V(5) = 3 x V(1): not more
    assert AutoK(edge, k_max=5).cautious()  # V(6) is
    steep = CostModel()  # V(5) 0.35 > 3 x V(1), V(4) 0.29 is not
    for n, v in {1: 0.1, 2: 0.12, 4: 0.29, 5: 0.35}.items():
        steep.add_verify(n, v)
    assert AutoK(steep, k_max=4).cautious() and not AutoK(steep, k_max=3).cautious()
    # A cautious Auto's fresh keys inherit their parent's weight; a bold one's only its mean.
    assert AutoK(cpu).table(LOOKUP3).inherit == 16.0 and AutoK(gpu).table(LOOKUP3).inherit == 0.0


def test_a_cautious_reach_grows_while_a_rejected_draft_costs_at_most_one_plain_step_more():
    """V(n) flat to 8 tokens (0.2 s, twice one token's 0.1 s), then steep: from the start of 4, each
    draft token more is allowed while verifying it costs at most 2 x V(1) (not 2 x V(2), 0.229 s), up to
    the limit."""
    c = CostModel()
    for n, v in {1: 0.1, 8: 0.2, 9: 0.22, 16: 1.0}.items():
        c.add_verify(n, v)
    auto = AutoK(c)
    assert auto.cautious()
    assert auto._reach(LOOKUP3, 16) == 7  # 7 draft tokens: V(8) = 0.2 exactly; 8 would be V(9) = 0.22
    assert auto._reach(LOOKUP3, 6) == 6  # never past the limit
    assert auto._reach(LOOKUP3, 3) == 3


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
        make_policy(DraftLength.parse(-2), CostModel(), True)
    f = FixedK(6)
    assert f.label == "fixed k=6" and f.drafts
    assert f.request(10) == DraftRequest(6, 6) and f.request(4) == DraftRequest(4, 4)
    assert f.request(0) == DraftRequest(0, 0) and f.request(-1) == DraftRequest(0, 0)
    assert not FixedK(0).drafts and not NoDraft().drafts and NoDraft().request(8) == DraftRequest()
    assert isinstance(make_policy(DraftLength.parse(0), CostModel(), True), NoDraft)
    assert isinstance(make_policy(DraftLength.parse("3"), CostModel(), True), FixedK) and make_policy(DraftLength.parse(3), CostModel(), True).k == 3
    auto = make_policy(DraftLength.parse("auto"), CostModel(), False)
    assert isinstance(auto, AutoK) and auto.drafter_is_model is False


def test_acceptance_is_a_beta_posterior_that_rises_along_a_run():
    a = Acceptance(k_max=4, prior=(0.6, 2.0))
    # Fresh: Beta(1.2, 0.8); after j kept in a row the next is likelier, (1.2 + j) / (2 + j).
    assert a.beta() == pytest.approx((1.2, 0.8))
    assert a.values(4) == pytest.approx([0.6, 2.2 / 3, 3.2 / 4, 4.2 / 5])
    a.observe(verified=4, accepted=2)  # positions 0, 1 kept, 2 rejected, 3 never judged
    assert [len(d) for d in a.at] == [1, 1, 1, 0] and list(a.pooled) == [1, 1, 0]
    assert a.beta() == pytest.approx((3.2, 1.8)) and a.mean() == pytest.approx(3.2 / 5)
    # A position's own judgements count once each against the curve's 8.
    assert a.value(0) == pytest.approx((1 + 8 * 3.2 / 5) / 9)
    assert a.value(2) == pytest.approx((0 + 8 * 5.2 / 7) / 9)
    assert a.value(3) == pytest.approx(6.2 / 8)  # nothing of its own: the curve
    assert a.expected_tokens(2, perfect=True) == 3.0
    assert a.expected_tokens(2) == pytest.approx(1 + a.value(0) + a.value(0) * a.value(1))
    a.observe(verified=10, accepted=10)  # longer than the table: only its 4 positions
    assert [len(d) for d in a.at] == [2, 2, 2, 1] and len(a.pooled) == 7


def test_a_prior_fades_as_rounds_pass():
    a = Acceptance(k_max=1, prior=(0.8, 5.0))
    assert a.beta() == pytest.approx((4.0, 1.0))
    for _ in range(16):
        a.observe(verified=1, accepted=1)
    assert a.beta() == pytest.approx((0.8 * 2.5 + 16, 0.2 * 2.5))  # worth 5 * 16 / (16 + 16)
    for _ in range(32):
        a.observe(verified=1, accepted=1)
    assert a.beta() == pytest.approx((0.8 * 2 + 16, 0.2 * 2))  # 5 * 16 / 64 is below the floor of 2


def test_acceptance_windows_count_rounds():
    a = Acceptance(k_max=2, prior=(0.5, 2.0))
    a.observe(verified=2, accepted=2)  # round 1: two kept
    for _ in range(15):
        a.observe(verified=2, accepted=0)  # rounds 2-16: one rejection each
    assert list(a.pooled) == [1, 1] + [0] * 15
    a.observe(verified=2, accepted=0)  # round 17: round 1 leaves the pooled window, both its judgements
    assert list(a.pooled) == [0] * 16 and a.beta() == pytest.approx((1.0, 17.0))
    # A position keeps its own judgements of the last 32 rounds.
    assert [sum(ok for _, ok in d) for d in a.at] == [1, 1] and [len(d) for d in a.at] == [17, 1]
    for _ in range(15):
        a.observe(verified=2, accepted=0)
    assert [len(d) for d in a.at] == [32, 1]  # round 32: round 1 is still in
    a.observe(verified=2, accepted=0)
    assert [len(d) for d in a.at] == [32, 0]  # round 33: it is not
    assert a.value(1) == pytest.approx((1.0 + 1) / (18.0 + 1))  # the curve alone
    assert a.value(0) == pytest.approx((0 + 8 * 1.0 / 18.0) / (32 + 8))


def test_a_fresh_kind_starts_from_its_prior():
    auto = AutoK(CostModel())
    assert auto.table(MODEL_KEY).values(2) == pytest.approx([0.8, 5 / 6])  # Beta(4, 1)
    assert auto.table(LOOKUP3).values(2) == pytest.approx([0.5, 2 / 3])  # Beta(1, 1), through its parent
    assert auto.table(DraftKey(DraftKind.HISTORY, 2, 1)).values(1) == pytest.approx([0.5])


def test_lookup_lengths_start_from_all_lookup_drafts():
    auto = AutoK(CostModel())
    for _ in range(20):
        auto.observe(outcome(k=8, drafted=8, accepted=8, key=DraftKey(DraftKind.LOOKUP, 5)))
    fresh = auto.table(DraftKey(DraftKind.LOOKUP, 2))
    # Borrowed from the lookup parent (16 rounds of 8 kept and the prior's 1 of 2), not the 0.5 prior.
    assert fresh.mean() == pytest.approx(129 / 130)
    assert auto.table(MODEL_KEY).mean() == pytest.approx(0.8)  # model drafts learn on their own


def test_probe_price_adds_the_catch_up_and_takes_off_the_expected_gain():
    c = CostModel()
    for n, v in {1: 0.10, 2: 0.12, 3: 0.14}.items():
        c.add_verify(n, v)
    c.draft_per_token.add(0.01)
    c.catchup.add(10, 0.05)
    auto = AutoK(c)
    e = auto.table(MODEL_KEY).expected_tokens(2)
    # Drafting 2 costs 0.04 more to verify and 0.02 to draft; reading 10 unseen tokens 0.05, less
    # an allowance of 2% of a plain round (0.10) per token read; it saves (E - 1) plain rounds.
    want = 0.04 + 0.02 + (0.05 - 10 * 0.002) - (e - 1) * 0.10
    assert auto._probe_net_cost(MODEL_KEY, 2, behind=11, with_draft_cost=True) == pytest.approx(max(0.0, want))
    assert auto._probe_net_cost(MODEL_KEY, 2, behind=1, with_draft_cost=True) == pytest.approx(max(0.0, want - 0.03))
    # A lookup probe: no drafting, no catch-up.
    assert auto._probe_net_cost(LOOKUP3, 2, behind=11, with_draft_cost=False) == pytest.approx(
        max(0.0, 0.04 - (auto.table(LOOKUP3).expected_tokens(2) - 1) * 0.10))


def test_probe_budget_and_idle_time():
    c = CostModel()
    c.add_verify(1, 0.1)
    auto = AutoK(c)
    auto.request(8)  # a decision creates the model drafts' probe state
    probe = auto.probes[DraftKind.MODEL]
    assert probe.idle_s == math.inf and probe.due(1e9)  # never tried: due at once
    auto.observe(outcome(k=2, drafted=2, accepted=1, verify_s=0.12))  # model drafts ran
    assert probe.idle_s == 0.0 and not probe.again
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


# -- Auto's decisions, each against a rate worked out in the test ---------------------------------
class Fixed(Acceptance):
    """Acceptance held at given values per position (the collaborator, not the thing tested)."""

    def __init__(self, values: list[float]) -> None:
        super().__init__(k_max=len(values))
        self.held = values

    def values(self, k: int) -> list[float]:
        return self.held[:k]


def priced(verify: dict[int, float], draft: float = 0.0, plain_overhead: float = 0.0) -> CostModel:
    c = CostModel()
    for n, v in verify.items():
        c.add_verify(n, v)
    if draft:
        c.draft_per_token.add(draft)
    c.plain_overhead.add(plain_overhead)
    return c


def rate_by_hand(acc: list[float], k: int, verify: dict[int, float], draft: float) -> float:
    tokens, run = 1.0, 1.0
    for a in acc[:k]:
        run *= a
        tokens += run
    return tokens / (verify[k + 1] + draft * k)


def test_best_k_is_the_fastest_rate_and_must_beat_plain_by_the_margin():
    verify = {n: 0.10 + 0.02 * (n - 1) for n in range(1, 10)}
    acc = [0.9, 0.8, 0.5, 0.2, 0.1, 0.1, 0.1, 0.1]
    auto = AutoK(priced(verify, draft=0.01), k_max=8)
    auto.tables[MODEL_KEY] = Fixed(acc)
    rates = {k: rate_by_hand(acc, k, verify, 0.01) for k in range(0, 9)}
    want = max(range(1, 9), key=lambda k: rates[k])
    assert want == 2 and rates[2] > 1.02 * rates[0]
    assert auto.best_k(MODEL_KEY, 8, with_draft_cost=True) == 2
    assert auto.rate(MODEL_KEY, 2, True) == pytest.approx(rates[2])
    assert auto.rates(MODEL_KEY, 8, True) == pytest.approx([rates[k] for k in range(9)])
    assert len(auto.rates(MODEL_KEY, 20, True)) == 9  # no k beyond k_max
    assert auto.best_k(MODEL_KEY, 1, with_draft_cost=True) == 1  # the limit is a candidate itself
    assert auto.request(1) == DraftRequest(1, 1) and auto.request(8).model_k == 2
    # Without the drafting price (a free drafter) longer drafts pay.
    free = {k: rate_by_hand(acc, k, verify, 0.0) for k in range(0, 9)}
    assert auto.best_k(MODEL_KEY, 8, with_draft_cost=False) == max(range(1, 9), key=lambda k: free[k])


def test_a_tie_goes_to_the_shorter_draft_and_a_small_win_to_plain():
    flat = {1: 0.1, 2: 0.1, 3: 0.1}
    auto = AutoK(priced(flat), k_max=2)
    auto.tables[MODEL_KEY] = Fixed([0.9, 0.0])  # a second token never survives: E(1) == E(2), same price
    assert auto.best_k(MODEL_KEY, 2, with_draft_cost=False) == 1
    # 1% faster than plain is inside the 2% margin: plain decoding. E(1) = 1.0201 tokens in
    # 1.0201 / 1.01 of a plain round's time.
    auto = AutoK(priced({1: 0.1, 2: 0.1 * 1.0201 / 1.01}), k_max=1)
    auto.tables[MODEL_KEY] = Fixed([0.0201])
    assert auto.rate(MODEL_KEY, 1, False) == pytest.approx(1.01 * auto.rate(MODEL_KEY, 0, False))
    assert auto.best_k(MODEL_KEY, 1, with_draft_cost=False) == 0


def test_rates_of_seconds_long_rounds_and_unpriced_rounds():
    slow = {1: 4.0, 2: 4.2, 3: 4.4}  # rates below one token a second still compare
    auto = AutoK(priced(slow), k_max=2)
    auto.tables[MODEL_KEY] = Fixed([0.9, 0.9])
    assert auto.best_k(MODEL_KEY, 2, with_draft_cost=False) == 2
    assert AutoK(CostModel()).rate(MODEL_KEY, 2, True) == 0.0  # nothing measured: no rate
    c = priced({1: 0.1, 3: 0.2}, draft=0.05, plain_overhead=0.01)
    c.overhead_per_draft_token.add(0.002)
    auto = AutoK(c)
    assert auto.costs.round_cost(2, with_draft_cost=True) == pytest.approx(0.2 + 0.01 + 2 * 0.002 + 2 * 0.05)
    assert auto.costs.round_cost(2, with_draft_cost=False) == pytest.approx(0.2 + 0.01 + 2 * 0.002)
    assert c.plain_token_cost() == pytest.approx(0.1 + 0.01)  # a plain round pays no per-draft-token overhead


def test_even_a_perfect_drafter_that_cannot_win_is_never_probed():
    # Drafting costs more per token than a plain round: no acceptance can pay for it.
    c = priced({n: 0.1 for n in range(1, 4)}, draft=0.2)
    auto = AutoK(c, k_max=2)
    auto.tables[MODEL_KEY] = Fixed([0.0, 0.0])
    for _ in range(1000):  # never tried, so due all along: still never run
        assert auto.request(2).model_k == 0
        auto.observe(outcome(verify_s=0.1))
    assert auto.probes[DraftKind.MODEL].idle_s == math.inf


def test_a_first_look_dearer_than_a_plain_round_waits_for_its_budget():
    probe = _Probe()
    assert probe.due(0.05, first_look=0.1) and probe.idle_s == math.inf  # cheap: at once
    assert not probe.due(0.5, first_look=0.1) and probe.idle_s == 0.0  # dear: it starts earning
    probe.idle_s = 0.5 / PROBE_BUDGET
    assert probe.due(0.5, first_look=0.1) and not probe.due(0.5 + 1e-6, first_look=0.1)
    # Through request(), costs like this CPU's (drafting does not pay at the prior, a perfect drafter
    # would): a plain round costs 0.1 s, and of reading a 600-token backlog 2% of a plain round per
    # token is allowed, for at most the tokens the reply may still emit (REPLY_HORIZON = 256 where that is
    # not said): 0.512 s. At 0.514 s the look costs 0.002 s net, so it is due at once; at 1.2 s (due at
    # once before the allowance was capped: 1.198 s for 599 tokens) the charged 0.688 s outweighs a
    # plain round and the drafter waits for its budget; at 0.652 s the look's 0.14 s is dearer than a
    # plain round, though cheaper than a round that drafts one token. With 50 tokens left in the reply
    # the allowance is 0.1 s: a read of 0.102 s is due, one of 0.3 s is not. The backlog is the reply's own
    # tokens (judgeable: the drafter read the prompt); an unread prompt is priced over the tokens the reply
    # is expected to run (expected_remaining): 12 where it has run 12 or fewer, so 0.024 s of allowance.
    for catchup, remaining, first in ((0.514, None, 1), (1.2, None, 0), (0.652, None, 0), (0.102, 50, 1),
                                      (0.3, 50, 0), (0.514, 1000, 1), (1.2, 1000, 0)):
        c = priced({1: 0.1, 2: 0.15, 3: 0.2}, draft=0.03)
        c.catchup.add(599, catchup)
        auto = AutoK(c, k_max=2)
        assert auto.request(2, behind=600, remaining=remaining, judgeable=599).model_k == first, (catchup, remaining)
    for catchup, so_far, first in ((0.124, 12, 1), (0.126, 12, 0), (0.126, 0, 0), (0.144, 22, 1), (0.146, 22, 0)):
        c = priced({1: 0.1, 2: 0.15, 3: 0.2}, draft=0.03)
        c.catchup.add(599, catchup)
        auto = AutoK(c, k_max=2)
        assert auto.request(2, behind=600, remaining=None, judgeable=so_far).model_k == first, (catchup, so_far)


def test_a_probe_goes_through_request_and_only_a_full_accept_after_it_looks_again():
    c = priced({1: 0.1, 2: 0.11, 3: 0.12}, draft=0.01)
    auto = AutoK(c, k_max=2)
    auto.tables[MODEL_KEY] = Fixed([0.1, 0.1])  # not worth drafting, but a perfect drafter would be
    assert auto.request(2).model_k == 1  # never tried: a one-token probe at once
    auto.observe(outcome(k=1, drafted=1, accepted=0, verify_s=0.11))
    assert auto.request(2).model_k == 0  # another would cost 0.01 s net: not within budget yet
    probe = auto.probes[DraftKind.MODEL]
    probe.idle_s = 1e6  # long idle: a probe is due
    assert auto.request(2).model_k == 1
    auto.observe(outcome(k=1, drafted=1, accepted=0, verify_s=0.11))  # the probe, rejected
    assert not probe.again
    auto.observe(outcome(k=1, drafted=1, accepted=1, verify_s=0.11))  # not a probe: no "again"
    assert not probe.again
    probe.idle_s = 1e6
    assert auto.request(2).model_k == 1
    auto.observe(outcome(k=1, drafted=1, accepted=1, verify_s=0.11))  # a probe, fully accepted
    assert probe.again and auto.request(2).model_k == 1


def test_probe_due_at_exactly_the_budget():
    auto = AutoK(priced({1: 0.1}))
    auto.request(4)
    probe = auto.probes[DraftKind.MODEL]
    probe.idle_s = 0.5
    assert probe.due(PROBE_BUDGET * 0.5) and not probe.due(PROBE_BUDGET * 0.5 * 1.0001)


def test_catch_up_of_a_probe_counts_from_two_behind_and_never_for_lookup():
    c = priced({1: 0.1, 2: 0.12, 3: 0.14}, draft=0.01)
    c.catchup.add(1, 0.03)
    c.catchup.add(4, 0.06)
    auto = AutoK(c, k_max=2)
    auto.tables[MODEL_KEY] = Fixed([0.0, 0.0])  # no expected gain: the net cost is the cost
    auto.tables[LOOKUP3] = Fixed([0.0, 0.0])
    base = 0.04 + 0.02
    # The read less an allowance of 2% of a plain round (0.1 s) per token read.
    assert auto._probe_net_cost(MODEL_KEY, 2, behind=1, with_draft_cost=True) == pytest.approx(base)
    assert auto._probe_net_cost(MODEL_KEY, 2, behind=2, with_draft_cost=True) == pytest.approx(base + 0.03 - 0.002)
    assert auto._probe_net_cost(MODEL_KEY, 2, behind=5, with_draft_cost=True) == pytest.approx(base + 0.06 - 0.008)
    assert auto._probe_net_cost(LOOKUP3, 2, behind=5, with_draft_cost=False) == pytest.approx(0.04)


def test_observe_counts_rounds_and_idle_time_per_kind():
    auto = AutoK(priced({1: 0.1}))
    auto.request(4)
    auto.prune(LOOKUP3, 4)
    auto.observe(outcome(k=4, drafted=4, accepted=4, verify_s=0.2, key=LOOKUP3))  # each kind drafts once
    auto.observe(outcome(k=2, drafted=2, accepted=1, draft_s=0.02, verify_s=0.1, overhead_s=0.01,
                         catchup_s=0.05, catchup_tokens=9))
    assert auto.probes[DraftKind.LOOKUP].idle_s == pytest.approx(0.1 + 0.02 + 0.05 + 0.01)  # all of it, catch-up too
    assert auto.probes[DraftKind.MODEL].idle_s == 0.0
    # Another match length is the same kind: one budget for all lookup drafts.
    auto.observe(outcome(k=4, drafted=4, accepted=4, verify_s=0.2, key=DraftKey(DraftKind.LOOKUP, 5)))
    auto.observe(outcome(verify_s=0.1))
    assert auto.rounds_seen == 4
    # Model probe state: the lookup round and the plain round were idle time for model drafts.
    assert auto.probes[DraftKind.MODEL].idle_s == pytest.approx(0.2 + 0.1)
    # Lookup: the model round counted in full (drafting and catch-up included), then reset by its own round.
    assert auto.probes[DraftKind.LOOKUP].idle_s == pytest.approx(0.1)
    assert set(auto.probes) == {DraftKind.MODEL, DraftKind.LOOKUP}


def test_acceptance_defaults_and_a_full_accept_judges_only_what_was_verified():
    a = Acceptance(k_max=3)
    assert a.prior == (0.8, 5.0) and a.values(1) == pytest.approx([0.8])  # a model drafter's prior
    for _ in range(40):
        a.observe(verified=1, accepted=1)
    assert len(a.at[0]) == 32 and len(a.pooled) == 16 and len(a.at[1]) == 0
    assert a.value(0) == pytest.approx((32 + 8 * 17.6 / 18) / 40)  # Beta(1.6 + 16, 0.4)
    c = Acceptance(k_max=4)
    c.observe(verified=2, accepted=2)
    assert [len(d) for d in c.at] == [1, 1, 0, 0]


def test_lookup_tables_hang_off_the_lookup_kind_and_make_policy_keeps_the_costs():
    auto = AutoK(CostModel())
    auto.observe(outcome(k=3, drafted=3, accepted=3, key=LOOKUP3))
    assert len(auto.table(DraftKey(DraftKind.LOOKUP)).pooled) == 3 and len(auto.table(MODEL_KEY).pooled) == 0
    c = CostModel()
    assert make_policy(DraftLength.parse("auto"), c, True).costs is c
    assert AutoK(priced({n: 0.1 for n in range(1, 40)})).k_max == 16
    with pytest.raises(ValueError, match="^draft length must be 0 or more$"):
        FixedK(-1)
    assert CostModel().draft_cost(3) == 0.0  # nothing measured, nothing to price
    one = CostModel()
    one.catchup.add(1, 0.03)
    assert one.catchup_cost(0) == 0.0 and one.catchup_cost(1) == pytest.approx(0.03)


def test_lookup_match_lengths_are_learned_in_buckets():
    buckets = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 7: 5, 8: 8, 15: 8, 16: 16, 31: 16, 32: 32, 40: 32}
    assert {n: lookup_key(n) for n in buckets} == {n: DraftKey(DraftKind.LOOKUP, b) for n, b in buckets.items()}


def test_a_free_draft_set_aside_is_learned_from_the_tokens_its_round_emitted():
    k5 = DraftKey(DraftKind.LOOKUP, 5)

    def auto() -> AutoK:
        return AutoK(priced({1: 0.1, 2: 0.17, 4: 0.28, 8: 0.45, 16: 0.53}))

    seen, blind, wrong = auto(), auto(), auto()
    # A fresh key: not at once (it is judged unverified meanwhile); its first look earns a probe's budget
    assert seen.prune(k5, 8) == blind.prune(k5, 8) == 0
    for _ in range(2):
        seen.observe(outcome(verify_s=0.1, aside=((k5, 1, 1),)))  # plain rounds whose token the lookup had right
        blind.observe(outcome(verify_s=0.1))
        wrong.observe(outcome(verify_s=0.1, aside=((k5, 1, 0), (MODEL_KEY, 0, 0))))
    assert seen.table(k5).pooled == deque([1, 1]) and wrong.table(k5).pooled == deque([0, 0])
    assert seen.table(DraftKey(DraftKind.LOOKUP)).pooled == deque([1, 1])  # its parent learns it too
    assert seen.prune(k5, 8) == 5 and blind.prune(k5, 8) == 0 and wrong.prune(k5, 8) == 0  # 5: twice a run of 1, plus 3
    assert len(wrong.table(MODEL_KEY).pooled) == 0 and wrong.table(MODEL_KEY).rounds == 0  # nothing judged, nothing learned
    # judged for free, as a probe would have judged it: no probe of the kind is due for a while
    assert seen.probes[DraftKind.LOOKUP].idle_s == 0.0 and not seen.probes[DraftKind.LOOKUP].again
    # cautious costs (a block of 17 over 3 plain rounds): a free kind is never probed, its asides are its probes
    assert all(blind.prune(k5, 8) == 0 for _ in range(3)) and not blind._probing
    assert DraftKind.MODEL not in wrong.probes
    seen.observe(outcome(verify_s=0.1, drafted=2, accepted=1, key=MODEL_KEY, aside=((k5, 2, 2),)))
    assert seen.table(k5).pooled == deque([1, 1, 1, 1]) and list(seen.table(MODEL_KEY).pooled) == [1, 0]


def test_a_lookup_drafter_pair_never_asks_the_model_for_a_draft():
    auto = AutoK(priced({n: 0.1 for n in range(1, 10)}), drafter_is_model=False)
    auto.tables[MODEL_KEY] = Fixed([0.99] * 16)
    assert auto.request(8) == DraftRequest(0, 8)


def test_ewma_settles_on_its_first_samples():
    e = Ewma()
    e.add(1.0)
    e.add(0.0)
    assert e.value == pytest.approx(0.5)  # the second sample weighs 1/2
    e.add(1.0)
    assert e.value == pytest.approx(0.5 + (1.0 - 0.5) / 3)
    prior = Ewma(value=0.2, weight=3)
    prior.add(1.0)
    assert prior.value == pytest.approx(0.2 + 0.8 / 4)  # a prior worth three samples


def test_below_the_smallest_measured_block_the_price_is_in_proportion_to_it():
    b = BlockCost()
    b.add(2, 0.2)
    b.add(8, 0.5)
    assert b(1) == pytest.approx(0.1)


def test_a_one_token_draft_wins_and_is_not_mistaken_for_a_probe():
    verify = {n: 0.10 + 0.01 * (n - 1) for n in range(1, 10)}
    auto = AutoK(priced(verify, draft=0.01), k_max=8)
    auto.tables[MODEL_KEY] = Fixed([0.9] + [0.05] * 7)
    rates = {k: rate_by_hand([0.9] + [0.05] * 7, k, verify, 0.01) for k in range(9)}
    assert max(range(1, 9), key=lambda k: rates[k]) == 1
    assert auto.request(8).model_k == 1 and MODEL_KEY not in auto._probing


def test_a_probe_pays_for_the_backlog_the_drafter_must_read():
    c = priced({1: 0.1, 2: 0.11, 3: 0.12}, draft=0.01)
    c.catchup.add(100, 50.0)  # reading a long backlog is dear
    auto = AutoK(c, k_max=2)
    auto.tables[MODEL_KEY] = Fixed([0.2, 0.2])
    auto.request(2)
    auto.probes[DraftKind.MODEL].idle_s = 100.0  # budget 1.5 s: a probe without backlog fits, 50 s does not
    assert auto.request(2, behind=101).model_k == 0
    assert auto.request(2, behind=1).model_k == 1


def test_lookup_drafts_are_priced_without_the_model_drafters_cost():
    verify = {n: 0.1 for n in range(1, 6)}
    auto = AutoK(priced(verify, draft=1.0), k_max=4)  # a model draft step would cost ten target steps
    auto.tables[LOOKUP3] = Fixed([0.9] * 4)
    assert auto.prune(LOOKUP3, 4) == 4


def test_drafting_starts_behind_a_backlog_only_when_the_next_tokens_repay_reading_it():
    # Worked by hand: a plain round 0.1 s a token; a perfect one-token draft, 2 tokens for
    # 0.12 + 0.02 s = 0.07 s a token: 0.03 s saved a token. Over 50 tokens to go, 1.5 s is saved, which
    # must repay all of reading the 99-token backlog (no probe's allowance: this read is paid now).
    def auto_with(catchup: float) -> AutoK:
        c = priced({1: 0.1, 2: 0.12}, draft=0.02)
        c.catchup.add(99, catchup)
        auto = AutoK(c, k_max=1)
        auto.tables[MODEL_KEY] = Fixed([1.0])
        auto.probes[DraftKind.MODEL] = _Probe()
        auto.probes[DraftKind.MODEL].idle_s = 0.0  # it drafted just now: no probe is due (a decline is 0)
        return auto

    # The backlog is the reply's own 99 tokens (judgeable: the drafter read the prompt).
    assert auto_with(1.5 - 1e-6).request(1, behind=100, remaining=50, judgeable=99).model_k == 1
    assert auto_with(1.5 + 1e-6).request(1, behind=100, remaining=50, judgeable=99).model_k == 0
    assert auto_with(1.5 + 1e-6).request(1, behind=100, remaining=51, judgeable=99).model_k == 1
    # The horizon is at most REPLY_HORIZON tokens however long max_tokens is, and None means it.
    at_horizon = 0.03 * REPLY_HORIZON
    assert auto_with(at_horizon - 1e-6).request(1, behind=100, judgeable=99).model_k == 1
    assert auto_with(at_horizon + 1e-6).request(1, behind=100, remaining=10 * REPLY_HORIZON, judgeable=99).model_k == 0
    # With the prompt unread, over the tokens the reply is expected to go on for: as many as it has run (20:
    # 0.6 s), at least 12 (0.36 s), within what the limit leaves (15 of a reply that has run 20: 0.45 s); one
    # prompt token unread is an unread prompt (98 reply tokens: 2.94 s, not the horizon's 7.68 s). Before the reply's
    # first token (so far 0) the read must be repaid FIRST_REPAY (4) times: 0.36 s / 4 = 0.09 s.
    for so_far, remaining, saved in ((20, 50, 0.6), (5, 50, 0.36), (0, None, 0.09), (20, 15, 0.45), (40, None, 1.2),
                                     (98, None, 2.94)):
        assert auto_with(saved - 1e-6).request(1, behind=100, remaining=remaining, judgeable=so_far).model_k == 1
        assert auto_with(saved + 1e-6).request(1, behind=100, remaining=remaining, judgeable=so_far).model_k == 0
    # Caught up (the token to score is all it has not read): no backlog to pay for.
    assert auto_with(1000.0).request(1, behind=1, remaining=2).model_k == 1
    # One unread token costs a 99th of the 99 (in proportion) against 0.06 s saved over 2 tokens: 99 * 0.06 s
    # is where drafting stops paying, yet up to 99 * 0.062 s a one-token probe costs nothing net (a probe is
    # charged the read beyond its 0.002 s allowance), so it looks all the same.
    assert auto_with(99 * 0.06 - 1e-6).request(1, behind=2, remaining=2).model_k == 1
    assert auto_with(99 * 0.062 - 1e-6).request(1, behind=2, remaining=2).model_k == 1
    assert auto_with(99 * 0.062 + 1e-6).request(1, behind=2, remaining=2).model_k == 0


def test_a_correction_of_the_shape_prices_blocks_of_its_own_size_class():
    """Adjacent plain and drafting rounds correct V(1)/V(n) for blocks of about that size only: 16-token
    lookups measured 0.9 of the shape must not price 5-token model rounds (values by hand)."""
    c = CostModel()
    for n, v in {1: 0.1, 5: 0.3, 16: 0.6}.items():
        c.add_verify(n, v)
    for _ in range(3):  # plain 0.1 s next to 16 tokens in 0.6 / 0.9 s: measured V1/V16 = 0.9 x the shape's
        c.record(outcome(verify_s=0.1))
        c.record(outcome(k=15, drafted=15, accepted=15, verify_s=0.6 / 0.9, key=LOOKUP3))
    assert c.correction(16) == pytest.approx(0.9) and c.correction(9) == pytest.approx(0.9)
    assert c.correction(5) == 1.0 and c.correction(8) == 1.0  # nothing measured at 5-8 tokens
    assert [pair_class(n) for n in (2, 3, 4, 5, 8, 9, 16, 17)] == [1, 2, 2, 3, 3, 4, 4, 5]
    # Priced plain: a 5-token round of 0.3 s costs plain 0.1 s a token; a 16-token one 0.9 x (0.6/0.9) / 6.
    assert c.plain_price(5, 0.3) == pytest.approx(0.1 * c.speed_ratio(5, 0.3) + c.round_overhead(0))
    assert c.plain_price(16, 0.6) == pytest.approx(0.1 * c.speed_ratio(16, 0.6) * 0.9 + c.round_overhead(0))


def test_a_pair_is_learned_whichever_round_comes_first_and_only_the_latest_seven_count():
    """A drafting round then a plain one is a pair as much as the other way round; two plain rounds are
    none; a round timed at zero teaches nothing (and raises nothing); seven pairs per class are kept
    (values by hand)."""
    c = CostModel()
    for n, v in {1: 0.1, 2: 0.15}.items():
        c.add_verify(n, v)
    c.record(outcome(k=1, drafted=1, accepted=1, verify_s=0.15 / 0.8))  # 2 tokens first: V1/V2 0.8 x the shape's
    c.record(outcome(verify_s=0.1))
    # one pair is one vote beside the calibrated shape's (1.0): one plain round's noise does not set the price
    assert c.correction(2) == pytest.approx(0.9) and set(c.pairs) == {(0, 1)}
    c.record(outcome(verify_s=0.1))  # plain beside plain
    assert len(c.pairs[(0, 1)]) == 1
    c.record(outcome(k=1, drafted=1, accepted=1, verify_s=0.0))  # clocks that did not move: beside plain
    c.record(outcome(verify_s=0.0))  # and plain beside it
    c.record(outcome(k=1, drafted=1, accepted=1, verify_s=0.15))  # beside a plain round timed at zero
    assert len(c.pairs[(0, 1)]) == 1
    for _ in range(5):  # nine more pairs, each V1/V2 0.5 x the shape's: the first one's 0.8 drops out
        c.record(outcome(k=1, drafted=1, accepted=1, verify_s=0.3))
        c.record(outcome(verify_s=0.1))
    assert len(c.pairs[(0, 1)]) == 7 and c.correction(2) == pytest.approx(0.5)
    assert 0.8 not in [round(x, 6) for x in c.pairs[(0, 1)]]
    # Auto prices a 2-token block at twice the shape; a plain round is what the pairs are measured against
    assert c.verify_cost(2) == pytest.approx(2 * c.shape_cost(2)) and c.verify_cost(1) == c.shape_cost(1)


def test_pairs_are_learned_per_reply_and_only_from_rounds_that_had_the_cpu():
    """A plain round beside a drafting one corrects the shape only when both verify passes got the CPU
    (share >= 0.85), and a new reply starts with no correction (values by hand)."""
    c = CostModel()
    for n, v in {1: 0.1, 5: 0.3}.items():
        c.add_verify(n, v)
    c.record(outcome(verify_s=0.1))
    c.record(outcome(k=4, drafted=4, accepted=4, verify_s=0.25, share=0.6))  # beside a busy process
    c.record(outcome(verify_s=0.1, share=0.6))
    assert c.correction(5) == 1.0 and not c.pairs
    c.record(outcome(verify_s=0.1))
    c.record(outcome(k=4, drafted=4, accepted=4, verify_s=0.25))
    assert c.correction(5) == pytest.approx(1.1)  # one pair (1.2) and the shape's 1.0 as a vote
    c.record(outcome(verify_s=0.1))
    assert c.correction(5) == pytest.approx((0.1 / 0.25) / (0.1 / 0.3))  # two pairs of 1.2
    c.new_reply()
    assert c.correction(5) == 1.0


def test_auto_prices_a_block_as_dear_as_the_pairs_measure_it_never_cheaper_than_calibrated():
    """V(1) 0.1 s and V(5) 0.4 s calibrated. A plain round of 0.1 s beside a 5-token block of 0.6 s:
    blocks of 5-8 tokens cost 1.5x the shape here, and Auto prices them so; a block of 0.3 s beside it
    (cheaper than calibrated) leaves the price at the shape. V(1), and what a kept calibration stores
    (shape_cost), never move with a pair."""
    dear = CostModel()
    dear.add_verify(1, 0.1)
    dear.add_verify(5, 0.4)
    dear.observe_verify(1, 0.1)
    dear.observe_verify(5, 0.6)
    dear.observe_verify(1, 0.1)  # two pairs: one alone is one vote beside the shape
    assert dear.correction(5) == pytest.approx((0.1 / 0.6) / (0.1 / 0.4))
    assert dear.verify_cost(5) == pytest.approx(1.5 * dear.shape_cost(5))
    assert dear.verify_cost(7) == pytest.approx(1.5 * dear.shape_cost(7))  # the same size class, 5-8
    assert dear.verify_cost(3) == pytest.approx(dear.shape_cost(3))  # 3-4: no pair of its own yet
    assert dear.verify_cost(1) == pytest.approx(dear.shape_cost(1))
    assert dear.shape_cost(5) == pytest.approx(0.4 * dear.speed.value)
    cheap = CostModel()
    cheap.add_verify(1, 0.1)
    cheap.add_verify(5, 0.4)
    cheap.observe_verify(1, 0.1)
    cheap.observe_verify(5, 0.3)
    cheap.observe_verify(1, 0.1)
    assert cheap.correction(5) > 1.0 and cheap.verify_cost(5) == pytest.approx(cheap.shape_cost(5))


def test_what_is_kept_for_the_next_launch_is_at_the_speed_of_undisturbed_rounds():
    """A session that ends beside a busy process must not hand the next launch its busy prices: the kept
    shape follows undisturbed rounds only (a share of the CPU of at least calibration.QUIET_SHARE)."""
    c = CostModel()
    for n, v in ((1, 0.1), (4, 0.25)):
        c.add_verify(n, v)
    model = DraftKey(DraftKind.MODEL)
    for _ in range(20):  # a busy tail: 10x slower, the threads got half the CPU they could have had
        c.record(RoundOutcome(k=3, drafted=3, accepted=3, draft_s=0.0, verify_s=2.5, key=model, share=0.5))
    assert c.speed.value == pytest.approx(10.0, rel=0.01) and c.verify_cost(1) == pytest.approx(1.0, rel=0.01)
    assert c.kept_cost(1) == pytest.approx(0.1) and c.kept_cost(4) == pytest.approx(0.25)
    for _ in range(20):  # quiet rounds at twice the shape: that is what is kept
        c.record(RoundOutcome(k=3, drafted=3, accepted=3, draft_s=0.0, verify_s=0.5, key=model, share=0.97))
    assert c.kept_cost(1) == pytest.approx(0.2, rel=0.01) and c.kept_cost(4) == pytest.approx(0.5, rel=0.01)


def test_the_drafters_depth_line():
    """Step 1.6x dearer at 1,128 tokens than at 128, a 16-token read 2.6x (values by hand)."""
    line = DepthLine(128, 1128, 1.6, 2.6)
    assert line.factor(None) == 1.0 and line.factor(128) == 1.0
    assert line.factor(628) == pytest.approx(1.3) and line.factor(628, block=True) == pytest.approx(1.8)
    assert line.factor(2128) == pytest.approx(2.2)  # beyond the deep point: the same line
    assert line.factor(0, block=True) == pytest.approx(1.0 - 1.6 * 128 / 1000)
    assert DepthLine(128, 1128, 0.1, 0.1).factor(5000) == 0.5  # never below half
    assert DepthLine(128, 128, 3.0, 3.0).factor(5000) == 1.0  # one depth: no line


def test_the_drafters_step_and_reads_are_priced_at_the_rounds_depth_and_learned_back_at_the_lines_start():
    """A drafter whose step is 10 ms at 128 tokens and 16 ms at 1,128 (a read of 16 tokens 40 -> 104 ms):
    deep in a chat its drafts are priced dearer, and a step timed there is kept as the shallow step it
    implies, so a later shallow reply is not charged the deep price (values by hand)."""
    c = CostModel()
    c.add_verify(1, 0.1)
    c.add_verify(4, 0.2)
    c.draft_per_token.add(0.010)
    c.catchup.add(16, 0.040)
    c.draft_depth = DepthLine(128, 1128, 1.6, 2.6)
    c.depth = 1128
    assert c.draft_cost(2) == pytest.approx(0.032)
    # a 16-token read ending at 1,136 has its mean at 1,128: 2.6x
    c.depth = 1136
    assert c.catchup_cost(16) == pytest.approx(0.104)
    c.depth = 128
    assert c.draft_cost(1) == pytest.approx(0.010)
    # 3 tokens drafted at 2,128 tokens in 0.066 s: 22 ms a step there, 2.2x the line's start, 10 ms
    c.draft_per_token = Ewma()
    c.catchup = BlockCost()
    c.record(outcome(k=3, drafted=3, accepted=3, draft_s=0.066, verify_s=0.2, key=MODEL_KEY, depth=2128,
                     catchup_s=0.5, catchup_tokens=32))
    assert c.draft_per_token.value == pytest.approx(0.010, rel=1e-6)
    # the read of 32 tokens ended at 2,128: its mean depth 2,112 is 1 + 1.6 x 1,984 / 1,000 = 4.1744x
    assert c.catchup(32) == pytest.approx(0.5 / 4.1744, rel=1e-6)
    # an odd read: 33 tokens ending at 2,128 have their mean at 2,112; 40 ending at 10, at the context's start
    c.catchup = BlockCost()
    c.catchup.add(16, 0.040)
    c.depth = 2128
    assert c.catchup_cost(33) == pytest.approx(0.040 * 33 / 16 * (1 + 1.6 * 1.984), rel=1e-6)
    c.depth = 10
    assert c.catchup_cost(40) == pytest.approx(0.040 * 40 / 16 * (1 - 1.6 * 0.128), rel=1e-6)
    c.draft_depth = None  # unmeasured: one depth, as before
    c.depth = 2128
    assert c.draft_cost(1) == pytest.approx(0.010, rel=1e-6)



def test_a_free_kind_is_probed_only_where_a_rejected_probe_costs_little():
    """A lookup pruned away is judged against the round's token as a one-token probe would be (observe: aside), so a
    probe of it buys nothing but its gain. Where a rejected probe costs most of a plain round (cautious: a 2-core EPYC's
    block of 2 costs 1.83 plain rounds) it is never probed; where blocks cost next to a token it still is. Replayed on
    the wide set on the EPYC's costs, worst category tune / report 0.978 / 0.975 -> 0.985 / 0.989 (explanation: a
    rejected probe cost 1.4 plain rounds per 100 tokens)."""
    k3 = DraftKey(DraftKind.LOOKUP, 3)
    cpu = {1: 0.1, 2: 0.183, 4: 0.28, 8: 0.66, 16: 0.88}  # the EPYC's shape: cautious
    cheap = {1: 0.1, 2: 0.144, 4: 0.163, 8: 0.204, 16: 0.26}  # a block of 17 under 3 plain rounds: not cautious
    probed = {}
    for name, verify in (("cpu", cpu), ("cheap", cheap)):
        auto = AutoK(priced(verify))
        assert auto.cautious() == (name == "cpu")
        for _ in range(6):  # the lookup was wrong each time it was judged aside
            auto.observe(outcome(verify_s=0.1, aside=((k3, 1, 0),)))
        assert auto.prune(k3, 4) == 0  # not worth drafting, and no budget for a probe yet
        for _ in range(200):  # 20 s of plain rounds with no lookup to judge: 0.3 s of probe budget
            auto.observe(outcome(verify_s=0.1))
        probed[name] = auto.prune(k3, 4)
    assert probed == {"cpu": 0, "cheap": 1}
    # where it is still probed, a free kind's first look waits for its budget too (a fresh key, one token offered:
    # a block of 2 at 1.6 plain rounds does not pay on the prior, and the probe's price is not paid at once)
    dear_two = AutoK(priced({1: 0.1, 2: 0.16, 4: 0.2, 8: 0.24, 16: 0.28}))
    assert not dear_two.cautious() and dear_two.prune(DraftKey(DraftKind.LOOKUP, 2), 1) == 0
    assert dear_two.probes[DraftKind.LOOKUP].idle_s == 0.0  # earning the budget from now on


def test_a_perfect_drafter_wins_from_the_first_length_that_beats_plain_by_the_margin():
    # Worked by hand: a plain round 0.1 s (10 tokens/s, so the bar is 10.2), a drafter step 0.05 s. A perfect
    # draft of 1: 2 / (0.16 + 0.05) = 9.5 tokens/s; of 2: 3 / (0.2 + 0.1) = 10.0; of 3: 4 / (0.22 + 0.15) = 10.8.
    c = priced({1: 0.1, 2: 0.16, 3: 0.2, 4: 0.22}, draft=0.05)
    auto = AutoK(c, k_max=3)
    assert [auto.perfect_wins(limit, True) for limit in range(5)] == [False, False, False, True, True]
    assert not AutoK(c, k_max=2).perfect_wins(16, True)  # k_max caps the lengths tried
    assert auto.perfect_wins(1, False)  # a free draft of 1: 2 / 0.16 = 12.5 tokens/s
    assert not AutoK(CostModel()).perfect_wins(16, True)  # nothing measured: nothing wins
    # A plain round timed at zero (a clock that did not move) prices nothing: any priced draft is faster,
    # even one of 2 tokens in 3 s
    zero = priced({1: 0.0, 2: 3.0}, draft=0.05)
    assert zero.round_cost(0, True) is None and AutoK(zero, k_max=1).perfect_wins(1, True)


class CountingCosts(CostModel):
    """A cost model that notes each V(n) it works out (the collaborator counted, not the thing tested)."""

    def __init__(self) -> None:
        super().__init__()
        self.worked_out: list[int] = []

    def shape_cost(self, n: int, depth: int | None = None) -> float | None:
        self.worked_out.append(n)
        return super().shape_cost(n, depth)


def test_one_decision_works_each_price_out_once_and_the_next_round_prices_afresh():
    c = CountingCosts()
    for n, v in {1: 0.1, 2: 0.18, 4: 0.3, 8: 0.5, 17: 0.9}.items():
        c.add_verify(n, v)
    c.draft_per_token.add(0.03)
    auto = AutoK(c)
    auto.tables[MODEL_KEY] = Fixed([0.3] * 16)  # drafting does not pay; a perfect drafter would
    c.worked_out.clear()
    assert auto.request(16, behind=2).model_k == 0
    assert len(c.worked_out) == len(set(c.worked_out))  # no length priced twice in one decision
    # By hand: V(1) and V(17) say whether Auto is cautious (0.9 > 3 x 0.1: yes); a fresh key reaches 4 tokens,
    # not 5 (V(6) = 0.4 > 2 x V(1)); a draft of 1-4 is priced (V(2)-V(5)). A perfect drafter: the bar is
    # 1.02 / 0.1 = 10.2 tokens/s; 2 / (0.18 + 0.03) = 9.5, 3 / (0.24 + 0.06) = 10.0, 4 / (0.3 + 0.09) = 10.3
    # wins, so the lengths past it (V(7)-V(16)) are never worked out.
    assert set(c.worked_out) == {1, 2, 3, 4, 5, 6, 17}
    with c.held():
        before = c.verify_cost(2)
        with c.held():  # a decision inside another keeps the outer one's memory
            assert c.verify_cost(2) == before
        assert c.worked_out.count(2) == 2  # once in the request above, once here
    c.record(outcome(verify_s=0.2))  # the machine is slower now: V(1) measured 2x the shape
    assert c.verify_cost(2) > before  # priced afresh, not from the last decision's memory


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.01, 1.0), min_size=2, max_size=9), st.floats(0.001, 0.2), st.integers(0, 10), st.booleans())
def test_a_perfect_drafter_wins_exactly_where_some_length_beats_plain_by_the_margin(verify, draft, limit, paid):
    """Against the definition, worked in the test over any measured shape (rising or not): some k of 1 .. limit
    (at most k_max) emits k + 1 tokens in V(k + 1) + k x D seconds faster than 1.02 x a plain round's rate."""
    c = priced(dict(enumerate(verify, start=1)), draft=draft)
    k_max = len(verify) - 1
    step = draft if paid else 0.0
    wins = any((k + 1) / (verify[k] + k * step) > 1.02 / verify[0] for k in range(1, min(limit, k_max) + 1))
    assert AutoK(c, k_max=k_max).perfect_wins(limit, paid) == wins
