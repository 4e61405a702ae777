"""How long a draft to ask for: a fixed k, or "Auto", which prices every k from measured costs.

Auto picks, each round, the k (0 = plain decoding) that maximises expected tokens per second:

    E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j        tokens a round emits on average
    T(k) = D * k + V(k + 1) + O(k)                 seconds it costs

a_j is the chance that draft position j is accepted given that the ones before it were, D the
drafter's cost per drafted token, V(n) the target's cost to score a block of n tokens (measured,
interpolated between measured sizes, and dearer where plain rounds next to drafting ones measure
blocks dearer than that: CostModel.verify_cost) and O the engine's own overhead per round.

What each price covers, so that none is inflated by how long drafting was off:
- D is one drafter step: a model drafter that must first read tokens it has not seen (after plain
  or lookup rounds) reports that catch-up apart, priced per token of a batched read like prefill.
- Catch-up is a cost of turning drafting back on, so it is charged to probes, not to the
  steady-state choice of k. When that choice says draft but the drafter is behind (the prompt, at a
  reply's first round: Auto does not have the drafter read it with the target's prefill), drafting
  starts only if what it is expected to save over the reply's next tokens (at most REPLY_HORIZON)
  pays for the whole read; otherwise the read waits for a probe's budget like any other.
- Acceptance is a Beta posterior per kind of draft: a prior for the kind (a model drafter usually
  agrees, a lookup often does not), updated by the judgements of the last 16 rounds, and per
  position by that position's own judgements of the last 32 rounds. The windows count rounds, so
  the estimate turns over within a few dozen rounds when the drafter starts (or stops) agreeing.
  A free draft (lookup, history) pruned away unverified is judged all the same, against the tokens
  its round emitted: a lookup that starts being right (a reply that begins copying a passage) is
  seen within a round or two, where an unverified kind would wait for a probe's budget. Lookup
  drafts are learned by the length of their match (lookup_key), which reaches back up to 32
  tokens, so a long copy is learned apart from a chance match of five.
- Leaving plain decoding needs a 2% margin (do not draft for a tie); among draft lengths the best
  one wins outright.
- Where a long draft wholly rejected costs many plain steps (CPUs), Auto is cautious: a fresh key is
  as sure as its parent, and a draft's length grows with the runs its key has kept (CAUTIOUS).
While drafting of a kind is off, Auto probes with a one-token draft when the probe's expected net
cost fits in a 1.5% budget of the time spent since that kind last drafted (a kind never tried is
tried at once if that look costs at most a plain round; a free draft judged unverified counts as
one); a probe that is fully accepted is followed straight away by another, so a drafter that
starts agreeing again is back within a few rounds. A probe pays for the model drafter's backlog
only beyond 2% of a plain round per token read: where reading is that cheap, keeping the drafter
in step is a standing price that lets it come back at all. Auto never probes when even a perfect drafter could not beat plain decoding.
"""
from __future__ import annotations

import math
import statistics
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from engine.decoding.calibration import disturbed
from engine.decoding.draft_choice import AUTO_TEXT, DraftLength
from engine.decoding.events import DraftKind


