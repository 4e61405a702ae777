"""What drafting and verifying cost on this machine, measured while it runs: the cost model Auto prices with."""
from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from engine.drafting.request import MODEL_KEY, DraftKey
from engine.llama.calibration import disturbed


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


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    """What the policy learns from a round."""

    k: int
    """Draft length asked of the drafter that proposed."""
    drafted: int
    """Draft tokens the target verified (after pruning)."""
    accepted: int
    draft_s: float
    """Seconds of drafting proper (one drafter step per drafted token), catch-up excluded."""
    verify_s: float
    overhead_s: float = 0.0
    """Seconds of the round that were neither drafting nor verifying (its events, the engine's bookkeeping).
    Known once the round's events are out (engine.decoding.round_costs): the policy and control rounds,
    which judge a round as the loop yields it, see 0; the cost model sees it."""
    key: DraftKey = MODEL_KEY
    """Kind of draft: acceptance is learned per kind."""
    catchup_s: float = 0.0
    """Seconds the drafter spent reading tokens it had not seen before it could draft."""
    catchup_tokens: int = 0
    """How many tokens that was (in one batched read)."""
    share: float = 1.0
    """Of the CPU time the target's threads could have had while verifying, the share they got (1: the
    machine was ours, or not judged: calibration.judged). A pair of rounds beside other work is noise."""
    aside: tuple[tuple[DraftKey, int, int], ...] = ()
    """Free drafts (lookup, history) proposed this round but pruned away unverified, judged against the
    tokens the round emitted anyway: (key, tokens judged, of those kept from the first)."""
    depth: int | None = None
    """Tokens in the target's cache when it verified (None: not known, priced at the calibration's depth)."""
    threads: tuple[int, int] | None = None
    """(threads the target verified on, threads it was loaded with) where it ran on fewer because other programs
    kept cores busy (engine.llama.thread_governor); None: on all of them."""
    draft_steps: int = 0
    """A model drafter's passes in `draft_s`: one per drafted token, and one more where drafting stopped on an
    unsure or out-of-vocabulary token (0: as many as `drafted`)."""
    draft_share: float = 1.0
    """As `share`, for the drafter's passes (catch-up and steps): the lowest any of them got."""


#: What a kept or measured figure of the drafter is worth in undisturbed rounds: one round moves it by the
#: Ewma's alpha, not by half (its second sample's weight).
QUIET_SEED_WEIGHT = 8


@dataclass(slots=True)
class QuietDrafter:
    """A model drafter's step and catch-up reads in seconds, as undisturbed passes measured them (at the
    depths they are kept at): what is kept for the next launch. Seeded with what the load measured or
    read, moved only by rounds whose drafter passes ran undisturbed (calibration.disturbed). Written at
    the speed plain rounds measured instead, a session that drafted beside a test run kept a step of
    63 ms where undisturbed passes take 15-24 ms, and every later launch priced the 0.5B drafter out."""

    step: Ewma
    catchup: "BlockCost"

    @classmethod
    def seeded(cls, step: float | None, blocks: dict[int, float]) -> "QuietDrafter":
        catchup = BlockCost()
        for n, seconds in blocks.items():
            catchup.by_size[n] = Ewma(value=seconds, weight=QUIET_SEED_WEIGHT)
        return cls(Ewma(value=step, weight=QUIET_SEED_WEIGHT), catchup)


class BlockCost:
    """Seconds for one forward pass over a block of n tokens: measured at some sizes, interpolated
    between them, and beyond the largest grown in proportion (pessimistic where it flattens)."""

    def __init__(self) -> None:
        self.by_size: dict[int, Ewma] = {}
        self._points: list[tuple[int, float]] | None = None  # sorted, until the next add (Auto asks often)

    def add(self, n: int, seconds: float) -> None:
        self.by_size.setdefault(n, Ewma()).add(seconds)
        self._points = None

    def __call__(self, n: int) -> float | None:
        if self._points is None:
            self._points = sorted((k, e.value) for k, e in self.by_size.items() if e.value is not None)
        pts = self._points
        if not pts:
            return None
        for (n0, v0), (n1, v1) in zip(pts, pts[1:]):
            if n0 <= n <= n1:
                return v0 + (v1 - v0) * (n - n0) / (n1 - n0)
        if n <= pts[0][0]:
            return pts[0][1] * n / pts[0][0] if pts[0][0] > 1 else pts[0][1]
        n_last, v_last = pts[-1]
        return v_last * n / n_last


