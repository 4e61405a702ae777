"""Is speculation helping, right now? The reply's speed against what plain decoding would have
taken for the same tokens, each round priced at the speed the machine ran that round.

A price measured at load goes stale as soon as the machine's load changes (a browser, a build,
battery saving): a reply then looks 3x faster or slower than it is. Instead every round's own
verification pass says how fast the target runs now, and plain decoding's cost for that round's
tokens is V(1) at that speed: the round's time times V(1)/V(n), as the calibrated shape of block
costs says, corrected by plain rounds next to drafting ones (ControlRounds puts one in now and
then where it costs next to nothing). The sum over the reply is the counterfactual plain time;
the speedup is that over the reply's own time.
"""
from __future__ import annotations

import statistics

from engine.decoding.events import Certainty
from engine.drafting.costs import CostModel, RoundOutcome, ran_on

#: Rounds before a verdict is given: the first ones carry warm-up and one noisy pass decides too much.
MIN_ROUNDS = 4
#: The load changed when the median round speeds of the reply's two halves of time differ by more than this:
#: single rounds vary 10-15% on a quiet machine, medians of halves do not (halves of time: long rounds come late).
LOAD_CHANGE = 1.3
#: A first token later than plain decoding's by this much is a wait a person notices: the verdict says so, and
#: a reply that was only about as fast as plain decoding after it is judged slower.
FIRST_TOKEN_LATE_S = 0.1


def first_token_late(delay_s: float | None) -> bool:
    """Whether a reply's first token came noticeably later than plain decoding's would have (Stats.first_token_delay_s)."""
    return delay_s is not None and delay_s >= FIRST_TOKEN_LATE_S


class PlainEstimate:
    """What plain decoding would have cost for the tokens a reply emitted, round by round: a round
    that verified n tokens in t seconds cost plain decoding V(1) per token at that round's speed,
    t times V(1)/V(n) of the shape as corrected now (CostModel.correction: the correction is about
    this depth in the context and this calibration, not about the load, so the newest one prices
    the whole reply)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.passes = 0  # single-token passes plain decoding needs for them: the tokens, and an end-of-generation one
        self.rounds = 0
        self.ratios: list[float] = []
        self._seconds: list[float] = []  # each priced round's verify time, beside its ratio
        self._costs: CostModel | None = None
        # kept x seconds, per (block size, whether the model drafter had just run: CostModel.interference, depth,
        # threads: RoundOutcome.threads, 0 for all)
        self._by_size: dict[tuple[int, bool, int | None, int], float] = {}
        self._after_model = False

    def add_round(self, costs: CostModel, o: RoundOutcome, kept: int, ended: bool = False) -> None:
        """Call before `costs.record(o)`: the round is priced against the shape it was decided on. `ended`: its
        block ended at an end-of-generation token, which plain decoding decodes too, emitting nothing (left
        out, a 17-token reply decoded plainly read 0.94x)."""
        n = o.drafted + 1
        model = bool(o.drafted) and o.key.kind.runs_model
        after_model, self._after_model = model or (n == 1 and self._after_model), model
        threads = ran_on(o.threads)
        if costs.plain_price(n, o.verify_s, o.depth, threads) is None:
            return
        self._costs = costs
        self.rounds += 1
        ratio = costs.speed_ratio(n, o.verify_s, o.depth)
        if ratio is not None:
            self.ratios.append(ratio)
            self._seconds.append(o.verify_s)
        priced = kept + (1 if ended else 0)
        # Rounds are summed per key (the price is linear in the seconds), and the key is re-priced every
        # round event: the depth goes in only where it moves the price (a block, with the shape at two
        # depths), so a plain reply stays at one key, not one per round; the threads, because pairs are
        # learned per thread count (CostModel.pairs).
        size = (n, after_model, o.depth if n > 1 and costs.depths[1] > costs.depths[0] else None, threads)
        self._by_size[size] = self._by_size.get(size, 0.0) + priced * o.verify_s
        self.tokens += kept
        self.passes += priced

    @property
    def plain_s(self) -> float:
        c = self._costs
        if c is None:
            return 0.0
        total = self.passes * c.round_overhead(0)
        for (n, after_model, depth, threads), s in self._by_size.items():
            v1 = c.plain_price(n, s, depth, threads) - c.round_overhead(0)  # linear in the seconds
            total += v1 / c.interference if after_model else v1
        return total

    def plain_tokens_per_s(self) -> float | None:
        plain = self.plain_s
        return self.tokens / plain if plain > 0 and self.tokens else None

    def speedup(self, tokens: int, seconds: float) -> float | None:
        """`tokens` emitted in `seconds` of generation, against plain decoding's time for them."""
        plain = self.plain_tokens_per_s()
        if plain is None or tokens <= 0 or seconds <= 0:
            return None
        return tokens / seconds / plain

    def _middle(self) -> int:
        """The first round of the reply's second half of (verify) time."""
        total, run = sum(self._seconds), 0.0
        for i, s in enumerate(self._seconds):
            if run >= total / 2:
                return i
            run += s
        return len(self._seconds)

    def certainty(self) -> Certainty:
        if not self.tokens:
            return Certainty.UNKNOWN
        if self.rounds < MIN_ROUNDS:
            return Certainty.FEW_ROUNDS
        half = self._middle()
        if min(half, len(self.ratios) - half) < 2:
            half = len(self.ratios) // 2  # a half of time with one round in it: halves of rounds
        if half >= 2:
            a, b = statistics.median(self.ratios[:half]), statistics.median(self.ratios[half:])
            if min(a, b) > 0 and max(a, b) / min(a, b) > LOAD_CHANGE:
                return Certainty.LOAD_CHANGED
        return Certainty.SETTLED