#: Draft length of a probe (drafting is off, is it worth turning back on?): the cheapest look.
PROBE_K = 1
#: A model drafter nothing has judged yet looks before it drafts (DraftRequest.look): it reads its
#: backlog once LOOK_TOKENS of the reply are in it, and its own predictions of the last LOOK_MAX of
#: them, judged against the target's tokens, count as a draft of LOOK_WINDOW tokens from each of those
#: positions. Replayed on this Xeon's costs (drafter step 15-20 ms): Auto 1.22x -> 1.42x of plain over
#: the bench's traces, the worst category 0.89x -> 0.94x; 4 or 8 tokens, or drafts from every fourth
#: position only, did worse in one category or another (one wrong first token counted as a whole
#: rejected draft, and the model stayed off). It looks after 12 tokens, not 6: judged on 6, a drafter
#: right at a translation's easy first words was priced as right everywhere and drafted 11 (replayed on
#: 28 everyday prompts, resources/bench/everyday_traces.jsonl: translations at 0.67-0.69x), and a reply
#: of a few words paid for the whole read. Over those and the bench's traces (41, this Xeon's costs)
#: Auto / plain 1.124 -> 1.162, replies below 0.95x 15 -> 4, the worst 0.67 -> 0.84; the bench's alone
#: 1.516 -> 1.515. 16 did about as well here (1.173) but cost the Zen 5 fast copy's profile more
#: (tests/test_replay.py: 1.309 -> 1.289 against 1.304 at 12): an explanation its drafter got right from
#: the first token waits longer.
LOOK_TOKENS, LOOK_MAX, LOOK_WINDOW = 12, 16, 4
#: Judged by a look alone, a model drafter whose best draft beats plain decoding by less than LOOK_CLEAR is
#: judged again: the reply goes on plainly, and once LOOK_AGAIN more of its tokens are in, the drafter reads
#: them and its predictions of them are judged like the first look's (LOOKS looks in a reply at most). A
#: reply's first words are not always like the rest: a translation's drafter, right on 9 of its first 12
#: tokens, drafted 4 and kept 1, then 0, in each of six live runs (0.88-0.90x of plain; it is right on 14 of
#: the next 26); looking again, 0.92-0.93x, the model never drafting. Replayed on three recorded runs' traces
#: with their blocks 7% cheaper or dearer and the drafter's step 5-15% cheaper (the spread live runs show):
#: replies below 0.95x of plain 72 -> 47 of 585, the worst 0.86 -> 0.92, geometric means unchanged; on the 28
#: everyday prompts so perturbed 123 -> 118 of 420; unperturbed, every recorded set within 0.4%. A third look
#: made a drafter right on 22 of an explanation's first 28 tokens draft on, at 60%, for seven rounds.
LOOK_CLEAR, LOOK_AGAIN, LOOKS = 1.2, 8, 2
#: Share of decoding time that probing may cost while drafting is off.
PROBE_BUDGET = 0.015
#: A model drafter's backlog read is charged to a probe beyond this share of a plain round per
#: token read: below it (a GPU, Apple silicon) keeping the drafter in step is a small standing
#: price, paid whenever it drafts again, and charging it all to one probe would keep it off for good.
BACKLOG_ALLOWANCE = 0.02
#: Tokens of a reply ahead that must repay reading a model drafter's backlog before it drafts (fewer
#: when max_tokens leaves fewer): about a short answer, so a long prompt is read only when it pays soon.
REPLY_HORIZON = 256
#: Margin a draft must win by over plain decoding.
MARGIN = 1.02
#: Prior acceptance of a kind of draft, as a Beta (mean, worth this many judgements): a model
#: drafter of the target's family usually agrees, a lookup is a guess. The weight fades as the
#: kind's own rounds pass (halved after POOLED_ROUNDS), down to PRIOR_FLOOR.
PRIORS = {DraftKind.MODEL: (0.8, 5.0), DraftKind.LOOKUP: (0.5, 2.0), DraftKind.HISTORY: (0.5, 2.0)}
PRIOR_FLOOR = 2.0
#: Rounds whose judgements the pooled estimate keeps; rounds a position's own judgements are kept.
POOLED_ROUNDS, OWN_ROUNDS = 16, 32
#: How many judgements the pooled estimate is worth against a position's own.
OWN_WEIGHT = 8.0
#: Where a long draft wholly rejected costs many plain steps (verifying k_max + 1 tokens costs more than
#: CAUTIOUS x one token: CPUs, 6x here; not GPUs or Apple silicon, 1.3-2.4x), Auto is cautious. On a
#: 2-core Zen 5, three fresh lookup match lengths each verified 15 tokens of a document the reply had
#: stopped quoting, on a prior's long tail, and made Auto 0.65x of plain decoding; after five one-token
#: probes kept, the model drafter drafted 15 (replayed: translation at 0.81x). So there
#: - a fresh key starts from its parent's posterior, as sure as up to PARENT_WEIGHT of its judgements
#:   (not from the parent's mean at the prior's weight of 2), and
#: - a draft is at most REACH_GROWTH x its key's longest kept run of the last OWN_ROUNDS rounds +
#:   REACH_STEP tokens (REACH_START before any; longer while a wholly rejected draft still costs at
#:   most one plain step more): 4, 11, 16 over rounds that kept everything.
CAUTIOUS = 3.0
PARENT_WEIGHT = 16.0
REACH_GROWTH, REACH_STEP, REACH_START = 2, 3, 4


