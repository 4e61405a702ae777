"""The one event stream every consumer reads: GUI, CLI, benchmark and tests.

Per round the engine yields a `RoundEvent` first (what was drafted, what was kept, what was
rejected, times, and the reply's running `RoundTotals` after it), then one `TokenEvent` per emitted
token, and once at the end a `DoneEvent`. The totals are counted here, once (`RoundTotals.after`):
the engine's final Stats, the app's live stats panel and a stored reply read back all use them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum, StrEnum
from typing import Any

from engine.drafting.draft_choice import AUTO_TEXT, DraftKind


class TokenSource(StrEnum):
    """Where an emitted token came from."""

    ACCEPTED = "accepted"  # proposed by the drafter, confirmed by the target
    CORRECTION = "correction"  # the target's own token at the first rejected position
    BONUS = "bonus"  # the target's extra token after a fully accepted draft
    TARGET = "target"  # no draft this round: plain decoding


class Certainty(StrEnum):
    """How far the estimated speedup can be trusted."""

    SETTLED = "settled"
    """Enough rounds at a steady speed."""
    FEW_ROUNDS = "few_rounds"
    """Too few rounds to tell yet."""
    LOAD_CHANGED = "load_changed"
    """The machine's speed changed during the reply: the estimate follows it, but is less sure."""
    UNKNOWN = "unknown"
    """Nothing to price plain decoding with (no calibration and no plain round yet)."""


class FinishReason(StrEnum):
    STOP = "stop"  # the model ended its turn (end-of-generation token)
    LENGTH = "length"  # max_tokens reached
    CONTEXT_FULL = "context_full"  # no room left in the context window
    CANCELLED = "cancelled"  # a stop request


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One emitted token."""

    text: str
    """Text this token completes (UTF-8 safe: may be empty while a character is split)."""
    token_id: int
    """Vocabulary id."""
    source: TokenSource
    """Accepted draft, correction, bonus or plain target token."""
    round: int
    """1-based round that emitted it."""
    p: float | None
    """Target probability of the token (sampling distribution; plain softmax when greedy)."""
    q: float | None
    """Drafter probability of the token when the drafter proposed it (None otherwise, 1.0 for a lookup draft)."""
    index: int
    """0-based position of the token in the reply."""
    runner_up: int | None = None
    """Greedy: the target's second choice at this position."""
    margin: float | None = None
    """Greedy: how far (in logits) the second choice was behind: near 0 is a numerical tie."""

    type: str = field(default="token", init=False)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True, slots=True)
class RoundTotals:
    """A reply's running counts after one of its rounds (the app shows these; it counts nothing itself)."""

    tokens: int = 0
    """Tokens emitted."""
    rounds: int = 0
    """Rounds."""
    drafted: int = 0
    """Draft tokens proposed."""
    accepted: int = 0
    """Draft tokens the target kept."""
    drafting_rounds: int = 0
    """Rounds that drafted something."""
    draft_s: float = 0.0
    """Seconds spent drafting (catch-up included)."""
    verify_s: float = 0.0
    """Seconds in the target's verification passes."""
    tried: tuple[int, ...] = ()
    """Per draft position, the rounds that reached it (every position before it accepted)."""
    kept: tuple[int, ...] = ()
    """Per draft position, the rounds whose token there was accepted."""
    by_drafter: dict[DraftKind, int] = field(default_factory=dict)
    """Rounds per drafter that proposed (DraftKind.NONE = plain rounds)."""

    def after(self, drafted: int, accepted: int, emitted: int, draft_s: float, verify_s: float,
              drafter: DraftKind | str) -> "RoundTotals":
        """These totals with one more round: the one place a round is counted (a pure function)."""
        kind = DraftKind(drafter) if drafted else DraftKind.NONE
        tried, kept = list(self.tried), list(self.kept)
        if drafted:
            while len(tried) < drafted:
                tried.append(0)
                kept.append(0)
            # Position i counts as tried when every position before it was accepted.
            for i in range(min(drafted, accepted + 1)):
                tried[i] += 1
                kept[i] += i < accepted
        return RoundTotals(
            tokens=self.tokens + emitted, rounds=self.rounds + 1, drafted=self.drafted + drafted,
            accepted=self.accepted + (accepted if drafted else 0), drafting_rounds=self.drafting_rounds + bool(drafted),
            draft_s=self.draft_s + draft_s, verify_s=self.verify_s + verify_s, tried=tuple(tried), kept=tuple(kept),
            by_drafter={**self.by_drafter, kind: self.by_drafter.get(kind, 0) + 1},
        )

    def after_round(self, r: "RoundEvent") -> "RoundTotals":
        """`after` with a round's own numbers (rounds stored before rounds carried totals)."""
        return self.after(len(r.drafted), r.accepted, r.emitted, r.draft_s, r.verify_s, r.drafter)

    def plus(self, other: "RoundTotals") -> "RoundTotals":
        """Two parts of one reply (Continue): `other`'s counts offset by these."""
        modes = dict(self.by_drafter)
        for k, v in other.by_drafter.items():
            modes[k] = modes.get(k, 0) + v
        return RoundTotals(
            tokens=self.tokens + other.tokens, rounds=self.rounds + other.rounds, drafted=self.drafted + other.drafted,
            accepted=self.accepted + other.accepted, drafting_rounds=self.drafting_rounds + other.drafting_rounds,
            draft_s=self.draft_s + other.draft_s, verify_s=self.verify_s + other.verify_s,
            tried=_summed(self.tried, other.tried), kept=_summed(self.kept, other.kept), by_drafter=modes,
        )

    @property
    def acceptance_by_position(self) -> tuple[float, ...]:
        """Share of the rounds that reached draft position i whose token i was accepted."""
        return tuple(ok / n for ok, n in zip(self.kept, self.tried) if n)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RoundTotals":
        """As `to_dict` wrote it (JSON turns the tuples into lists)."""
        kw = {k: v for k, v in d.items() if k in _TOTALS_FIELDS}
        kw["tried"], kw["kept"] = tuple(kw.get("tried", ())), tuple(kw.get("kept", ()))
        kw["by_drafter"] = drafter_counts(kw.get("by_drafter", {}))
        return cls(**kw)


