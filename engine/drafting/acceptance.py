"""How often a kind of draft is kept, by position: the Beta posterior Auto prices drafts with (engine.drafting.policy)."""
from __future__ import annotations

from collections import deque

from engine.drafting.draft_choice import DraftKind

#: Prior acceptance of a kind of draft, as a Beta (mean, worth this many judgements): a model
#: drafter of the target's family usually agrees, a lookup is a guess. The weight fades as the
#: kind's own rounds pass (halved after POOLED_ROUNDS), down to PRIOR_FLOOR.
#: A Gemma 4 assistant keeps about half of its drafts (llama.cpp's draft-mtp on the same pair), fewer than a
#: family model drafter.
PRIORS = {DraftKind.MODEL: (0.8, 5.0), DraftKind.MTP: (0.6, 5.0), DraftKind.LOOKUP: (0.5, 2.0),
          DraftKind.HISTORY: (0.5, 2.0)}
PRIOR_FLOOR = 2.0
#: Rounds whose judgements the pooled estimate keeps; rounds a position's own judgements are kept.
POOLED_ROUNDS, OWN_ROUNDS = 16, 32
#: How many judgements the pooled estimate is worth against a position's own.
OWN_WEIGHT = 8.0
#: A draft is at most REACH_GROWTH x its key's longest kept run of the last OWN_ROUNDS rounds + REACH_STEP
#: (REACH_START before any), where Auto is cautious (policy.CAUTIOUS): 4, 11, 16 over rounds that kept everything
#: (test_a_document_the_reply_stops_quoting_costs_next_to_nothing).
REACH_GROWTH, REACH_STEP, REACH_START = 2, 3, 4


class Acceptance:
    """Acceptance by draft position for one kind of draft: a_j = P(token j kept | all before kept)."""

    def __init__(self, k_max: int, prior: tuple[float, float] = PRIORS[DraftKind.MODEL],
                 parent: "Acceptance | None" = None, inherit: float = 0.0) -> None:
        self.prior = prior
        self.inherit = inherit
        """Judgements of the parent's a fresh key is worth at most (0: only the parent's mean, at the prior's weight)."""
        # Lookup drafts are learned per match length (and confidence), which would make every key
        # start from scratch: each starts from what the coarser key did instead (its parent).
        self.parent = parent
        self.rounds = 0
        self.at: list[deque[tuple[int, int]]] = [deque() for _ in range(k_max)]
        """Per position: (round, 1 kept / 0 rejected) of the last OWN_ROUNDS rounds."""
        self.pooled: deque[int] = deque()
        """Every judgement of the last POOLED_ROUNDS rounds, oldest first."""
        self._judged: deque[int] = deque()  # judgements per round, to drop a whole round from `pooled`
        self._runs: deque[tuple[int, int]] = deque()  # (round, tokens accepted) of the last OWN_ROUNDS rounds
        # Running sums of the windows: Auto decides every round, for every k.
        self._kept_at = [0] * k_max
        self._kept = 0

    def beta(self) -> tuple[float, float]:
        """The pooled posterior: the prior (or the parent's mean) plus recent judgements."""
        mean, weight = self.prior
        # The prior stands in for a fresh drafter; in a steady window it would only bias.
        weight = max(PRIOR_FLOOR, weight * POOLED_ROUNDS / (POOLED_ROUNDS + self.rounds))
        if self.parent is not None:
            pa, pb = self.parent.beta()
            mean = pa / (pa + pb)
            # A fresh key is as sure as its parent (up to `inherit` judgements), not as unsure as a prior.
            weight = max(weight, min(pa + pb, self.inherit) * POOLED_ROUNDS / (POOLED_ROUNDS + self.rounds))
        return mean * weight + self._kept, (1 - mean) * weight + len(self.pooled) - self._kept

    def mean(self) -> float:
        a, b = self.beta()
        return a / (a + b)

    def values(self, k: int) -> list[float]:
        """a_0 .. a_{k-1}. With the acceptance p only known as Beta(a, b), j tokens kept in a row
        make the next one likelier: a_j = (a + j) / (a + b + j). So while the estimate is uncertain
        longer drafts are worth more, and they are what teaches about later positions. A position
        with judgements of its own moves towards them."""
        a, b = self.beta()
        out = []
        for j in range(k):
            curve = (a + j) / (a + b + j)
            out.append((self._kept_at[j] + OWN_WEIGHT * curve) / (len(self.at[j]) + OWN_WEIGHT))
        return out

    def value(self, j: int) -> float:
        return self.values(j + 1)[j]

    def reach(self) -> int:
        """The longest draft worth verifying of this kind now (REACH_GROWTH): from its own recent runs,
        else from its parent's, else REACH_START."""
        if self._runs:
            return REACH_GROWTH * max(a for _, a in self._runs) + REACH_STEP
        return self.parent.reach() if self.parent is not None else REACH_START

    def expected_tokens(self, k: int, perfect: bool = False) -> float:
        total, run = 1.0, 1.0
        for a in [1.0] * k if perfect else self.values(k):
            run *= a
            total += run
        return total

    def observe(self, verified: int, accepted: int) -> None:
        if self.parent is not None:
            self.parent.observe(verified, accepted)
        self.rounds += 1
        # Position j is judged only when all before it were accepted.
        judged = min(verified, accepted + 1, len(self.at))
        for j in range(judged):
            ok = 1 if j < accepted else 0
            self.at[j].append((self.rounds, ok))
            self._kept_at[j] += ok
            self.pooled.append(ok)
            self._kept += ok
        self._judged.append(judged)
        self._runs.append((self.rounds, accepted))
        while self._runs[0][0] <= self.rounds - OWN_ROUNDS:
            self._runs.popleft()
        if len(self._judged) > POOLED_ROUNDS:
            for _ in range(self._judged.popleft()):
                self._kept -= self.pooled.popleft()
        for j, seen in enumerate(self.at):
            while seen and seen[0][0] <= self.rounds - OWN_ROUNDS:
                self._kept_at[j] -= seen.popleft()[1]