def expected_remaining(remaining: int | None, so_far: int) -> int:
    """The tokens a reply that has run `so_far` is expected to go on for, within what its limit leaves
    (`remaining`): about as many again (a reply's length has a long tail: the longer it has run, the longer
    it runs on), at least LOOK_TOKENS, at most REPLY_HORIZON. Whether reading the prompt into a model
    drafter pays is judged over these, not over all the limit leaves (a translation of 38 tokens read its
    prompt after 12 for the 84 a limit of 96 left, and drafted nothing). Replayed on this Xeon's costs
    (tests/test_replay.py: 41 replies, the limit as the live loop has it): Auto / plain 1.143 -> 1.149,
    translations 0.926 -> 0.935, summaries 1.365 -> 1.426; the Zen 5 fast copy's worst 0.884 -> 0.984."""
    expected = min(REPLY_HORIZON, max(so_far, LOOK_TOKENS))
    return expected if remaining is None else min(remaining, expected)


@dataclass(frozen=True, slots=True)
class DraftKey:
    """A kind of draft whose acceptance is learned on its own: model drafts, prompt-lookup
    drafts by the length of the n-gram match behind them, and drafts from past conversations by
    match length and confidence bucket."""

    kind: DraftKind
    match: int = 0
    """Lookup: tokens in the n-gram that matched (longer matches are more often right)."""
    confidence: int = 0
    """History: the draft's confidence bucket (engine.decoding.history_index; 0 = none given)."""

    def __str__(self) -> str:
        text = f"{self.kind.value}:{self.match}" if self.match else self.kind.value
        return f"{text}/c{self.confidence}" if self.confidence else text

    @property
    def parent(self) -> "DraftKey | None":
        """The coarser key whose acceptance a fresh one starts from (None: the prior)."""
        if self.confidence:
            return DraftKey(self.kind, self.match)
        return DraftKey(self.kind) if self.match else None


MODEL_KEY = DraftKey(DraftKind.MODEL)
#: Lookup match lengths learned apart: 2, 3 and 4 tokens, then 5-7, 8-15, 16-31 and 32 or more (a reply
#: copying a passage matches dozens of tokens, and goes on copying far more often than a short match).
MATCH_BUCKETS = (2, 3, 4, 5, 8, 16, 32)


def lookup_key(match: int) -> DraftKey:
    """The key a lookup draft behind an n-gram match of `match` tokens is learned under."""
    return DraftKey(DraftKind.LOOKUP, max((b for b in MATCH_BUCKETS if b <= match), default=match))