def drafter_counts(stored: Any) -> dict[DraftKind, int]:
    """Rounds per drafter as stored (JSON keys are text), keyed by kind: a kind this version does not know
    (written by a newer one) is left out rather than failing the whole reply."""
    return {DraftKind(k): n for k, n in dict(stored).items() if k in _DRAFT_KINDS}


_DRAFT_KINDS = frozenset(k.value for k in DraftKind)


def _summed(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Per position, a's count and b's (the shorter one read as zeros past its end)."""
    n = max(len(a), len(b))
    return tuple(x + y for x, y in zip(a + (0,) * (n - len(a)), b + (0,) * (n - len(b))))


def with_totals(rounds: list["RoundEvent"], start: RoundTotals | None = None) -> list["RoundEvent"]:
    """Rounds in order, each with its totals: those stored before rounds carried them are given them
    (counted with `RoundTotals.after`, from `start` and the rounds before), the others kept as they are."""
    out, t = [], start if start is not None else RoundTotals()
    for r in rounds:
        if r.totals is None:
            t = t.after_round(r)
            r = replace(r, totals=t)
        else:
            t = r.totals
        out.append(r)
    return out


@dataclass(frozen=True, slots=True)
class RoundEvent:
    """What happened in one draft-verify round; it precedes the round's token events."""

    round: int
    """1-based round number."""
    k: int
    """Draft length asked of the drafter this round (0 = plain decoding)."""
    drafted: tuple[int, ...]
    """Token ids the drafter proposed."""
    drafted_text: tuple[str, ...]
    """Their text, each decoded on its own."""
    accepted: int
    """How many leading drafted tokens the target kept."""
    rejected: tuple[int, ...]
    """Drafted ids the target threw away (those after the first mismatch included)."""
    rejected_text: tuple[str, ...]
    """Their text."""
    emitted: int
    """Tokens this round emits (accepted + correction or bonus; fewer at a stop)."""
    draft_s: float
    """Seconds spent drafting."""
    verify_s: float
    """Seconds in the target's verification pass."""
    drafter: DraftKind
    """Which drafter proposed (model, lookup, history, none)."""
    tokens_per_s: float
    """Reply speed so far, cumulative (tokens emitted / generation time), this round included."""
    estimated_speedup: float | None
    """tokens_per_s against plain decoding's time for the same tokens, priced round by round at the
    machine's speed in that round (engine.decoding.verdict)."""
    certainty: Certainty = Certainty.SETTLED
    """How far estimated_speedup can be trusted so far."""
    thinking_open: bool = False
    """The chat template opened a thinking block in the prompt: the reply starts inside it
    (engine.decoding.reasoning). The same on every round of a reply."""
    totals: RoundTotals | None = None
    """The reply's counts after this round (None: a round stored by a version before they travelled here;
    `with_totals` fills them)."""
    threads: tuple[int, int] | None = None
    """(threads the target ran on, threads it was loaded with) where it ran on fewer because other programs
    kept cores busy (engine.llama.thread_governor); None: on all of them."""
    looked: tuple[int, int] | None = None
    """The model drafter looked this round instead of drafting (policy.DraftRequest.look): (the reply's
    tokens it guessed, of those right as the target wrote them); `draft_s` is its read. None: no look."""

    type: str = field(default="round", init=False)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True, slots=True)
