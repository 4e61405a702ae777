"""How long a draft to ask for: a fixed k, or "Auto", which prices every k from measured costs.

Auto picks, each round, the k (0 = plain decoding) that maximises expected tokens per second:

    E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j        tokens a round emits on average
    T(k) = D(k) + V(k + 1) + O                     seconds it costs

a_j is the measured chance that draft position j is accepted given that the ones before it
were, D(k) the drafter's cost for k tokens, V(n) the target's cost to score a block of n
tokens (not linear everywhere: measured, interpolated between measured sizes) and O the
engine's own overhead per round. All are moving averages, so a change in the text (prose to
code) or in the machine's load is noticed. When drafting is off it re-probes now and then,
backing off exponentially while the probes keep saying no, and never when even perfect
acceptance could not beat plain decoding.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


#: Draft length of a probe (drafting is off, is it worth turning back on?).
PROBE_K = 2


class Ewma:
    """Exponentially weighted moving average (None until the first sample)."""

    __slots__ = ("alpha", "value", "n")

    def __init__(self, alpha: float = 0.15, value: float | None = None, weight: int = 1) -> None:
        # `weight`: how many samples a prior `value` is worth before real ones arrive.
        self.alpha, self.value, self.n = alpha, value, 0 if value is None else weight

    def add(self, x: float) -> None:
        self.n += 1
        # The first few samples get more weight so the average settles quickly.
        a = max(self.alpha, 1.0 / self.n)
        self.value = x if self.value is None else self.value + a * (x - self.value)


class CostModel:
    """What things cost on this machine, for this pair, measured while it runs."""

    def __init__(self) -> None:
        self.verify: dict[int, Ewma] = {}  # block size -> seconds for one target pass
        self.draft_per_token = Ewma()
        self.overhead = Ewma(value=0.0)
        self.plain_overhead = Ewma()  # rounds without a draft do less bookkeeping
        self.overhead_per_draft_token = Ewma()  # judging each drafted token costs a little more

    def add_verify(self, n: int, seconds: float) -> None:
        self.verify.setdefault(n, Ewma()).add(seconds)

    def verify_cost(self, n: int) -> float | None:
        pts = sorted((k, e.value) for k, e in self.verify.items() if e.value is not None)
        if not pts:
            return None
        for (n0, v0), (n1, v1) in zip(pts, pts[1:]):
            if n0 <= n <= n1:
                return v0 + (v1 - v0) * (n - n0) / (n1 - n0)
        if n <= pts[0][0]:
            return pts[0][1]
        # Beyond the largest measured block: grow in proportion (pessimistic where it flattens).
        n_last, v_last = pts[-1]
        return v_last * n / n_last

    def record(self, o: "RoundOutcome") -> None:
        """Every round, whatever the policy: the estimated speedup needs these too."""
        self.add_verify(o.drafted + 1, o.verify_s)
        self.overhead.add(o.overhead_s)
        if o.drafted:
            if o.key == "model":  # a lookup costs next to nothing and is not priced
                self.draft_per_token.add(o.draft_s / o.drafted)
            if self.plain_overhead.value is not None:
                self.overhead_per_draft_token.add(max(0.0, o.overhead_s - self.plain_overhead.value) / o.drafted)
        else:
            self.plain_overhead.add(o.overhead_s)

    def round_overhead(self, k: int) -> float:
        """The engine's own time for a round that drafts k tokens."""
        base = self.plain_overhead.value if self.plain_overhead.value is not None else self.overhead.value
        return (base or 0.0) + k * (self.overhead_per_draft_token.value or 0.0)

    def plain_token_cost(self) -> float | None:
        v = self.verify_cost(1)
        return None if v is None else v + self.round_overhead(0)

    def estimated_plain_tokens_per_s(self) -> float | None:
        c = self.plain_token_cost()
        return None if not c else 1.0 / c


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    """What the policy learns from a round."""

    k: int
    drafted: int
    """Draft tokens the target verified (after pruning)."""
    accepted: int
    draft_s: float
    verify_s: float
    overhead_s: float
    key: str = "model"
    """Kind of draft ("model", "lookup:3" for a 3-token n-gram match): acceptance is learned per kind."""


class DraftPolicy(ABC):
    """Decides how much to draft (before proposing) and how much of a draft to verify (after)."""

    label: str = ""

    @abstractmethod
    def choose_k(self, limit: int) -> int:
        """How many tokens a model drafter should draft next round (at most `limit`)."""

    def lookup_k(self, limit: int) -> int:
        """How many tokens a prompt-lookup drafter may propose (proposing costs nothing)."""
        return self.choose_k(limit)

    def prune(self, key: str, proposed: int) -> int:
        """How many of `proposed` draft tokens of kind `key` to verify."""
        return proposed

    def observe(self, outcome: RoundOutcome) -> None:
        """Learn from a finished round."""


class NoDraft(DraftPolicy):
    label = "none"

    def choose_k(self, limit: int) -> int:
        return 0