@dataclass(frozen=True, slots=True)
class DraftRequest:
    """What the policy asks of the drafter this round."""

    model_k: int = 0
    """Tokens a model drafter should draft (it costs a forward pass each)."""
    lookup_k: int = 0
    """Tokens a free drafter (prompt lookup) may propose; the policy prunes them afterwards."""
    p_min: float = 0.0
    """A model drafter stops drafting where its top probability falls below this (the reply's
    setting; 0: never). The policy asks for lengths; the loop adds the reply's cut-off."""
    look: int = 0
    """A model drafter drafts nothing, reads its backlog and judges its own next-token predictions of
    the backlog's last `look` tokens (the target's, of this reply) as if it had drafted them
    (Draft.judged): what a first draft would teach, for the read alone. On a CPU, where a block of
    two costs 1.6x a plain round, a first 4-token draft wholly rejected cost a 3-s translation 7%."""

    @property
    def any(self) -> bool:
        return self.model_k > 0 or self.lookup_k > 0 or self.look > 0


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
    kept cores busy (engine.decoding.thread_governor); None: on all of them."""
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
#: alone is one plain round's noise (a reply that drafted every round had one plain round, its last, 80 ms
#: where its repeats' took 64: plain decoding priced 25% dearer for the whole reply, 2.17x shown for 1.65x).
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


def look_windows(agree: list[bool], key: DraftKey | None = None) -> tuple[tuple[DraftKey, int, int], ...]:
    """A look's judgements (DraftRequest.look), one per position: (key, tokens judged, of those kept from the
    first), as a draft of up to LOOK_WINDOW tokens from there would have been kept."""
    out = []
    for i in range(len(agree)):
        w = agree[i : i + LOOK_WINDOW]
        out.append((key or MODEL_KEY, len(w), next((j for j, a in enumerate(w) if not a), len(w))))
    return tuple(out)


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

    def verify_cost(self, n: int) -> float | None:
        """V(n) now, what Auto prices draft lengths with: the shape at today's speed, dearer where the
        adjacent pairs measured blocks of about n tokens dearer than the shape says (at this depth,
        under this load: quiet rounds on a 2-core Zen 5 paid 1.03-1.24x the calibrated shape, beside a
        busy loop 1.4-2.1x). A pair that reads them cheaper is left out: drafts measured against a
        plain round next to them read cheaper than the rounds Auto chooses between, and long lookup
        drafts followed."""
        now = self.shape_cost(n, self.depth)
        if now is None or n == 1:
            return now
        return now / min(1.0, self.correction(n))

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
            if o.key.kind is DraftKind.MODEL:  # a lookup costs next to nothing and is not priced
                step = o.draft_s / max(o.draft_steps, o.drafted) / self.draft_factor(o.depth)
                self.draft_per_token.add(step / (self.plain_speed.value or 1.0))
                if calm:
                    self.quiet_drafter.step.add(step)
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


class DraftPolicy(ABC):
    """Decides how much to draft (before proposing) and how much of a draft to verify (after)."""

    label: str = ""
    rounds_seen: int = 0
    """Rounds this policy has learned from (only AutoK learns; the others stay at 0): a reply's Auto starts at
    0 and a continuation's goes on from its reply's (ReplyAuto)."""

    @abstractmethod
    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        """What to ask of the drafter, at most `limit` tokens; `behind`: tokens a model drafter
        would have to read before drafting; `remaining`: tokens the reply may still emit; `judgeable`:
        of the tokens behind, the reply's own ones a look could judge (DraftRequest.look)."""

    def prune(self, key: DraftKey, proposed: int) -> int:
        """How many of `proposed` draft tokens of kind `key` to verify."""
        return proposed

    def observe(self, outcome: RoundOutcome) -> None:
        """Learn from a finished round."""

    @property
    def drafts(self) -> bool:
        """Whether this policy ever asks for a draft (a drafter need not read the prompt otherwise)."""
        return True

    @property
    def reads_prompt(self) -> bool:
        """Whether the drafter reads the prompt with the target's prefill."""
        return self.drafts


class NoDraft(DraftPolicy):
    label = "none"

    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        return DraftRequest()

    @property
    def drafts(self) -> bool:
        return False


class FixedK(DraftPolicy):
    """The user's k, exactly as asked (capped by what fits)."""

    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError("draft length must be 0 or more")
        self.k = k
        self.label = f"fixed k={k}"

    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        k = max(0, min(self.k, limit))
        return DraftRequest(k, k)

    @property
    def drafts(self) -> bool:
        return self.k > 0


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


class _Probe:
    """While drafting of one kind is off: when to try it again."""

    def __init__(self) -> None:
        # Decoding time since drafting of this kind last ran (or was judged): a kind never tried is
        # due at once when its look costs at most a plain round (it teaches the most, and a short
        # reply cannot wait for the budget).
        self.idle_s = math.inf
        self.again = False  # the last probe was fully accepted: look again at once

    def due(self, net_cost: float, first_look: float = math.inf) -> bool:
        if self.idle_s == math.inf and net_cost > first_look:
            # A first look dearer than `first_look` (a plain round) earns its budget like any other:
            # on a CPU, reading a long prompt into the drafter costs seconds (measured: 0.84x).
            self.idle_s = 0.0
        return self.again or net_cost <= PROBE_BUDGET * self.idle_s


