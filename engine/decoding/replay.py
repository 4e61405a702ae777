"""Replay recorded greedy traces through the real policy code under simulated costs.

Greedy speculative decoding is deterministic given the text: whatever draft length a policy asks
for at reply position t, a model drafter keeps `min(k, run_t)` tokens, where run_t is how many
consecutive positions from t the drafter's own next-token prediction (with the true text as its
context) equals the target's token. One batched drafter pass over the reply gives run_t for every t;
prompt lookup is replayed the same way from the n-gram proposal at each position. So a trace
recorded once (`record_trace`) lets any policy be replayed exactly, with costs taken from a profile
instead of a clock: Auto is compared with every fixed k in hindsight, on machines we do not have.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from engine.decoding.events import Certainty
from engine.decoding.verdict import ControlRounds, PlainEstimate
from engine.drafting.costs import CostModel, RoundOutcome
from engine.drafting.draft_choice import DraftKind
from engine.drafting.lookup import LookupDrafter
from engine.drafting.model import CATCHUP_MIN
from engine.drafting.policy import AutoK, DraftPolicy, FixedK, NoDraft, look_windows
from engine.drafting.request import DraftKey, DraftRequest, lookup_key

#: Longest draft replayed (Auto's k_max).
K_MAX = 16


@dataclass(frozen=True, slots=True)
class Trace:
    """What a drafter would get right at every position of one greedy reply."""

    name: str
    category: str
    model_match: str
    """Per reply position: '1' when the model drafter's greedy next token equals the target's."""
    lookup: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    """Per reply position with a lookup proposal: (n-gram match length, tokens proposed, tokens right)."""
    prompt: int = 0
    """Tokens of the rendered prompt (0: not recorded). A policy that does not have the drafter read the
    prompt with the target's prefill (Auto) pays for reading it at its first model draft."""
    opening: int = 0
    """Of the prompt, the tokens every conversation opens with (the chat template's system turn and the start
    of the user's), which a model drafter has read at load (Session.opening): no reply pays for them."""
    max_tokens: int | None = None
    """The reply's token limit when it was recorded (its file's header; None: unknown). A live reply knows
    its limit, not where it will end: with it, a replay asks the policy about the tokens the limit leaves."""

    @property
    def tokens(self) -> int:
        return len(self.model_match)

    def model_run(self, t: int) -> int:
        """Drafted tokens the target would keep from position t (up to K_MAX)."""
        run = 0
        while run < K_MAX and t + run < len(self.model_match) and self.model_match[t + run] == "1":
            run += 1
        return run

    def to_json(self) -> dict:
        return {"name": self.name, "category": self.category, "model_match": self.model_match,
                "lookup": [[t, *v] for t, v in sorted(self.lookup.items())], "prompt": self.prompt,
                **({"opening": self.opening} if self.opening else {})}

    @staticmethod
    def from_json(d: dict, opening: int = 0) -> "Trace":
        """`opening`: where the trace says none (files recorded before it was read at load), its file's."""
        return Trace(d["name"], d["category"], d["model_match"], {int(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in d["lookup"]},
                     int(d.get("prompt", 0)), int(d.get("opening", opening)))


def load_traces(path: Path) -> tuple[dict, list[Trace]]:
    """A traces file: one JSON object per line, the first holding the machine's measured costs (and the
    replies' token limit, "max_tokens", and the chat template's "opening" where its traces do not say it)."""
    lines = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    head = lines[0]
    cap = None if head.get("max_tokens") is None else int(head["max_tokens"])
    return head, [replace(Trace.from_json(d, int(head.get("opening", 0))), max_tokens=cap) for d in lines[1:]]


def save_traces(path: Path, costs: dict, traces: Sequence[Trace]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(json.dumps(x) for x in [costs, *(t.to_json() for t in traces)]) + "\n", encoding="utf-8")


@dataclass(frozen=True, slots=True)
class CostProfile:
    """Simulated costs, in seconds (or in units of one target step)."""

    name: str
    verify: Callable[[int], float]
    """The target scoring a block of n tokens."""
    draft_step: float
    """One drafter forward pass for one token."""
    catchup: Callable[[int], float]
    """The drafter reading n tokens it has not seen, in one batch."""
    overhead: float = 0.0
    """The engine's own time per round."""


def linear_profile(name: str, verify_base: float, verify_per_token: float, drafter: float) -> CostProfile:
    """Verifying n tokens costs base + per_token * n target steps; the drafter is `drafter` times
    the target's cost, for single steps and batched reads alike."""
    def verify(n: int) -> float:
        return verify_base + verify_per_token * n

    return CostProfile(name, verify, drafter * verify(1), lambda n: drafter * verify(n))


def measured_profile(name: str, verify_ms: dict[int, float], draft_ms: float, catchup_ms: dict[int, float]) -> CostProfile:
    """A machine as measured: block sizes interpolated as the live cost model does."""
    def curve(points: dict[int, float]) -> Callable[[int], float]:
        c = CostModel()
        for n, ms in points.items():
            c.add_verify(int(n), ms)
        return lambda n: c.shape_cost(n) or 0.0

    return CostProfile(name, curve(verify_ms), draft_ms, curve(catchup_ms))


#: The profiles of issue 9: verify n tokens = base + per_token * n steps, drafter share of the target.
PROFILES = {
    "gpu": linear_profile("gpu", 1.0, 0.02, 0.1),
    "apple": linear_profile("apple", 1.0, 0.08, 0.2),
    "cpu-slow-drafter": linear_profile("cpu-slow-drafter", 0.0, 1.0, 0.7),
}


@dataclass(slots=True)
class SimResult:
    tokens: int = 0
    seconds: float = 0.0
    """Decoding time (as the live verdict and a reply's tokens/s count it)."""
    prefill_s: float = 0.0
    """The drafter reading the prompt with the target's prefill (a fixed k): counted in `rate`, so a
    policy that reads it while decoding instead (Auto) is compared on the same work."""
    rounds: int = 0
    ks: list[int] = field(default_factory=list)
    """Draft tokens verified each round (0 = plain)."""
    accepted: list[int] = field(default_factory=list)
    """Of those, accepted."""
    started: list[float] = field(default_factory=list)
    """Simulated clock at the start of each round."""
    emitted: list[int] = field(default_factory=list)
    """Tokens each round emitted."""
    first_token_s: float = 0.0
    """Until the first token, after the target's prefill: the drafter's read of the prompt where it reads it there
    (a fixed k) and the reply's first round (draft, catch-up, verification), as the bench's TTFT counts them."""
    estimated_speedup: float | None = None
    """The engine's verdict for the reply (engine.decoding.verdict), as the live loop reports it."""
    certainty: Certainty = Certainty.UNKNOWN

    @property
    def rate(self) -> float:
        seconds = self.seconds + self.prefill_s
        return self.tokens / seconds if seconds else 0.0


def calibrated_costs(profile: CostProfile) -> CostModel:
    """The cost model as a session starts it: the target's blocks and the drafter timed at load."""
    costs = CostModel()
    for _ in range(2):
        for n in (1, 2, 4, 8, 16):
            costs.add_verify(n, profile.verify(n))
    for _ in range(3):
        costs.draft_per_token.add(profile.draft_step)
        for n in (16, 64):
            costs.catchup.add(n, profile.catchup(n))
    return costs


def simulate(trace: Trace, profile: CostProfile, make_policy: Callable[[CostModel], DraftPolicy],
             drafter: str = "model", costs: CostModel | None = None,
             load: Callable[[float], float] = lambda _t: 1.0, control: bool = False) -> SimResult:
    """Decode `trace` with the policy, as `generate` would: drafter 'model', 'lookup' or 'lookup+model'.
    `load(t)`: how many times slower than the profile the machine runs at simulated second t (a
    clock the caller controls: the costs the engine was calibrated with go stale). `control`: the live
    engine's control rounds (verdict.ControlRounds), as a Session has them."""
    costs = costs or calibrated_costs(profile)
    verdict = PlainEstimate()
    controls = ControlRounds(costs) if control else None
    policy = make_policy(costs)
    use_model, use_lookup = "model" in drafter, "lookup" in drafter
    res = SimResult()
    n = trace.tokens
    # Reply position; reply tokens the model drafter has read: it read the prompt but its last token with the
    # target's prefill, or (a policy that does not read it there: Auto) none of it. Either way the read is
    # part of the reply's time, so a fixed k and Auto are compared on the same work.
    t, read = 0, 0
    unread = trace.prompt - min(trace.opening, trace.prompt - 1)  # the opening was read at load
    if use_model and unread > 1:
        if policy.reads_prompt:
            res.prefill_s = profile.catchup(unread - 1) * load(0.0)
        else:
            read = 1 - unread
    # What the live loop tells the policy: the tokens the reply's limit leaves, not where the reply ends (asked
    # with its end, a policy reads its drafter's backlog only for replies long enough to repay it).
    end = n if trace.max_tokens is None else max(n, trace.max_tokens)
    while t < n:
        slow = load(res.seconds)
        behind = t + 1 - read
        req = (DraftRequest() if controls is not None and controls.due(end - t)
               else policy.request(end - t - 1, behind, end - t, max(0, min(t, behind - 1))))
        key, k, drafted, accepted = DraftKey(DraftKind.NONE), 0, 0, 0
        draft_s = catchup_s = 0.0
        catchup_n = 0
        proposal = trace.lookup.get(t) if use_lookup and req.lookup_k > 0 else None
        aside = None  # a lookup pruned away: (key, tokens offered, of those right)
        if proposal is not None:
            match, offered, right = proposal
            key, k = lookup_key(match), req.lookup_k
            drafted = policy.prune(key, min(offered, k))
            accepted = min(right, drafted)
            if drafted == 0:
                aside = (key, offered, right)
        judged_look: tuple = ()
        if drafted == 0 and use_model and req.look > 0:  # as ModelDrafter._look: the backlog read, nothing drafted
            catchup_n = behind - 1
            catchup_s = profile.catchup(catchup_n)
            judged_look = look_windows([trace.model_match[p] == "1" for p in range(t - req.look, t)])
            read = t
        elif drafted == 0 and use_model and req.model_k > 0:
            key, k = DraftKey(DraftKind.MODEL), req.model_k
            drafted = k
            accepted = min(trace.model_run(t), k)
            if behind > CATCHUP_MIN:  # as ModelDrafter: a backlog is read apart, one or two tokens with the first step
                catchup_n = behind - 1
                catchup_s = profile.catchup(catchup_n)
                draft_s = k * profile.draft_step
            else:
                draft_s = profile.catchup(behind) + (k - 1) * profile.draft_step
            read = t + min(accepted, k - 1) + 1
        draft_s, catchup_s = draft_s * slow, catchup_s * slow
        verify_s, overhead_s = profile.verify(drafted + 1) * slow, profile.overhead * slow
        # judged as the loop judges it (speculative.judged_aside): against the round's accepted + 1 tokens
        judged = () if aside is None else ((aside[0], min(aside[1], accepted + 1), min(aside[2], accepted + 1)),)
        o = RoundOutcome(k=k, drafted=drafted, accepted=accepted, draft_s=draft_s, verify_s=verify_s,
                         overhead_s=overhead_s, key=key, catchup_s=catchup_s, catchup_tokens=catchup_n,
                         aside=judged + judged_look)
        emitted = min(accepted + 1, n - t)
        verdict.add_round(costs, o, emitted)
        costs.record(o)
        policy.observe(o)
        if controls is not None:
            controls.observe(o, emitted)
        res.started.append(res.seconds)
        res.emitted.append(emitted)
        if not res.rounds:
            res.first_token_s = res.prefill_s + draft_s + catchup_s + verify_s + overhead_s
        t += emitted
        res.tokens += emitted
        res.seconds += draft_s + catchup_s + verify_s + overhead_s
        res.rounds += 1
        res.ks.append(drafted)
        res.accepted.append(accepted)
    res.estimated_speedup = verdict.speedup(res.tokens, res.seconds)
    res.certainty = verdict.certainty()
    return res


def auto_policy(drafter: str) -> Callable[[CostModel], DraftPolicy]:
    return lambda costs: AutoK(costs, k_max=K_MAX, drafter_is_model="model" in drafter)


def fixed_policy(k: int) -> Callable[[CostModel], DraftPolicy]:
    return lambda costs: FixedK(k) if k else NoDraft()


def best_fixed(trace: Trace, profile: CostProfile, drafter: str) -> tuple[int, SimResult]:
    """The fixed k (0..K_MAX, 0 = plain) that was fastest on this trace, in hindsight."""
    runs = [(k, simulate(trace, profile, fixed_policy(k), drafter)) for k in range(K_MAX + 1)]
    return max(runs, key=lambda kr: kr[1].rate)


# -- the cases Auto is held to (tests/engine/drafting/test_replay.py) ------------------------------
def synthetic(name: str, segments: list[tuple[float, int]], seed: int = 0) -> Trace:
    """A model drafter whose next-token guesses are right with probability p, segment by segment."""
    rng = np.random.default_rng(seed)
    bits = "".join("1" if rng.random() < p else "0" for p, n in segments for _ in range(n))
    return Trace(name, "synthetic", bits)


SYNTHETIC = [synthetic(f"p={p} seed={s}", [(p, 500)], s) for p in (0.2, 0.35, 0.5, 0.65, 0.8, 0.95) for s in (0, 1)]
#: Acceptance 0.2 -> 0.9 at token 400 and back at token 1200.
REGIME = synthetic("regime", [(0.2, 400), (0.9, 800), (0.2, 400)])
REGIME_CHANGES = ((400, 1200, 0.9), (1200, 1600, 0.2))
"""(token where the acceptance changes, token where the segment ends, the new acceptance)."""


def recorded_profile(head: dict) -> CostProfile:
    """This machine as measured when the traces were recorded (a traces file's first line)."""
    return measured_profile("this machine", {int(n): v for n, v in head["verify_ms"].items()}, head["draft_ms"],
                            {int(n): v for n, v in head["catchup_ms"].items()})


def all_cases(traces_path: Path | None) -> list[tuple[str, CostProfile, Trace, str]]:
    """(profile name, profile, trace, drafter) over every profile, the synthetic traces (model
    drafter) and the recorded ones (model, lookup and both)."""
    profiles, traces = dict(PROFILES), []
    if traces_path is not None and Path(traces_path).exists():
        head, traces = load_traces(traces_path)
        profiles["this machine"] = recorded_profile(head)
    out = []
    for pname, profile in profiles.items():
        out += [(pname, profile, t, "model") for t in [*SYNTHETIC, REGIME]]
        out += [(pname, profile, t, d) for t in traces for d in ("model", "lookup", "lookup+model")]
    return out


@dataclass(frozen=True, slots=True)
class Comparison:
    """Auto on one case against plain decoding and the best fixed k in hindsight."""

    profile: str
    case: str
    vs_best: float
    vs_plain: float
    best_k: int


def compare(pname: str, profile: CostProfile, trace: Trace, drafter: str) -> Comparison:
    auto = simulate(trace, profile, auto_policy(drafter), drafter)
    plain = simulate(trace, profile, fixed_policy(0), drafter)
    k, best = best_fixed(trace, profile, drafter)
    return Comparison(pname, f"{trace.name} / {drafter}", auto.rate / best.rate, auto.rate / plain.rate, k)


# -- recording ----------------------------------------------------------------------------------------
def record_trace(name: str, category: str, target_vocab: int, prompt: Sequence[int], reply: Sequence[int],
                 drafter_model=None, opening: int = 0) -> Trace:
    """A trace of one greedy reply: the drafter (an engine LlamaModel, or None) reads prompt + reply
    in one batch and its argmax at each position is compared with the reply; prompt lookup is run
    at every position as the LookupDrafter runs it. `opening`: of the prompt, what the drafter read at load."""
    match = ""
    if drafter_model is not None:
        from engine.llama.types import (
            Logits,  # only here: the rest of replay runs without llama.cpp
        )

        ctx = list(prompt) + list(reply)
        drafter_model.clear()
        drafter_model.decode(ctx[: len(prompt) - 1], Logits.NONE)
        rows = drafter_model.decode(ctx[len(prompt) - 1 : -1], Logits.ALL)  # row i predicts reply[i]
        guesses = np.argmax(rows[:, :target_vocab], axis=1)
        match = "".join("1" if int(g) == int(r) else "0" for g, r in zip(guesses, reply))
        drafter_model.clear()
    lookup: dict[int, tuple[int, int, int]] = {}
    lk = LookupDrafter()
    lk.begin(list(prompt))
    lk.reply_starts(len(prompt))  # the bench's prompts are rendered conversations
    for t in range(len(reply)):
        ctx = list(prompt) + list(reply[:t])
        found = lk.find(ctx, K_MAX)
        if found is not None:
            n_match, cont = found
            right = 0
            while right < len(cont) and t + right < len(reply) and cont[right] == reply[t + right]:
                right += 1
            lookup[t] = (n_match, len(cont), right)
    return Trace(name, category, match or "0" * len(reply), lookup, len(prompt), opening)