#: How fast the machine's speed factor follows the rounds: about three rounds to move most of the
#: way to a new load (a browser, a build, battery saving), yet one slow round moves it only 30%.
SPEED_ALPHA = 0.3
#: Adjacent-pair corrections of the shape kept per size of block (their median counts: one pair that straddles a
#: change of load is outvoted).
PAIRS = 7
#: Below this many pairs the calibrated shape (a correction of 1) is one more vote in their median: one pair
#: alone is one plain round's noise, and it would price plain decoding for the whole reply (test_verdict.py).
SHAPE_VOTE_UNTIL = 2


def on_depth_line(v0: float, v1: float, d0: int, d1: int, depth: int) -> float:
    """A cost measured as v0 at depth d0 and v1 at d1 (> d0), at `depth`: on the line through the two
    (beyond them too: attention's cost grows linearly with the depth), never below half of v0."""
    return max(0.5 * v0, v0 + (v1 - v0) * (depth - d0) / (d1 - d0))


@dataclass(frozen=True, slots=True)
class DepthLine:
    """How a drafter's costs grow deeper in the context: its step and a 16-token read timed at two depths
    (at load, as the target's shape). Attention over the context is a larger part of a small model's
    pass: the 0.5B drafter's step on a 2-core Xeon was 1.6x dearer 3,000 tokens in than at 128 (3.6x with
    flash attention on), the target's 1.15x; priced at one depth, a step timed in a long chat was kept
    as the step of every later chat, and Auto left a drafter that kept 15 of 15 tokens."""

    shallow: int
    deep: int
    step_ratio: float
    """The drafter's step at `deep` over its step at `shallow`."""
    block_ratio: float
    """The same for reading 16 tokens in one batch (catching up)."""

    def factor(self, depth: int | None, block: bool = False) -> float:
        """Cost at `depth` over cost at `shallow`, on the line through the two (never below half; None: 1)."""
        if depth is None or self.deep <= self.shallow:
            return 1.0
        return on_depth_line(1.0, self.block_ratio if block else self.step_ratio, self.shallow, self.deep, depth)