class AutoK(DraftPolicy):
    """Maximise expected tokens per second from measured costs (see the module docstring)."""

    label = AUTO_TEXT

    def __init__(self, costs: CostModel, k_max: int = 16, drafter_is_model: bool = True) -> None:
        self.costs = costs
        self.k_max = k_max
        self.drafter_is_model = drafter_is_model
        self.tables: dict[DraftKey, Acceptance] = {}
        self.probes: dict[DraftKind, _Probe] = {}
        """Per kind, not per key: a kind's match lengths and buckets share one probe budget."""
        self._probing: set[DraftKey] = set()
        self.rounds_seen = 0
        self._looks = 0  # looks at the model drafter so far (DraftRequest.look)
        self._model_drafted = False  # whether the model drafter has drafted yet

    def table(self, key: DraftKey) -> Acceptance:
        if key not in self.tables:
            parent = self.table(key.parent) if key.parent is not None else None
            self.tables[key] = Acceptance(self.k_max, PRIORS.get(key.kind, PRIORS[DraftKind.LOOKUP]), parent,
                                          inherit=PARENT_WEIGHT if self.cautious() else 0.0)
        return self.tables[key]

    # -- the model -----------------------------------------------------------
    def round_cost(self, k: int, with_draft_cost: bool) -> float | None:
        v = self.costs.verify_cost(k + 1)
        if not v:
            return None
        return v + self.costs.round_overhead(k) + (self.costs.draft_cost(k) if with_draft_cost else 0.0)

    def rates(self, key: DraftKey, limit: int, with_draft_cost: bool, perfect: bool = False) -> list[float]:
        """Expected tokens per second for k = 0 .. limit (0 where nothing is measured)."""
        n = max(0, min(limit, self.k_max))
        acc = [1.0] * n if perfect else self.table(key).values(n)
        out, tokens, run = [], 1.0, 1.0
        for k in range(n + 1):
            if k:
                run *= acc[k - 1]
                tokens += run
            cost = self.round_cost(k, with_draft_cost)
            out.append(tokens / cost if cost else 0.0)
        return out

    def rate(self, key: DraftKey, k: int, with_draft_cost: bool, perfect: bool = False) -> float:
        cost = self.round_cost(k, with_draft_cost)
        return self.table(key).expected_tokens(k, perfect) / cost if cost else 0.0

    def best_k(self, key: DraftKey, limit: int, with_draft_cost: bool, perfect: bool = False) -> int:
        """The fastest k, or 0 unless it beats plain decoding by the margin."""
        rates = self.rates(key, limit, with_draft_cost, perfect)
        best = max(range(len(rates)), key=lambda k: (rates[k], -k))  # a tie goes to the shorter draft
        return best if best and rates[best] > rates[0] * MARGIN else 0

    def _probe_net_cost(self, key: DraftKey, k: int, behind: int, with_draft_cost: bool,
                        remaining: int | None = None) -> float:
        """What a probe of k tokens costs over a plain round, less what it is expected to save."""
        plain = self.round_cost(0, with_draft_cost) or 0.0
        cost = (self.round_cost(k, with_draft_cost) or 0.0) - plain
        if with_draft_cost and behind > 1:
            cost += self._backlog_price(behind - 1, remaining)
        gain = (self.table(key).expected_tokens(k) - 1.0) * plain
        return max(0.0, cost - gain)

    def _backlog_price(self, n: int, remaining: int | None = None) -> float:
        """The part of reading n unseen tokens that a probe is charged (see BACKLOG_ALLOWANCE): the
        allowance is a standing price spread over the tokens to come, so it covers at most the tokens
        the reply may still emit (`remaining`, at most REPLY_HORIZON). Uncapped, a 3,000-token attached
        document read into the drafter for a 1-token probe at a reply's start was charged next to
        nothing where reads cost 2.7% of a plain round a token: 5.8 s of a 12-s reply, 0.47x of plain
        decoding (a Xeon with AMX)."""
        horizon = REPLY_HORIZON if remaining is None else min(max(0, remaining), REPLY_HORIZON)
        covered = min(n, horizon)
        allowance = BACKLOG_ALLOWANCE * covered * (self.round_cost(0, True) or 0.0)
        return max(0.0, self.costs.catchup_cost(n) - allowance)

    def _repays_backlog(self, key: DraftKey, k: int, behind: int, remaining: int | None) -> bool:
        """Whether drafting k a round saves, over the reply's next tokens, all that reading the backlog costs.
        The whole read, not a probe's share of it (_backlog_price): this read is paid now, for a saving
        that only comes if the drafter goes on drafting. Priced at a probe's share, a translation's prompt
        read into the drafter on a CPU cost more than the reply's drafts saved (replayed on the fast
        copy's costs: 0.86x of plain; 0.98x priced whole)."""
        if behind <= 1:
            return True
        rates = self.rates(key, k, True)
        saving = 1.0 / rates[0] - 1.0 / rates[k]  # seconds a token; rates[k] > rates[0]: k is the best
        horizon = REPLY_HORIZON if remaining is None else min(remaining, REPLY_HORIZON)
        return saving * horizon >= self.costs.catchup_cost(behind - 1)

    def cautious(self) -> bool:
        """Whether a long draft wholly rejected costs many plain steps here (CAUTIOUS; unmeasured: yes)."""
        v1, v_max = self.costs.verify_cost(1), self.costs.verify_cost(self.k_max + 1)
        return not v1 or not v_max or v_max > CAUTIOUS * v1

    def _reach(self, key: DraftKey, limit: int) -> int:
        """The longest draft worth asking for now: Acceptance.reach where Auto is cautious, or longer while
        even a wholly rejected draft costs at most one plain step more."""
        if not self.cautious():
            return limit
        reach = min(limit, self.table(key).reach())
        v1 = self.costs.verify_cost(1) or 0.0
        while reach < limit and (self.costs.verify_cost(reach + 2) or math.inf) <= 2 * v1:
            reach += 1
        return reach

    def _decide(self, key: DraftKey, limit: int, with_draft_cost: bool, behind: int = 0,
                remaining: int | None = None) -> int:
        if limit <= 0 or self.costs.verify_cost(1) is None:
            return 0  # nothing measured yet: plain decoding first, everything is priced against it
        k = self.best_k(key, self._reach(key, limit), with_draft_cost)
        probe = self.probes.setdefault(key.kind, _Probe())
        if k > 0 and (not with_draft_cost or self._repays_backlog(key, k, behind, remaining)):
            return k
        probe_k = min(limit, PROBE_K)
        if self.best_k(key, limit, with_draft_cost, perfect=True) == 0:
            return 0  # even a perfect drafter could not win here
        # A first look at a model drafter reads its backlog (the whole prompt): at once only when that
        # costs at most a plain round. A lookup has no backlog: its first look is at once.
        first_look = (self.round_cost(0, True) or 0.0) if with_draft_cost else math.inf
        if probe.due(self._probe_net_cost(key, probe_k, behind, with_draft_cost, remaining), first_look=first_look):
            self._probing.add(key)
            return probe_k
        return 0

    # -- the policy ----------------------------------------------------------
    @property
    def reads_prompt(self) -> bool:
        return False  # the first round decides whether reading it pays, and prices it (_repays_backlog)

    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        if behind - 1 > judgeable:  # the prompt is unread: judgeable is the whole reply so far
            remaining = expected_remaining(remaining, judgeable)
        model_k = (self._decide(MODEL_KEY, limit, with_draft_cost=True, behind=behind, remaining=remaining)
                   if self.drafter_is_model else 0)
        lookup_k = min(limit, self.k_max)
        if model_k and not self.table(MODEL_KEY).rounds and behind - 1 > judgeable and self.cautious():
            # Nothing judged the model yet, it must read the prompt anyway, and a rejected draft costs plain
            # rounds here (a CPU): a look, not a draft on the prior. Where blocks cost next to one token (a
            # GPU) the prior's draft loses little and wins at once: replayed, looks cost 5% there.
            if judgeable >= LOOK_TOKENS:
                return DraftRequest(lookup_k=lookup_k, look=min(judgeable, LOOK_MAX))
            model_k = 0  # until the reply has tokens to judge
        elif model_k and self._unsure_after_looks(model_k):
            if judgeable >= LOOK_AGAIN:
                return DraftRequest(lookup_k=lookup_k, look=min(judgeable, LOOK_MAX))
            model_k = 0  # until the reply has tokens to judge again
        return DraftRequest(model_k, lookup_k)

    def _unsure_after_looks(self, k: int) -> bool:
        """Whether a model draft of k, judged by looks alone, wins by too little to be paid for before
        another look (LOOK_CLEAR; only where a rejected draft costs plain rounds: cautious)."""
        if self._model_drafted or not 0 < self._looks < LOOKS or not self.cautious():
            return False
        rates = self.rates(MODEL_KEY, k, True)
        return rates[k] < rates[0] * LOOK_CLEAR

    def prune(self, key: DraftKey, proposed: int) -> int:
        if key.kind is DraftKind.MODEL:
            return proposed  # k was already chosen for it, drafting cost included
        return self._decide(key, proposed, with_draft_cost=False)

    def observe(self, o: RoundOutcome) -> None:
        self.rounds_seen += 1
        # Time passes for every kind not drafted this round (the probe budget grows with it).
        spent = o.verify_s + o.draft_s + o.catchup_s + o.overhead_s
        for kind, probe in self.probes.items():
            if not (o.drafted and kind is o.key.kind):
                probe.idle_s += spent
        self._looks += any(key.kind is DraftKind.MODEL for key, _, _ in o.aside)  # a look's judgements
        for key, judged, kept in o.aside:
            if judged:  # as good as a probe of that kind, at no cost: its budget starts again
                self.table(key).observe(judged, kept)
                probe = self.probes.setdefault(key.kind, _Probe())
                probe.idle_s, probe.again = 0.0, False
        if not o.drafted:
            return
        self.table(o.key).observe(o.drafted, o.accepted)
        self._model_drafted |= o.key.kind is DraftKind.MODEL
        probe = self.probes.setdefault(o.key.kind, _Probe())
        was_probe = o.key in self._probing
        self._probing.discard(o.key)
        probe.idle_s = 0.0
        probe.again = was_probe and o.accepted == o.drafted


