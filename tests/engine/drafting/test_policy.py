"""Auto's decisions from measured costs: drafting where it pays, plain decoding where it does not."""
from __future__ import annotations

from engine.drafting.draft_choice import DraftKind
from engine.decoding.events import RoundEvent
from engine.drafting.draft_choice import DraftLength
from engine.drafting.request import MODEL_KEY, DraftKey
from engine.drafting.policy import AutoK, FixedK, make_policy
from engine.drafting.costs import CostModel, RoundOutcome
from engine.decoding.session import GenerationSettings, Session

LOOKUP5, LOOKUP2 = DraftKey(DraftKind.LOOKUP, 5), DraftKey(DraftKind.LOOKUP, 2)


def costs_like(verify_ms: dict[int, float], draft_ms: float | None) -> CostModel:
    c = CostModel()
    for n, ms in verify_ms.items():
        c.add_verify(n, ms / 1000)
    if draft_ms is not None:
        c.draft_per_token.add(draft_ms / 1000)
    return c


# ../shared/design/models.md, a 2-core CPU (Qwen 1.5B target, 0.5B drafter at 24 ms a token):
# verifying n tokens costs nearly n times one token up to 8, then flattens.
CPU = {1: 32, 4: 106, 8: 230, 12: 285, 16: 269}
# A GPU verifies a block of 16 for little more than one token.
GPU = {1: 12, 2: 12.5, 4: 13, 8: 14, 16: 17}


def feed(policy: AutoK, key: DraftKey, k: int, accepted: int, rounds: int, verify_s: float = 0.0) -> None:
    for _ in range(rounds):
        policy.observe(RoundOutcome(k=k, drafted=k, accepted=accepted, draft_s=0.0, verify_s=verify_s, overhead_s=0.0, key=key))


def model_k(policy, limit: int = 16, behind: int = 1) -> int:
    """`behind`: reply tokens the drafter has not read (it read the prompt), as the live loop says them."""
    return policy.request(limit, behind, judgeable=max(0, behind - 1)).model_k


def test_slow_drafter_on_cpu_is_turned_off_even_when_it_is_right():
    policy = AutoK(costs_like(CPU, draft_ms=24), drafter_is_model=True)
    feed(policy, MODEL_KEY, 4, 4, 40)  # every draft accepted: still slower than plain decoding there
    assert model_k(policy) == 0
    # The same drafter at a third of the target's cost (this machine's build) is worth running.
    cheaper = AutoK(costs_like({1: 107, 2: 141, 4: 213, 8: 322, 16: 336}, draft_ms=42), drafter_is_model=True)
    feed(cheaper, MODEL_KEY, 4, 4, 40)
    assert model_k(cheaper) >= 2


def test_good_drafter_on_gpu_drafts_long_blocks():
    policy = AutoK(costs_like(GPU, draft_ms=2), drafter_is_model=True)
    feed(policy, MODEL_KEY, 8, 8, 40)
    assert model_k(policy) >= 8


def test_acceptance_falling_makes_drafts_shorter_then_off():
    policy = AutoK(costs_like(GPU, draft_ms=4), drafter_is_model=True)
    feed(policy, MODEL_KEY, 8, 8, 30)
    long = model_k(policy)
    feed(policy, MODEL_KEY, 4, 1, 30)  # the text changed: the drafter now gets one in four
    shorter = model_k(policy)
    feed(policy, MODEL_KEY, 2, 0, 60)
    assert long > shorter and model_k(policy) == 0


def test_margin_applies_against_plain_only_not_between_draft_lengths():
    # Acceptance 0.9 on a GPU: the best k is long, and a 2% margin between neighbours must not hold it short.
    policy = AutoK(costs_like(GPU, draft_ms=1), drafter_is_model=True)
    for _ in range(40):
        policy.observe(RoundOutcome(k=16, drafted=16, accepted=9, draft_s=0, verify_s=0, overhead_s=0))
    rates = {k: policy.rate(MODEL_KEY, k, True) for k in range(17)}
    assert model_k(policy) == max(range(1, 17), key=rates.__getitem__)


