"""Running numbers for one reply, from its rounds as they arrive (no Qt), and the verdict in words."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum

from engine.decoding.events import Certainty, RoundEvent, RoundTotals, Stats
from engine.decoding.verdict import first_token_late
from engine.drafting.draft_choice import DraftKind
from engine.drafting.policy import LOOK_TOKENS

HELPING_AT = 1.05
"""At or above this speed ratio speculation is 'helping'."""
SLOWER_AT = 0.95
"""At or below it, 'slower'; in between, 'about the same' (timing noise is a few percent)."""


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """What the stats panel shows at one moment."""

    tokens: int
    """Tokens emitted so far."""
    rounds: int
    """Draft-verify rounds so far."""
    drafted: int
    """Draft tokens proposed."""
    accepted: int
    """Draft tokens the target kept."""
    acceptance_rate: float | None
    """accepted / drafted (None before anything was drafted)."""
    mean_accepted: float | None
    """Accepted tokens per round that drafted."""
    tokens_per_s: float
    """Cumulative reply speed (the engine's, not per-round bursts)."""
    draft_s: float
    """Seconds spent drafting."""
    verify_s: float
    """Seconds spent verifying."""
    estimated_speedup: float | None
    """Speed against the engine's estimate of plain decoding."""
    by_position: tuple[float, ...]
    """Share accepted at each draft position, of the rounds that reached it."""
    speed_series: tuple[tuple[int, float], ...]
    """(tokens so far, tokens/s) after each round."""
    auto: bool
    """Draft length chosen by Auto."""
    finished: bool
    """The reply is over."""
    learned_rounds: int = 0
    """Auto: rounds it had learned from in earlier replies of this session when this one started."""
    certainty: Certainty = Certainty.SETTLED
    """How far estimated_speedup can be trusted (too few rounds, the machine's load changed)."""
    modes: tuple[tuple[DraftKind, int], ...] = ()
    """Rounds per drafter that proposed (DraftKind.NONE = plain): which mode ran."""
    threads: tuple[int, int] | None = None
    """The last round ran on fewer CPU threads than loaded (other programs busy): (now, loaded)."""
    first_token_delay_s: float | None = None
    """A finished reply: how much later than plain decoding's its first token came (Stats.first_token_delay_s)."""


class ReplyStats:
    """A reply's numbers from its rounds as they arrive: each round carries the engine's running totals
    (engine.decoding.events.RoundTotals), so nothing is counted here; the final Stats, once known, take
    precedence."""

    def __init__(self, auto: bool = True) -> None:
        self.auto = auto
        self.totals = RoundTotals()
        """The counts after the last round added."""
        self.tokens_per_s = 0.0
        self.speedup: float | None = None
        self.series: list[tuple[int, float]] = []
        self.final: Stats | None = None
        self.certainty = Certainty.UNKNOWN
        self.threads: tuple[int, int] | None = None

    @classmethod
    def of_rounds(cls, rounds: list[RoundEvent], final: Stats | None, auto: bool) -> "ReplyStats":
        s = cls(auto)
        for r in rounds:
            s.add_round(r)
        if final is not None:
            s.finish(final)
        return s

    def add_round(self, r: RoundEvent) -> None:
        # A round made by hand without totals (the engine and the store always give them) is counted by
        # the engine's own function.
        self.totals = r.totals if r.totals is not None else self.totals.after_round(r)
        self.tokens_per_s = r.tokens_per_s
        if r.estimated_speedup is not None:
            self.speedup = r.estimated_speedup
        self.certainty = Certainty(r.certainty)
        self.threads = r.threads
        self.series.append((self.totals.tokens, r.tokens_per_s))

    def finish(self, stats: Stats) -> None:
        self.final = stats
        self.auto = stats.auto

    def snapshot(self) -> StatsSnapshot:
        f = self.final
        if f is not None:
            return StatsSnapshot(
                tokens=f.tokens, rounds=f.rounds, drafted=f.drafted, accepted=f.accepted,
                acceptance_rate=f.acceptance_rate if f.drafted else None,
                mean_accepted=f.mean_accepted_per_round if f.drafted else None,
                tokens_per_s=f.tokens_per_s, draft_s=f.draft_s, verify_s=f.verify_s,
                estimated_speedup=f.estimated_speedup, by_position=tuple(f.acceptance_by_position),
                speed_series=tuple(self.series), auto=self.auto, finished=True,
                learned_rounds=f.auto_rounds_before, certainty=Certainty(f.certainty),
                modes=_modes(f.rounds_by_drafter or self.totals.by_drafter), threads=self.threads,
                first_token_delay_s=f.first_token_delay_s,
            )
        t = self.totals
        return StatsSnapshot(
            tokens=t.tokens, rounds=t.rounds, drafted=t.drafted, accepted=t.accepted,
            acceptance_rate=t.accepted / t.drafted if t.drafted else None,
            mean_accepted=t.accepted / t.drafting_rounds if t.drafting_rounds else None,
            tokens_per_s=self.tokens_per_s, draft_s=t.draft_s, verify_s=t.verify_s,
            estimated_speedup=self.speedup, by_position=t.acceptance_by_position,
            speed_series=tuple(self.series), auto=self.auto, finished=False,
            certainty=self.certainty, modes=_modes(t.by_drafter), threads=self.threads,
        )


#: The order modes are named in: the free drafters, the model, plain rounds last.
_MODE_ORDER = (DraftKind.LOOKUP, DraftKind.HISTORY, DraftKind.MODEL, DraftKind.MTP, DraftKind.NONE)


def _modes(counts: dict[DraftKind, int]) -> tuple[tuple[DraftKind, int], ...]:
    return tuple((k, counts[k]) for k in sorted(counts, key=lambda k: _MODE_ORDER.index(k) if k in _MODE_ORDER else 9)
                 if counts[k])


_MODE_WORDS = {DraftKind.LOOKUP: "lookup", DraftKind.HISTORY: "past chats", DraftKind.MODEL: "model",
               DraftKind.MTP: "assistant", DraftKind.NONE: "plain"}


def modes_label(modes: tuple[tuple[DraftKind, int], ...]) -> str:
    """Which mode ran, in rounds: 'lookup 12 · model 30 · plain 8 rounds' ('' when nothing ran)."""
    if not modes:
        return ""
    if len(modes) == 1 and modes[0][0] is DraftKind.NONE:
        return "plain decoding"
    return " · ".join(f"{_MODE_WORDS.get(k, k)} {n}" for k, n in modes) + " rounds"


class Tone(Enum):
    """A verdict's colour."""

    GOOD = "good"
    BAD = "bad"
    NEUTRAL = "neutral"


class Pace(StrEnum):
    """Speculation against plain decoding, in the words the stats panel, the footer and Compare show."""

    HELPING = "helping"
    SAME = "about the same"
    SLOWER = "slower"

    @property
    def tone(self) -> Tone:
        return _PACE_TONES[self]


_PACE_TONES = {Pace.HELPING: Tone.GOOD, Pace.SAME: Tone.NEUTRAL, Pace.SLOWER: Tone.BAD}


class ShownVerdict(str):
    """The verdict the stats panel shows (and a footer chip's tooltip): a sentence, with `tone` for its colour.
    The engine's own verdict is a number (engine.decoding.verdict); this is what it says to the person."""

    tone: Tone

    def __new__(cls, text: str, tone: Tone) -> "ShownVerdict":
        v = super().__new__(cls, text)
        v.tone = tone
        return v


def pace(speedup: float) -> Pace:
    """Speculation against plain decoding at this speed ratio.

    The one place that decides it, so the stats panel and Compare never disagree about a reply.
    """
    if speedup >= HELPING_AT:
        return Pace.HELPING
    if speedup <= SLOWER_AT:
        return Pace.SLOWER
    return Pace.SAME


def verdict(s: StatsSnapshot) -> ShownVerdict:
    """Is speculation paying off on this machine, in plain words (and, for Auto, whether it started
    from what earlier replies taught it)."""
    v = _verdict(s)
    if s.auto and s.learned_rounds:
        return ShownVerdict(f"{v} Auto started from what it learned over {s.learned_rounds} rounds of earlier replies.",
                            v.tone)
    return v


def _verdict(s: StatsSnapshot) -> ShownVerdict:
    v = _pace_verdict(s)
    if not first_token_late(s.first_token_delay_s) or s.certainty is Certainty.LOAD_CHANGED:
        return v
    wait = f"its first token came {s.first_token_delay_s:.2f} s later than plain decoding's would have"
    if v.tone is Tone.GOOD:
        return ShownVerdict(f"{v} But {wait}.", v.tone)
    x = s.estimated_speedup
    pace_text = f" (then {x:.2f}×)" if s.drafted and x is not None and s.certainty is Certainty.SETTLED else ""
    return ShownVerdict(f"Speculation was slower than plain decoding here: {wait}{pace_text}.", Tone.BAD)


def _pace_verdict(s: StatsSnapshot) -> ShownVerdict:
    if s.rounds == 0:  # a reply stopped before its first round said it was still waiting
        return ShownVerdict("Stopped before the first round: nothing was measured.", Tone.NEUTRAL) if s.finished else \
            ShownVerdict("Waiting for the first round…", Tone.NEUTRAL)
    if s.drafted == 0:
        if s.auto and s.finished and s.tokens <= LOOK_TOKENS:
            # Auto first judges a model drafter on the reply's own first tokens: a greeting is over before that.
            return ShownVerdict("Plain decoding: the reply was too short for Auto to start drafting.", Tone.NEUTRAL)
        if s.auto and s.rounds > 1:
            return ShownVerdict("Plain decoding: Auto judged drafting slower than plain decoding here, so it is off.",
                                Tone.NEUTRAL)
        return ShownVerdict("Plain decoding: nothing was drafted.", Tone.NEUTRAL)
    x = s.estimated_speedup
    if x is None or s.certainty is Certainty.UNKNOWN:
        return ShownVerdict("Measuring the speed of plain decoding…", Tone.NEUTRAL)
    if s.certainty is Certainty.FEW_ROUNDS:
        return ShownVerdict("Too few rounds yet to tell whether speculation is helping.", Tone.NEUTRAL)
    if s.certainty is Certainty.LOAD_CHANGED:  # a number here would be a guess: say so instead
        return ShownVerdict("The machine's speed changed during this reply (other programs?), so it cannot tell "
                            "whether speculation helped. Compare with plain decoding measures both.", Tone.NEUTRAL)
    return _paced(s, x)


def _paced(s: StatsSnapshot, x: float) -> ShownVerdict:
    p = pace(x)
    if p is Pace.HELPING:
        return ShownVerdict(f"Speculation is helping: about {x:.2f}× the speed of plain decoding.", p.tone)
    if p is Pace.SLOWER:
        if s.auto:
            return ShownVerdict(f"Speculation is slower than plain decoding here ({x:.2f}×): Auto is shortening the "
                                "drafts and turns drafting off if it stays slower.", p.tone)
        return ShownVerdict(f"Speculation is slower than plain decoding here ({x:.2f}×): Auto would turn it off.",
                            p.tone)
    return ShownVerdict(f"Speculation is about the same as plain decoding ({x:.2f}×).", p.tone)


def joined_stats(first: Stats, then: Stats, totals: RoundTotals | None) -> Stats:
    """The totals of a reply written in two parts (Continue): counts and times added, rates of the whole,
    acceptance by position from `totals`, the running totals after the last round of both parts. The prompt, the time to the first token (and its delay) and
    what Auto knew at the start are the first part's; the mode and certainty the later part's; the gaps
    between tokens (median, 95th percentile) the larger of the two parts' (their tokens' times are gone)."""
    def per_s(tokens: int, rate: float | None) -> float:
        return tokens / rate if rate else 0.0

    tokens, drafted, accepted = first.tokens + then.tokens, first.drafted + then.drafted, first.accepted + then.accepted
    gen_s = per_s(first.tokens, first.tokens_per_s) + per_s(then.tokens, then.tokens_per_s)
    plain_s = None
    if first.estimated_plain_tokens_per_s and then.estimated_plain_tokens_per_s:
        plain_s = per_s(first.tokens, first.estimated_plain_tokens_per_s) + per_s(then.tokens,
                                                                                   then.estimated_plain_tokens_per_s)
    positions = totals.acceptance_by_position if totals is not None else ()
    modes = dict(first.rounds_by_drafter)
    for k, n in then.rounds_by_drafter.items():
        modes[k] = modes.get(k, 0) + n
    drafting = sum(n for k, n in modes.items() if k is not DraftKind.NONE)
    tps = tokens / gen_s if gen_s else 0.0
    plain_tps = tokens / plain_s if plain_s else None
    notes = [n for n in (first.note, then.note) if n]
    return Stats(
        tokens=tokens, rounds=first.rounds + then.rounds, drafted=drafted, accepted=accepted,
        acceptance_rate=accepted / drafted if drafted else 0.0,
        mean_accepted_per_round=accepted / drafting if drafting else 0.0,
        tokens_per_round=tokens / max(1, first.rounds + then.rounds), acceptance_by_position=positions,
        target_passes=first.target_passes + then.target_passes,
        drafter_passes=first.drafter_passes + then.drafter_passes,
        prompt_tokens=first.prompt_tokens, prompt_tokens_reused=first.prompt_tokens_reused, ttft_s=first.ttft_s,
        first_token_delay_s=first.first_token_delay_s,
        tokens_per_s=tps, itl_p50_s=max(first.itl_p50_s, then.itl_p50_s),
        itl_p95_s=max(first.itl_p95_s, then.itl_p95_s),
        wall_s=first.wall_s + then.wall_s, prefill_s=first.prefill_s + then.prefill_s,
        draft_s=first.draft_s + then.draft_s, verify_s=first.verify_s + then.verify_s,
        python_s=first.python_s + then.python_s, estimated_plain_tokens_per_s=plain_tps,
        estimated_speedup=tps / plain_tps if plain_tps else None, draft_mode=then.draft_mode,
        note="; ".join(dict.fromkeys(notes)), auto_rounds_before=first.auto_rounds_before,
        certainty=then.certainty, rounds_by_drafter=modes,
    )