class ReplyAuto:
    """The Auto each reply runs with. What Auto learns about acceptance is its reply's own: a new reply starts
    from the kinds' priors (on a CPU its model drafter looks before it drafts) and only a continuation of the
    reply Auto last ran (Continue: the same prompt, the reply so far after it) goes on from what that learned.
    Carried from reply to reply, as it was, the last reply's kind decided the next one's start: replayed over
    every ordered pair of the bench's 13 replies on the Xeon's costs (tests/test_replay.py), the second reply
    ran 1.44x of plain, a translation after code writing 0.47x (it drafted 11-16 tokens on the code's runs),
    code writing after a translation about 1.1x (the drafter left off); afresh 1.55x, the worst 0.93x."""

    def __init__(self) -> None:
        self._last: tuple[object, tuple[int, ...], AutoK] | None = None  # (drafter, prompt, its Auto)

    def for_reply(self, costs: CostModel, drafter_is_model: bool, drafter: object, prompt: Sequence[int],
                  continues: bool = False) -> AutoK:
        """`drafter`: what drafts (compared by equality); `prompt`: the tokens the reply starts after (a
        continuation's too, without the reply so far); `continues`: the reply so far is part of the context."""
        last = self._last
        if continues and last is not None and last[0] == drafter and last[2].costs is costs and last[1] == tuple(prompt):
            return last[2]
        auto = AutoK(costs, drafter_is_model=drafter_is_model)
        self._last = (drafter, tuple(prompt), auto)
        return auto

    def forget(self) -> None:
        self._last = None


def make_policy(draft_max: DraftLength, costs: CostModel, drafter_is_model: bool) -> DraftPolicy:
    """The policy for a request's draft length: Auto, k=0 (plain) or a fixed k."""
    if draft_max.is_auto:
        return AutoK(costs, drafter_is_model=drafter_is_model)
    return NoDraft() if draft_max.k == 0 else FixedK(draft_max.k)
