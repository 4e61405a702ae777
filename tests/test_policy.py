"""Auto's decisions from measured costs: drafting where it pays, plain decoding where it does not."""
from __future__ import annotations

from engine.decoding.events import RoundEvent
from engine.decoding.policy import AutoK, CostModel, FixedK, RoundOutcome
from engine.decoding.session import GenerationSettings, Session


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


def feed(policy: AutoK, key: str, k: int, accepted: int, rounds: int) -> None:
    for _ in range(rounds):
        policy.observe(RoundOutcome(k=k, drafted=k, accepted=accepted, draft_s=0.0, verify_s=0.0, overhead_s=0.0, key=key))


def test_slow_drafter_on_cpu_is_turned_off_even_when_it_is_right():
    policy = AutoK(costs_like(CPU, draft_ms=24), drafter_is_model=True)
    feed(policy, "model", 4, 4, 40)  # every draft accepted: still slower than plain decoding there
    assert policy.choose_k(16) == 0
    # The same drafter at a third of the target's cost (this machine's build) is worth running.
    cheaper = AutoK(costs_like({1: 107, 2: 141, 4: 213, 8: 322, 16: 336}, draft_ms=42), drafter_is_model=True)
    feed(cheaper, "model", 4, 4, 40)
    assert cheaper.choose_k(16) >= 2


def test_good_drafter_on_gpu_drafts_long_blocks():
    policy = AutoK(costs_like(GPU, draft_ms=2), drafter_is_model=True)
    feed(policy, "model", 8, 8, 40)
    assert policy.choose_k(16) >= 8


def test_acceptance_falling_makes_drafts_shorter_then_off():
    policy = AutoK(costs_like(GPU, draft_ms=4), drafter_is_model=True)
    feed(policy, "model", 8, 8, 30)
    long = policy.choose_k(16)
    feed(policy, "model", 4, 1, 30)  # the text changed: the drafter now gets one in four
    shorter = policy.choose_k(16)
    feed(policy, "model", 2, 0, 60)
    assert long > shorter and policy.choose_k(16) == 0


def test_probes_come_back_less_often_while_they_fail():
    policy = AutoK(costs_like(GPU, draft_ms=4), drafter_is_model=True)
    feed(policy, "model", 2, 0, 60)
    gaps, since = [], 0
    for _ in range(400):
        k = policy.choose_k(16)
        since += 1
        if k:
            gaps.append(since)
            since = 0
            feed(policy, "model", k, 0, 1)  # the probe fails
    assert len(gaps) >= 3 and gaps[0] < gaps[1] < gaps[2]


def test_no_probe_when_even_a_perfect_drafter_cannot_win():
    # Drafting costs as much as the target: nothing a drafter proposes can pay for itself.
    policy = AutoK(costs_like({1: 100, 2: 200, 4: 400, 8: 800, 16: 1600}, draft_ms=100), drafter_is_model=True)
    feed(policy, "model", 2, 0, 5)
    assert all(policy.choose_k(16) == 0 for _ in range(1000))


def test_lookup_drafts_are_priced_by_match_length():
    policy = AutoK(costs_like(CPU, draft_ms=None), drafter_is_model=False)
    feed(policy, "lookup:5", 16, 16, 20)  # long matches copy the prompt: always right
    feed(policy, "lookup:2", 8, 0, 20)  # two-token matches: always wrong
    assert policy.choose_k(16) == 0  # no model to run
    assert policy.lookup_k(16) == 16  # proposing is free
    assert policy.prune("lookup:5", 16) >= 12
    assert policy.prune("lookup:2", 8) == 0


def test_fixed_k_is_exactly_what_was_asked():
    p = FixedK(5)
    assert p.choose_k(16) == 5 and p.lookup_k(16) == 5 and p.prune("lookup:2", 5) == 5 and p.choose_k(3) == 3


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