class Stats:
    """Totals for one reply."""

    tokens: int
    """Tokens emitted."""
    rounds: int
    """Draft-verify rounds (plain decoding: one per token)."""
    drafted: int
    """Draft tokens proposed."""
    accepted: int
    """Draft tokens the target accepted."""
    acceptance_rate: float
    """accepted / drafted (0 when nothing was drafted)."""
    mean_accepted_per_round: float
    """Accepted draft tokens per round that drafted."""
    tokens_per_round: float
    """Emitted tokens per round."""
    acceptance_by_position: tuple[float, ...]
    """Share of rounds that drafted position i whose token i was accepted."""
    target_passes: int
    """Target forward passes (llama_decode calls), prompt included."""
    drafter_passes: int
    """Drafter forward passes."""
    prompt_tokens: int
    """Tokens in the prompt."""
    prompt_tokens_reused: int
    """Prompt tokens already in the target's KV cache (not decoded again)."""
    ttft_s: float
    """Seconds from the request to the first emitted token."""
    tokens_per_s: float
    """Emitted tokens per second from the first token to the last (cumulative)."""
    itl_p50_s: float
    """Median time between consecutive tokens."""
    itl_p95_s: float
    """95th percentile time between consecutive tokens (speculation makes tokens come in bursts)."""
    wall_s: float
    """Seconds from request to the end."""
    prefill_s: float
    """Seconds spent reading the prompt."""
    draft_s: float
    """Seconds spent drafting."""
    verify_s: float
    """Seconds spent in target forward passes after the prompt."""
    python_s: float
    """Seconds in neither llama.cpp nor the consumer: the engine's own overhead."""
    estimated_plain_tokens_per_s: float | None
    """Plain decoding's speed for this reply's tokens: V(1) priced at the machine's speed in each round."""
    estimated_speedup: float | None
    """tokens_per_s / estimated_plain_tokens_per_s: is speculation helping on this machine, right now."""
    draft_mode: str
    """How the draft length was chosen: 'auto', 'fixed k=N' or 'none' (the policy's label, as stored)."""
    note: str = ""
    """Anything the user should know (fallback to plain decoding, turns dropped, ...)."""
    auto_rounds_before: int = 0
    """Auto: rounds it had already learned from in this session when the reply started (0 = fresh)."""
    certainty: Certainty = Certainty.SETTLED
    """How far estimated_speedup can be trusted."""
    rounds_by_drafter: dict[DraftKind, int] = field(default_factory=dict)
    """Rounds per drafter that proposed (DraftKind.NONE = plain rounds): which mode ran."""
    thinking_s: float | None = None
    """Seconds from the first token to the end of the reply's thinking (None: it did not think)."""
    first_token_delay_s: float | None = None
    """How much longer than plain decoding the first token took after the prompt was read: the drafter's reads
    and the first round, against one plain token at that round's speed (None: not priced)."""

    @property
    def auto(self) -> bool:
        """Auto chose the draft length."""
        return self.draft_mode == AUTO_TEXT

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


@dataclass(frozen=True, slots=True)
class DoneEvent:
    """The end of a reply."""

    finish_reason: FinishReason
    """Why it ended."""
    text: str
    """The reply's text: all of it, or, for a chat reply that thought, its answer."""
    stats: Stats
    """Totals."""
    thinking: str = ""
    """A chat reply's thinking, apart from its answer ("" when it did not think; engine.decoding.reasoning)."""

    type: str = field(default="done", init=False)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)


Event = RoundEvent | TokenEvent | DoneEvent

_TOTALS_FIELDS = frozenset(f.name for f in fields(RoundTotals))


def _plain(obj: Any) -> dict[str, Any]:
    def conv(v: Any) -> Any:
        if isinstance(v, Enum):
            return v.value
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [conv(x) for x in v]
        return v

    return conv(asdict(obj))
