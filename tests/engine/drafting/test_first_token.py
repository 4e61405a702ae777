"""Auto pays no fixed cost before a reply's first token that it does not expect back: where it is not cautious (a
rejected draft costs next to one plain round), a model drafter nothing has judged reads the unread prompt for a draft
on its prior before the first token only if that draft repays the read FIRST_REPAY times over the tokens the reply is
expected to run; otherwise the read waits a round, and is then priced as any backlog's. Values written here, the
replay, and the live loop on the tiny pair: which passes run before the first token."""
from __future__ import annotations

from engine.decoding.events import TokenEvent
from engine.decoding.session import GenerationSettings, Session
from engine.drafting.costs import CostModel
from engine.drafting.draft_choice import DraftLength
from engine.drafting.policy import FIRST_REPAY, AutoK
from engine.drafting.request import DraftRequest

#: Blocks cost next to one token (a GPU's): not cautious, and a draft of 12 on the prior (0.8) saves 0.0703 s a token.
GPU = {1: 0.1, 2: 0.102, 4: 0.106, 8: 0.114, 16: 0.13, 17: 0.131}


def costs(read_99: float, read_4: float | None = None) -> CostModel:
    """GPU blocks, a drafter step of 5 ms, reading 99 unseen tokens `read_99` seconds (and 4 `read_4`)."""
    c = CostModel()
    for n, v in GPU.items():
        c.add_verify(n, v)
    c.draft_per_token.add(0.005)
    c.catchup.add(99, read_99)
    if read_4 is not None:
        c.catchup.add(4, read_4)
    c.plain_overhead.add(0.0)
    return c


def test_the_prompt_is_read_before_the_first_token_only_where_the_prior_draft_repays_it_four_times():
    # Over the 12 tokens a reply is expected to run before it has run any (policy.expected_remaining), a draft of 12
    # on the prior saves 12 x 0.0703 = 0.843 s: a 99-token read of up to 0.843 / 4 = 0.211 s is paid at once.
    assert FIRST_REPAY == 4.0
    cheap = AutoK(costs(0.205))
    assert not cheap.cautious()
    assert cheap.request(16, 100, 200, 0) == DraftRequest(12, 16)
    # 0.215 s: repaid once (the rule before: a draft of 12 read the prompt at once), not four times: no read before the
    # first token; from the next round the read is priced as any backlog's (repaid once over the tokens expected).
    dear = AutoK(costs(0.215))
    assert dear.request(16, 100, 200, 0) == DraftRequest(0, 16)
    assert dear.request(16, 101, 200, 1) == DraftRequest(12, 16)
    # A read of 0.8 s, eight plain rounds, which the same draft repays about once: held the same way.
    assert AutoK(costs(0.8)).request(16, 100, 200, 0) == DraftRequest(0, 16)
    # A token or two behind is read with the first draft step, not as a read of its own: the prior drafts at once.
    assert AutoK(costs(0.8)).request(16, 2, 200, 0).model_k == 12


def first_token_passes(tiny, c: CostModel) -> tuple[int, int]:
    """(drafter passes before the first token, target passes before it) of an Auto reply on the tiny pair, its
    costs `c` (nothing measured at load)."""
    s = Session(tiny["target"], f"lookup+{tiny['drafter']}", calibrate=False)
    try:
        s.costs = c
        s.reset_state()  # the opening read at load, as before every reply
        drafter, target = s.draft_model.passes, s.target.passes
        prompt = [{"role": "user", "content": "the model is fast and the draft is right " * 6}]
        for ev in s.chat(prompt, GenerationSettings(draft_max=DraftLength.AUTO, max_tokens=64)):
            if isinstance(ev, TokenEvent):
                return s.draft_model.passes - drafter, s.target.passes - target
        raise AssertionError("no token")
    finally:
        s.close()


def test_live_no_drafter_pass_before_the_first_token_where_the_read_does_not_repay(tiny):
    """Where the read of the question repays four times, the drafter reads it and drafts before the first token (the
    +200 ms a not-cautious Auto paid on every short prompt); where it does not, the first token costs the target's
    prefill and one plain round, as plain decoding's does."""
    drafted, _ = first_token_passes(tiny, costs(0.01, 0.0005))
    assert drafted >= 2  # a catch-up read of the question and at least one draft step
    held, target = first_token_passes(tiny, costs(0.6, 0.3))  # repaid once over 12 tokens, not four times
    assert held == 0 and target >= 2  # the target's prefill and its first plain round only