class FixedK(DraftPolicy):
    """The user's k, exactly as asked."""

    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError("draft length must be 0 or more")
        self.k = k
        self.label = f"fixed k={k}"

    def choose_k(self, limit: int) -> int:
        return min(self.k, limit)


class Acceptance:
    """Acceptance by draft position for one kind of draft: a_j = P(token j kept | all before kept)."""

    def __init__(self, k_max: int, prior: float = 0.8, prior_weight: int = 2) -> None:
        # Optimistic start, worth a couple of samples: a fresh drafter is assumed good until measured.
        self.prior_weight = prior_weight
        self.at = [Ewma(alpha=0.1, value=prior, weight=prior_weight) for _ in range(k_max)]

    def value(self, j: int) -> float:
        """a_j; a position never judged yet borrows the deepest judged position's value
        (acceptance changes little with depth, and probes only reach the first positions)."""
        for i in range(j, -1, -1):
            if self.at[i].n > self.prior_weight:
                return self.at[i].value or 0.0
        return self.at[j].value or 0.0

    def expected_tokens(self, k: int, perfect: bool = False) -> float:
        total, run = 1.0, 1.0
        for j in range(k):
            run *= 1.0 if perfect else self.value(j)
            total += run
        return total

    def observe(self, verified: int, accepted: int) -> None:
        # Position j is judged only when all before it were accepted.
        for j in range(min(verified, accepted + 1, len(self.at))):
            self.at[j].add(1.0 if j < accepted else 0.0)


class _Probe:
    """When drafting of one kind is off, try it again now and then, less often while it keeps failing."""

    def __init__(self, every: int = 16, max_every: int = 256) -> None:
        self.base, self.every, self.max_every, self.idle = every, every, max_every, 0

    def due(self) -> bool:
        self.idle += 1
        return self.idle >= self.every

    def drafted(self, was_probe: bool, still_off: bool) -> None:
        self.idle = 0
        if was_probe:
            self.every = min(self.max_every, self.every * 2) if still_off else self.base


class AutoK(DraftPolicy):
    """Maximise expected tokens per second from measured costs (see the module docstring)."""

    label = "auto"

    def __init__(self, costs: CostModel, k_max: int = 16, drafter_is_model: bool = True) -> None:
        self.costs = costs
        self.k_max = k_max
        self.drafter_is_model = drafter_is_model
        self.tables: dict[str, Acceptance] = {}
        self.probes: dict[str, _Probe] = {}
        self._probing: set[str] = set()

    def table(self, key: str) -> Acceptance:
        if key not in self.tables:
            self.tables[key] = Acceptance(self.k_max)
        return self.tables[key]

    # -- the model -----------------------------------------------------------
    def draft_cost(self, k: int) -> float:
        per = self.costs.draft_per_token.value
        if per is None:  # unmeasured: assume a model drafter costs a third of the target
            per = 0.3 * (self.costs.verify_cost(1) or 0.0)
        return per * k

    def rate(self, key: str, k: int, with_draft_cost: bool, perfect: bool = False) -> float:
        v = self.costs.verify_cost(k + 1)
        if not v:
            return 0.0
        cost = v + self.costs.round_overhead(k) + (self.draft_cost(k) if with_draft_cost else 0.0)
        return self.table(key).expected_tokens(k, perfect) / cost

    def best_k(self, key: str, limit: int, with_draft_cost: bool, perfect: bool = False) -> int:
        best, best_rate = 0, self.rate(key, 0, with_draft_cost)
        for k in range(1, min(limit, self.k_max) + 1):
            r = self.rate(key, k, with_draft_cost, perfect)
            if r > best_rate * 1.02:  # a 2% margin: do not draft for a tie
                best, best_rate = k, r
        return best

    def _decide(self, key: str, limit: int, with_draft_cost: bool) -> int:
        if limit <= 0 or self.costs.verify_cost(1) is None:
            return 0  # nothing measured yet: plain decoding first, everything is priced against it
        k = self.best_k(key, limit, with_draft_cost)
        probe = self.probes.setdefault(key, _Probe())
        if k == 0 and probe.due():
            if self.best_k(key, limit, with_draft_cost, perfect=True) > 0:  # could a perfect drafter win at all?
                self._probing.add(key)
                k = min(limit, PROBE_K)  # short: a failed probe must cost little
        return k

    # -- the policy ----------------------------------------------------------
    def choose_k(self, limit: int) -> int:
        return self._decide("model", limit, with_draft_cost=True) if self.drafter_is_model else 0

    def lookup_k(self, limit: int) -> int:
        return min(limit, self.k_max)

    def prune(self, key: str, proposed: int) -> int:
        if key == "model":
            return proposed  # k was already chosen for it, drafting cost included
        return self._decide(key, proposed, with_draft_cost=False)

    def observe(self, o: RoundOutcome) -> None:
        if not o.drafted:
            return
        self.table(o.key).observe(o.drafted, o.accepted)
        was_probe = o.key in self._probing
        self._probing.discard(o.key)
        still_off = self.best_k(o.key, self.k_max, with_draft_cost=o.key == "model") == 0
        self.probes.setdefault(o.key, _Probe()).drafted(was_probe, still_off)
