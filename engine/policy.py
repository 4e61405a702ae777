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


class Ewma:
    """Exponentially weighted moving average (None until the first sample)."""

    __slots__ = ("alpha", "value", "n")

    def __init__(self, alpha: float = 0.15, value: float | None = None) -> None:
        self.alpha, self.value, self.n = alpha, value, 0 if value is None else 1

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
            self.draft_per_token.add(o.draft_s / o.drafted)

    def plain_token_cost(self) -> float | None:
        v = self.verify_cost(1)
        return None if v is None else v + (self.overhead.value or 0.0)

    def estimated_plain_tokens_per_s(self) -> float | None:
        c = self.plain_token_cost()
        return None if not c else 1.0 / c


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    """What the policy learns from a round."""

    k: int
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    overhead_s: float


class DraftPolicy(ABC):
    label: str = ""

    @abstractmethod
    def choose_k(self, limit: int) -> int:
        """Draft length for the next round, at most `limit`."""

    def observe(self, outcome: RoundOutcome) -> None:
        """Learn from a finished round."""


class NoDraft(DraftPolicy):
    label = "none"

    def choose_k(self, limit: int) -> int:
        return 0


class FixedK(DraftPolicy):
    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError("draft length must be 0 or more")
        self.k = k
        self.label = f"fixed k={k}"

    def choose_k(self, limit: int) -> int:
        return min(self.k, limit)


class AutoK(DraftPolicy):
    """Choose k to maximise expected tokens per second (see the module docstring)."""

    label = "auto"

    def __init__(self, costs: CostModel, k_max: int = 16, drafter_is_model: bool = True,
                 probe_every: int = 16, max_probe_every: int = 256) -> None:
        self.costs = costs
        self.k_max = k_max
        self.drafter_is_model = drafter_is_model
        # Optimistic start: a fresh drafter is assumed good until measured otherwise.
        self.accept_at = [Ewma(alpha=0.1, value=0.8) for _ in range(k_max)]
        self.probe_every = probe_every
        self.base_probe_every = probe_every
        self.max_probe_every = max_probe_every
        self.rounds_since_draft = 0
        self.last_choice = 0

    # -- the model -----------------------------------------------------------
    def draft_cost(self, k: int) -> float:
        per = self.costs.draft_per_token.value
        if per is None:  # unmeasured: a model drafter costs something, lookup almost nothing
            plain = self.costs.verify_cost(1) or 0.0
            per = 0.3 * plain if self.drafter_is_model else 0.0
        return per * k

    def expected_tokens(self, k: int, perfect: bool = False) -> float:
        total, run = 1.0, 1.0
        for j in range(k):
            run *= 1.0 if perfect else (self.accept_at[j].value or 0.0)
            total += run
        return total

    def round_cost(self, k: int) -> float | None:
        v = self.costs.verify_cost(k + 1)
        if v is None:
            return None
        return self.draft_cost(k) + v + (self.costs.overhead.value or 0.0)

    def rate(self, k: int, perfect: bool = False) -> float:
        cost = self.round_cost(k)
        return 0.0 if not cost else self.expected_tokens(k, perfect) / cost

    def best_k(self, limit: int, perfect: bool = False) -> int:
        best, best_rate = 0, self.rate(0)
        for k in range(1, min(limit, self.k_max) + 1):
            r = self.rate(k, perfect)
            if r > best_rate * 1.02:  # a 2% margin: do not draft for a tie
                best, best_rate = k, r
        return best

    # -- the policy ----------------------------------------------------------
    def choose_k(self, limit: int) -> int:
        if limit <= 0:
            return 0
        if self.costs.verify_cost(1) is None:
            k = 0  # measure plain decoding first: everything is priced against it
        else:
            k = self.best_k(limit)
            if k == 0:
                self.rounds_since_draft += 1
                if self.rounds_since_draft >= self.probe_every and self.best_k(limit, perfect=True) > 0:
                    # Probe: the text may have changed since the drafter last failed.
                    k = min(limit, max(2, self.best_k(limit, perfect=True) // 2))
        self.last_choice = k
        return k

    def observe(self, o: RoundOutcome) -> None:
        if o.drafted:
            for j in range(min(o.drafted, self.k_max)):
                # Position j is judged only when all before it were accepted.
                if j > o.accepted:
                    break
                self.accept_at[j].add(1.0 if j < o.accepted else 0.0)
            was_probe = self.rounds_since_draft >= self.probe_every
            self.rounds_since_draft = 0
            if was_probe:
                # If the probe did not change the verdict, wait longer before the next one.
                if self.best_k(self.k_max) == 0:
                    self.probe_every = min(self.max_probe_every, self.probe_every * 2)
                else:
                    self.probe_every = self.base_probe_every