def test_replayed_where_auto_is_not_cautious_the_first_token_no_longer_waits_for_the_prompts_read():
    """The Xeon's recorded costs with blocks of 2+ tokens a fifth cheaper (V(17) under 3 x V(1): Auto is not
    cautious, as a run whose calibration measured blocks cheaper can be), lookup + model, the 28 everyday replies and
    the bench's 13. Before: a draft on the prior read the question before every first token, 2.46 plain rounds
    (160 ms) later than plain decoding's at the median, 3.76 at worst; Auto / plain 1.031 (11 of 28 below 0.95x) and
    1.656. Held a round unless repaid four times: the median wait 0, Auto / plain 1.059 (9 below 0.95x) and 1.696."""
    from engine.decoding.replay import (
        CostProfile, auto_policy, calibrated_costs, fixed_policy, load_traces, recorded_profile, simulate,
    )
    from tree import ROOT

    bench = ROOT / "resources" / "bench"
    head, amx = load_traces(bench / "amx_traces.jsonl")
    _, everyday = load_traces(bench / "everyday_traces.jsonl")
    xeon = recorded_profile(head)
    cheap = CostProfile("xeon, blocks x0.8", lambda n: xeon.verify(n) * (0.8 if n > 1 else 1.0), xeon.draft_step,
                        xeon.catchup, xeon.overhead)
    assert not AutoK(calibrated_costs(cheap)).cautious()
    for traces, mean_at_least, below in ((everyday, 1.055, 9), (amx, 1.69, 2)):
        ratios, waits = [], []
        for t in traces:
            auto = simulate(t, cheap, auto_policy("lookup+model"), "lookup+model")
            plain = simulate(t, cheap, fixed_policy(0), "lookup+model")
            ratios.append(auto.rate / plain.rate)
            waits.append((auto.first_token_s - plain.first_token_s) / cheap.verify(1))
        waits.sort()
        assert waits[len(waits) // 2] == 0.0, waits
        mean = 1.0
        for r in ratios:
            mean *= r ** (1 / len(ratios))
        assert mean >= mean_at_least and sum(r < 0.95 for r in ratios) <= below, ratios


def test_the_wide_sets_halves_replayed_where_auto_is_not_cautious():
    """The wide bench set's 45 + 45 replies (resources/bench/wide, recorded with the real pair), lookup + model, on the
    Xeon's costs with blocks a fifth cheaper. Before the rule, tune / report: Auto / plain 1.239 / 1.133, the worst
    0.443 / 0.263, the first token 2.48 / 2.58 plain rounds later than plain decoding's at the median (26 / 30 replies
    over half a round). After: 1.244 / 1.150, the worst 0.688 / 0.383, the median wait 0 (3 / 2 over half a round).
    On the Xeon's own costs (cautious) nothing changes: 1.143 / 1.120."""
    from engine.decoding.replay import (
        CostProfile, auto_policy, fixed_policy, load_traces, recorded_profile, simulate,
    )
    from tree import ROOT

    bench = ROOT / "resources" / "bench"
    xeon = recorded_profile(load_traces(bench / "amx_traces.jsonl")[0])
    cheap = CostProfile("xeon, blocks x0.8", lambda n: xeon.verify(n) * (0.8 if n > 1 else 1.0), xeon.draft_step,
                        xeon.catchup, xeon.overhead)
    for half, (mean_cheap, worst_cheap, late_most, mean_xeon) in (("tune", (1.244, 0.688, 3, 1.143)),
                                                                 ("report", (1.150, 0.383, 2, 1.120))):
        _, traces = load_traces(bench / "wide" / f"{half}_traces.jsonl")
        assert len(traces) == 45
        for profile, mean_at_least in ((cheap, mean_cheap), (xeon, mean_xeon)):
            ratios, waits = [], []
            for t in traces:
                auto = simulate(t, profile, auto_policy("lookup+model"), "lookup+model")
                plain = simulate(t, profile, fixed_policy(0), "lookup+model")
                ratios.append(auto.rate / plain.rate)
                waits.append((auto.first_token_s - plain.first_token_s) / profile.verify(1))
            mean = 1.0
            for r in ratios:
                mean *= r ** (1 / len(ratios))
            assert mean >= mean_at_least - 0.0005, (half, profile.name, mean)
            if profile is cheap:
                assert min(ratios) >= worst_cheap - 0.0005 and sum(w > 0.5 for w in waits) <= late_most, (half, waits)
