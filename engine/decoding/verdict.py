"""Is speculation helping, right now? The reply's speed against what plain decoding would have
taken for the same tokens, each round priced at the speed the machine ran that round.

A price measured at load goes stale as soon as the machine's load changes (a browser, a build,
battery saving): a reply then looks 3x faster or slower than it is. Instead every round's own
verification pass says how fast the target runs now (its time against the calibrated shape of
block costs), and plain decoding's cost for that round's tokens is V(1) at that speed. The sum
over the reply is the counterfactual plain time; the speedup is that over the reply's own time.
"""
from __future__ import annotations

import statistics

from engine.decoding.events import Certainty
from engine.decoding.policy import CostModel, RoundOutcome

#: Rounds before a verdict is given: the first ones carry warm-up and one noisy pass decides too much.
MIN_ROUNDS = 4
#: The machine's load changed during the reply when the median speed of its first and second
#: halves of rounds differ by more than this factor (single rounds vary by 10-15% on a quiet machine;
#: medians of halves do not).
LOAD_CHANGE = 1.3


class PlainEstimate:
    """What plain decoding would have cost for the tokens a reply emitted, round by round."""

    def __init__(self) -> None:
        self.plain_s = 0.0
        self.tokens = 0
        self.rounds = 0
        self.ratios: list[float] = []

    def add_round(self, costs: CostModel, o: RoundOutcome, kept: int) -> None:
        """Call before `costs.record(o)`: the round is priced against the shape it was decided on."""
        n = o.drafted + 1
        price = costs.plain_price(n, o.verify_s)
        if price is None:
            return
        self.rounds += 1
        ratio = costs.speed_ratio(n, o.verify_s)
        if ratio is not None:
            self.ratios.append(ratio)
        self.plain_s += kept * price
        self.tokens += kept

    def plain_tokens_per_s(self) -> float | None:
        return self.tokens / self.plain_s if self.plain_s > 0 and self.tokens else None

    def speedup(self, tokens: int, seconds: float) -> float | None:
        """`tokens` emitted in `seconds` of generation, against plain decoding's time for them."""
        plain = self.plain_tokens_per_s()
        if plain is None or tokens <= 0 or seconds <= 0:
            return None
        return tokens / seconds / plain

    def certainty(self) -> Certainty:
        if not self.tokens:
            return Certainty.UNKNOWN
        if self.rounds < MIN_ROUNDS:
            return Certainty.FEW_ROUNDS
        half = len(self.ratios) // 2
        if half >= 2:
            a, b = statistics.median(self.ratios[:half]), statistics.median(self.ratios[half:])
            if min(a, b) > 0 and max(a, b) / min(a, b) > LOAD_CHANGE:
                return Certainty.LOAD_CHANGED
        return Certainty.SETTLED