def test_probes_are_priced_and_a_fully_accepted_probe_is_followed_at_once():
    costs = costs_like(GPU, draft_ms=4)
    costs.catchup.add(16, 0.0045)  # the drafter reads a block of 16 unseen tokens in 4.5 ms, 64 in 5 ms
    costs.catchup.add(64, 0.005)
    policy = AutoK(costs, drafter_is_model=True)
    feed(policy, MODEL_KEY, 2, 0, 60)
    assert model_k(policy) == 0
    plain_round = 0.012
    gaps, since = [], 0
    for _ in range(2000):
        k = model_k(policy, behind=since + 1)
        since += 1
        if k:
            gaps.append(since)
            since = 0
            feed(policy, MODEL_KEY, k, 0, 1, verify_s=0.0125)  # the probe fails
        else:
            feed(policy, DraftKey(DraftKind.NONE), 0, 0, 1, verify_s=plain_round)
    # A failed probe drafts one token: 4 ms drafting, +0.5 ms verifying; the backlog (~20 tokens,
    # 4.5 ms) is within the allowance of 2% of a 12 ms plain round per token read, so not charged.
    # Less the expected gain (a_0 = (0 + 8 * 1.6 / 18) / (32 + 8): 16 rounds of rejections in the
    # pooled window with the prior faded to 2, 32 at position 0; 0.2 ms), 4.3 ms net: a 1.5% budget
    # of 12 ms rounds (0.18 ms a round) covers it after 24 plain rounds, so a probe every 25th round.
    assert len(gaps) >= 5 and all(g == 25 for g in gaps[1:]), gaps
    # A probe whose drafts are all accepted: the next round looks again.
    policy.observe(RoundOutcome(k=2, drafted=2, accepted=2, draft_s=0, verify_s=0.0125, overhead_s=0))
    policy._probing.add(MODEL_KEY)
    policy.observe(RoundOutcome(k=2, drafted=2, accepted=2, draft_s=0, verify_s=0.0125, overhead_s=0))
    assert model_k(policy) > 0


def test_no_probe_when_even_a_perfect_drafter_cannot_win():
    # Drafting costs as much as the target: nothing a drafter proposes can pay for itself.
    policy = AutoK(costs_like({1: 100, 2: 200, 4: 400, 8: 800, 16: 1600}, draft_ms=100), drafter_is_model=True)
    feed(policy, MODEL_KEY, 2, 0, 5)
    assert all(model_k(policy) == 0 for _ in range(1000))


def test_lookup_drafts_are_priced_by_match_length():
    policy = AutoK(costs_like(CPU, draft_ms=None), drafter_is_model=False)
    feed(policy, LOOKUP5, 16, 16, 20)  # long matches copy the prompt: always right
    feed(policy, LOOKUP2, 8, 0, 20)  # two-token matches: always wrong
    req = policy.request(16)
    assert req.model_k == 0  # no model to run
    assert req.lookup_k == 16  # proposing is free
    assert policy.prune(LOOKUP5, 16) >= 12
    assert policy.prune(LOOKUP2, 8) == 0


def test_fixed_k_is_exactly_what_was_asked():
    p = FixedK(5)
    assert p.request(16).model_k == 5 and p.request(16).lookup_k == 5 and p.prune(LOOKUP2, 5) == 5
    assert p.request(3).model_k == 3
    assert make_policy(DraftLength.parse(0), CostModel(), True).drafts is False and make_policy(DraftLength.parse("auto"), CostModel(), True).label == "auto"


def test_catchup_is_priced_per_block_not_per_draft_token():
    costs = CostModel()
    costs.add_verify(1, 0.1)
    costs.draft_per_token.add(0.03)
    # A probe after a long plain stretch: the drafter reads 200 tokens (0.5 s) then drafts 2 (0.06 s).
    costs.record(RoundOutcome(k=2, drafted=2, accepted=2, draft_s=0.06, verify_s=0.15, overhead_s=0.0,
                              catchup_s=0.5, catchup_tokens=200))
    assert abs(costs.draft_cost(1) - 0.03) < 1e-9  # not (0.5 + 0.06) / 2
    assert abs(costs.catchup_cost(200) - 0.5) < 1e-9 and abs(costs.catchup_cost(100) - 0.25) < 1e-9


def test_confidence_cutoff_drafts_less_and_stays_exact(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        runs = {}
        for p_min in (0.0, 0.9):
            events = list(s.complete("hello world the code", GenerationSettings(draft_max=6, max_tokens=40, p_min=p_min)))
            rounds = [e for e in events if isinstance(e, RoundEvent)]
            runs[p_min] = ([e.token_id for e in events if hasattr(e, "token_id")], sum(len(r.drafted) for r in rounds))
        assert runs[0.9][0] == runs[0.0][0]
        assert runs[0.9][1] < runs[0.0][1]
    finally:
        s.close()