def _read_depth(depth: int | None, n: int) -> int | None:
    """The mean depth of a read of n tokens that ends about `depth` tokens into the context."""
    return None if depth is None else max(0, depth - n // 2)


def ran_on(threads: tuple[int, int] | None) -> int:
    """The thread count pairs are learned and priced per (RoundOutcome.threads): 0 for all the threads loaded."""
    return threads[0] if threads is not None else 0


def pair_class(n: int) -> int:
    """Blocks whose V(1)/V(n) one correction covers: 2, 3-4, 5-8, 9-16, 17-32 tokens."""
    return (n - 1).bit_length()


class CostModel:
    """What things cost on this machine, for this pair, measured while it runs.

    The target's cost is a shape times a speed: `verify` holds the cost of each block size as
    calibrated (at load, or kept from an earlier launch), `speed` how much slower (> 1) or faster
    the machine runs now, refreshed by every round whatever block size it verified. So a reply that
    always drafts k=4 still moves the price of plain decoding, V(1), with the load.

    The shape was measured at another depth in the context (attention costs grow with it, the more
    the larger the block) and maybe under another load: a plain round next to a drafting one
    measures V(1)/V(n) within a second, whatever the load, and the median of the last PAIRS such
    pairs corrects the shape's V(1)/V(n) for every n > 1 where the verdict prices plain decoding.

    Where the shape was also measured deep in the context (`deep`, at `depths[1]` tokens), V(n) at a
    round's depth is read off the line through the two: attention over the context grows with it, and
    more so for long blocks where the weights' part is cheap (with AMX on a 2-core Xeon: V(1) +15% and
    V(16) +58% from a depth of 128 to one of 3,000, so the shallow shape alone priced a 16-token block
    there 35% too cheap and a reply's estimated speedup 1.33x too high)."""

    def __init__(self) -> None:
        self.verify = BlockCost()  # the shape: the target scoring a block of n tokens, as calibrated
        self.deep = BlockCost()  # the same, measured deeper in the context (empty: one depth)
        self.depths = (0, 0)
        """The depths in the context `verify` and `deep` were measured at (deep <= shallow: no deep shape)."""
        self.depth: int | None = None
        """Where in the context the next round verifies (None: unknown, priced at the calibration's depth)."""
        self.speed = Ewma(alpha=SPEED_ALPHA, value=1.0)
        self.quiet_speed = Ewma(alpha=SPEED_ALPHA, value=1.0)
        """The speed factor as undisturbed rounds alone measure it: what is kept for the next launch. Kept at
        `speed`, a session that ended beside a busy process (llama.cpp's two threads on a 2-core machine with
        one core taken: 16x slower) started the next launch with a shape 10x too dear."""
        self.pairs: dict[tuple[int, int], deque[float]] = {}
        """Per (threads the target ran on, size class of block: pair_class): the last PAIRS corrections. A
        correction learned on 16-token lookups priced a later reply's 5-token model rounds 10% too cheap. Per
        thread count: beside a busy loop, on one thread of two 2,000 tokens deep (flash attention off), 5-token
        blocks took 1.93x a plain round where the two-thread shape said 2.4x, and with no pairs learned on
        one thread a reply at k=4 read 0.78x for 1.07x."""
        self.threads = 0
        """Threads the target ran its last round on (0: all it was loaded with): the pairs that price now."""
        # The last round's block size, seconds, whether undisturbed on its threads, depth, threads.
        self._last: tuple[int, float, bool, int | None, int] | None = None
        self.catchup = BlockCost()  # the drafter reading n unseen tokens in one batch, at the calibration's speed
        self.plain_speed = Ewma(alpha=SPEED_ALPHA, value=1.0)
        """The speed factor as plain rounds alone measure it: V(1) is what the calibration got right first,
        so a shape wrong for blocks does not move it, and the drafter's catch-up is priced with it."""
        self.draft_per_token = Ewma()
        """A model drafter's step, at the calibration's speed like the catch-up (priced with plain_speed): a
        step timed while the machine was busy was charged as busy once it was quiet, and the drafter was
        never tried again (measured: calibrated at 2x the quiet cost, Auto gave up a 1.2x drafter)."""
        self.overhead = Ewma(value=0.0)
        self.plain_overhead = Ewma()  # rounds without a draft do less bookkeeping
        self.overhead_per_draft_token = Ewma()  # judging each drafted token costs a little more
        self.interference = 1.0
        """How much slower a target step runs right after a step of the model drafter than after one of
        its own (measured at load): plain decoding, the baseline, never pays it."""
        self.draft_depth: DepthLine | None = None
        """How the drafter's step and catch-up grow with the depth (None: not measured, one depth):
        `draft_per_token` and `catchup` hold them at the line's shallow depth."""
        self.quiet_drafter = QuietDrafter.seeded(None, {})
        """The drafter's costs as undisturbed passes measured them: what is kept for the next launch."""
        self.quiet_rounds = 0
        """Rounds whose target pass ran undisturbed: they settle a provisional calibration (calibration.SETTLED_ROUNDS)."""
        self.quiet_draft_rounds = 0
        """Rounds whose model drafter's passes ran undisturbed: the same for the drafter's."""
        self._held: dict[object, float | None] | None = None  # prices memoised while held()

    def add_verify(self, n: int, seconds: float) -> None:
        """A calibration point of the shape, at the current speed."""
        self.verify.add(n, seconds / (self.speed.value or 1.0))

    def add_deep(self, n: int, seconds: float) -> None:
        """A calibration point of the shape deep in the context (at `depths[1]`), at the current speed."""
        self.deep.add(n, seconds / (self.speed.value or 1.0))

    def shape(self, n: int, depth: int | None = None) -> float | None:
        """The calibrated V(n) at `depth` tokens into the context: on the line through the two measured
        depths (beyond them too: attention's cost grows linearly with the depth), never below half the
        shallow one; None: at the calibration's depth."""
        v0 = self.verify(n)
        d0, d1 = self.depths
        if v0 is None or depth is None or d1 <= d0:
            return v0
        v1 = self.deep(n)
        return v0 if v1 is None else on_depth_line(v0, v1, d0, d1, depth)

    def correction(self, n: int, threads: int | None = None) -> float:
        """Measured V(1)/V(n) over the shape's for blocks of about n tokens, from adjacent plain and drafting
        rounds on `threads` (None: the last round's; 0: all; 1: none yet)."""
        pairs = self.pairs.get((self.threads if threads is None else threads, pair_class(n)))
        if not pairs:
            return 1.0
        return statistics.median([*pairs, 1.0] if len(pairs) < SHAPE_VOTE_UNTIL else pairs)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Prices asked again while held are answered from memory: one decision of Auto asks V(n) for the same
        n dozens of times, and nothing they depend on changes until the next round is recorded. Unmemoised,
        deciding cost 0.18 ms a round on a 2-core EPYC where the model drafter never drafted (0.01 ms
        with lookup alone): 0.3% of a plain round, on every token."""
        if self._held is not None:
            yield  # already held by the caller: its memory stands
            return
        self._held = {}
        try:
            yield
        finally:
            self._held = None

    def round_cost(self, k: int, with_draft_cost: bool) -> float | None:
        """T(k): a round that drafts k tokens, verifies k + 1 and does its bookkeeping, with the model
        drafter's steps or without them (a free draft); None while V(k + 1) is unmeasured."""
        held, key = self._held, (k, with_draft_cost)
        if held is not None and key in held:
            return held[key]
        v = self.verify_cost(k + 1)
        cost = None if not v else v + self.round_overhead(k) + (self.draft_cost(k) if with_draft_cost else 0.0)
        if held is not None:
            held[key] = cost
        return cost

    def verify_cost(self, n: int) -> float | None:
        """V(n) now, what Auto prices draft lengths with: the shape at today's speed, dearer where the
        adjacent pairs measured blocks of about n tokens dearer than the shape says (at this depth,
        under this load: quiet rounds on a 2-core Zen 5 paid 1.03-1.24x the calibrated shape, beside a
        busy loop 1.4-2.1x). A pair that reads them cheaper is left out: drafts measured against a
        plain round next to them read cheaper than the rounds Auto chooses between, and long lookup
        drafts followed."""
        held = self._held
        if held is not None and n in held:
            return held[n]
        now = self.shape_cost(n, self.depth)
        if now is not None and n != 1:
            now /= min(1.0, self.correction(n))
        if held is not None:
            held[n] = now
        return now

    def kept_cost(self, n: int, deep: bool = False) -> float | None:
        """The shape (or the deep one) at the speed undisturbed rounds measured: what a kept calibration stores."""
        shape = (self.deep if deep else self.verify)(n)
        return None if shape is None else shape * (self.quiet_speed.value or 1.0)

    def shape_cost(self, n: int, depth: int | None = None) -> float | None:
        """The calibrated shape at today's speed (at `depth`; None: the calibration's depth), without the
        pair correction (about one reply's depth and load)."""
        shape = self.shape(n, depth)
        return None if shape is None else shape * (self.speed.value or 1.0)

    def speed_ratio(self, n: int, seconds: float, depth: int | None = None) -> float | None:
        """How much slower than the shape a pass over n tokens at `depth` that took `seconds` ran (None: no shape)."""
        shape = self.shape(n, depth)
        return seconds / shape if shape else None

    def plain_price(self, n: int, seconds: float, depth: int | None = None, threads: int | None = None) -> float | None:
        """What one plain decoding token (V(1) and a plain round's overhead) cost at the speed of a
        round that verified n tokens in `seconds` at `depth` on `threads` (as `correction`): the same
        minute's price, not the load-time one, with the shape's V(1)/V(n) at that depth as the adjacent
        pairs on those threads measured it."""
        if n == 1:
            return seconds + self.round_overhead(0)
        ratio, shape1 = self.speed_ratio(n, seconds, depth), self.shape(1, depth)
        if ratio is None or not shape1:
            return None
        return shape1 * ratio * self.correction(n, threads) + self.round_overhead(0)

    def new_reply(self, depth: int | None = None) -> None:
        """A reply starts at another depth in the context (`depth`: its prompt's length), maybe under another
        load: it learns its own pairs. (Kept across replies, pairs learned beside a busy process made a quiet
        reply's verdict 2.8x for 0.94x.)"""
        self._last = None
        self.pairs.clear()
        self.depth = depth

    def _learn_pair(self, n: int, seconds: float, calm: bool, depth: int | None, threads: int) -> None:
        last, self._last = self._last, (n, seconds, calm, depth, threads)
        if last is None or (last[0] == 1) == (n == 1) or not (calm and last[2]) or last[4] != threads:
            return  # not a plain round beside a drafting one on as many threads, or one ran beside other work
        (_, t1, _, d1, _), (nn, tn, _, dn, _) = (last, self._last) if last[0] == 1 else (self._last, last)
        s1, sn = self.shape(1, d1), self.shape(nn, dn)
        if s1 and sn and tn > 0 and t1 > 0:
            self.pairs.setdefault((threads, pair_class(nn)), deque(maxlen=PAIRS)).append((t1 / tn) / (s1 / sn))

    def observe_verify(self, n: int, seconds: float, share: float = 1.0, depth: int | None = None,
                       threads: tuple[int, int] | None = None) -> None:
        """A real round at `depth` on `threads` (RoundOutcome.threads): the speed follows it, and a plain
        round next to a drafting one on as many threads corrects the shape for them (a pass on fewer threads
        than loaded, undisturbed on those, teaches their pairs; only one on all of them counts as quiet for
        the kept calibration). The shape's points themselves change only while it has fewer than two
        (nothing calibrated: a session told not to measure learns them from its first rounds)."""
        if self.verify(n) is None or (n not in self.verify.by_size and len(self.verify.by_size) < 2):
            self.verify.add(n, seconds / (self.speed.value or 1.0))
            return
        self.threads = ran_on(threads)
        ran_share = share if threads is None else min(1.0, share * threads[1] / threads[0])
        self._learn_pair(n, seconds, not disturbed(ran_share), depth, self.threads)
        ratio = self.speed_ratio(n, seconds, depth)
        self.speed.add(ratio)
        if not disturbed(share):
            self.quiet_speed.add(ratio)
            self.quiet_rounds += 1
        if n == 1:
            self.plain_speed.add(ratio)

    def record(self, o: RoundOutcome) -> None:
        """Every round, whatever the policy: the estimated speedup needs these too."""
        self.observe_verify(o.drafted + 1, o.verify_s, o.share, o.depth, o.threads)
        if o.depth is not None:
            self.depth = o.depth + o.accepted + 1  # where the next round verifies
        self.overhead.add(o.overhead_s)
        calm = not disturbed(o.draft_share)
        if o.catchup_tokens:  # kept at the calibration's speed and depth, as the target's shape is
            read = o.catchup_s / self.draft_factor(_read_depth(o.depth, o.catchup_tokens), True)
            self.catchup.add(o.catchup_tokens, read / (self.plain_speed.value or 1.0))
            if calm:
                self.quiet_drafter.catchup.add(o.catchup_tokens, read)
        if o.drafted:
            if o.key.kind.runs_model:  # a lookup costs next to nothing and is not priced
                step = o.draft_s / max(o.draft_steps, o.drafted) / self.draft_factor(o.depth)
                self.draft_per_token.add(step / (self.plain_speed.value or 1.0))
                if calm:
                    self.quiet_drafter.step.add(step)
                    self.quiet_draft_rounds += 1
            if self.plain_overhead.value is not None:
                self.overhead_per_draft_token.add(max(0.0, o.overhead_s - self.plain_overhead.value) / o.drafted)
        else:
            self.plain_overhead.add(o.overhead_s)

    def round_overhead(self, k: int) -> float:
        """The engine's own time for a round that drafts k tokens."""
        base = self.plain_overhead.value if self.plain_overhead.value is not None else self.overhead.value
        return (base or 0.0) + k * (self.overhead_per_draft_token.value or 0.0)

    def draft_factor(self, depth: int | None, block: bool = False) -> float:
        """The drafter's cost at `depth` over its cost where its step was calibrated (draft_depth)."""
        return self.draft_depth.factor(depth, block) if self.draft_depth is not None else 1.0

    def draft_cost(self, k: int) -> float:
        """A model drafter's cost for k tokens at today's speed as plain rounds measure it (a drafter step
        is a single-token pass, like V(1)) and at this depth; unmeasured: assume a third of a target step."""
        per = self.draft_per_token.value
        if per is None:
            return 0.3 * (self.verify_cost(1) or 0.0) * k
        return per * (self.plain_speed.value or 1.0) * self.draft_factor(self.depth) * k

    def catchup_cost(self, n: int) -> float:
        """Reading n unseen tokens into the drafter at today's speed as plain rounds measure it (a long
        read is measured rarely: one timed on a quiet machine was charged as quiet under load, where a
        2,000-token prompt's read took 47 s); unmeasured: priced like drafting them."""
        if n <= 0:
            return 0.0
        measured = self.catchup(n)
        if measured is None:
            return n * self.draft_cost(1)
        return measured * (self.plain_speed.value or 1.0) * self.draft_factor(_read_depth(self.depth, n), True)

    def plain_token_cost(self) -> float | None:
        v = self.verify_cost(1)
        return None if v is None else v + self.round_overhead(0)

    def estimated_plain_tokens_per_s(self) -> float | None:
        c = self.plain_token_cost()
        return None if not c else 1.0 / c