#: A control round is due after this many rounds without a plain one, CONTROL_FIRST for a reply's first
#: FIRST_CONTROLS: V(1)/V(n) moves with the depth in the context, so each reply learns its own early...
CONTROL_EVERY, CONTROL_FIRST, FIRST_CONTROLS = 12, 4, 3
#: ...when it costs at most this share of the time since the last plain round (a plain round that is
#: as fast per token as drafting costs nothing: on CPUs, where verifying n tokens costs nearly n steps).
CONTROL_BUDGET = 0.01


class ControlRounds:
    """Now and then one plain round among drafting ones, so the verdict prices plain decoding with
    V(1) measured in the same minute and at the same depth in the context (a calibrated shape is
    measured at another depth and another load). The output is the same: a plain round is a round
    that drafted nothing. What it may cost is bounded by CONTROL_BUDGET."""

    def __init__(self, costs: CostModel) -> None:
        self.costs = costs
        self.since = 0
        self.spent_s = 0.0
        self.tokens = 0
        self.done = 0  # control rounds in this reply
        self.model = False  # the drafting rounds since the last plain one drafted with the model

    def due(self, remaining: int | None = None) -> bool:
        """Whether this round should be plain; `remaining`: tokens the reply may still emit (near its
        end a plain round would be one round more, not one instead)."""
        if self.since < (CONTROL_EVERY if self.done >= FIRST_CONTROLS else CONTROL_FIRST) or not self.tokens:
            return False
        plain = self.costs.plain_token_cost()
        if plain is None:
            return False
        if remaining is not None and remaining < 4 * self.tokens / self.since:
            return False
        per_token = self.spent_s / self.tokens  # what drafting made a token cost, lately
        # After a plain round the model drafter reads the token it did not draft: a catch-up to pay.
        catchup = self.costs.catchup_cost(2) - self.costs.draft_cost(1) if self.model else 0.0
        return plain - per_token + max(0.0, catchup) <= CONTROL_BUDGET * self.spent_s

    def observe(self, o: RoundOutcome, kept: int) -> None:
        if not o.drafted:
            self.done += self.since > 0
            self.since, self.spent_s, self.tokens = 0, 0.0, 0
            return
        self.since += 1
        self.model = o.key.kind.runs_model
        self.spent_s += o.verify_s + o.draft_s + o.catchup_s + o.overhead_s
        self.tokens += kept
