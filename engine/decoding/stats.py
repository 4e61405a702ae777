"""Running totals for one reply, turned into `events.Stats` at the end.

The counts of rounds (tokens, drafted, accepted, per position, per drafter) are one `RoundTotals`,
advanced as each round's event goes out (`round_shown`): the same totals travel on the RoundEvent,
so the final Stats and what the app shows along the way come from one count."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TypeVar

from engine.decoding.events import Certainty, RoundTotals, Stats
from engine.decoding.verdict import PlainEstimate
from engine.drafting.costs import CostModel, RoundOutcome, ran_on
from engine.drafting.draft_choice import DraftKind

T = TypeVar("T")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


class StatsTracker:
    def __init__(self, draft_mode: str, target, drafter, learned_rounds: int = 0) -> None:
        self.t0 = time.perf_counter()
        self.draft_mode = draft_mode
        self.learned_rounds = learned_rounds
        self.target = target
        self._target_passes0, self._target_decode0 = target.passes, target.decode_s
        model = getattr(drafter, "model", None)
        self._dmodel = getattr(model, "model", model)  # ModelDrafter.model or CombinedDrafter.model.model
        self._drafter_passes0 = self._dmodel.passes if self._dmodel is not None else 0
        self._drafter_decode0 = self._dmodel.decode_s if self._dmodel is not None else 0.0
        self.prompt_tokens = self.reused = 0
        self.prefill_s = 0.0
        self.totals = RoundTotals()
        """The rounds' counts so far, as the last RoundEvent carried them."""
        self.consumer_s = 0.0
        self.token_times: list[float] = []
        self.plain = PlainEstimate()
        self._first_plain_s: float | None = None  # plain decoding's price of the first token, at the first round's speed
        self._first_priced = False

    def prefill_done(self, n_prompt: int, reused: int, seconds: float) -> None:
        self.prompt_tokens, self.reused, self.prefill_s = n_prompt, reused, seconds

    def round_done(self, o: RoundOutcome, kept: int, costs: CostModel, ended: bool = False) -> None:
        """Before `costs.record(o)`: plain decoding's price for this round's tokens (and the end-of-generation
        token, when `ended` there), at this round's speed."""
        self.plain.add_round(costs, o, kept, ended)
        if not self._first_priced and kept:
            self._first_priced = True
            self._first_plain_s = costs.plain_price(o.drafted + 1, o.verify_s, o.depth, ran_on(o.threads))

    def round_shown(self, drafted: int, accepted: int, emitted: int, draft_s: float, verify_s: float,
                    drafter: DraftKind) -> RoundTotals:
        """A round's event goes out with `emitted` tokens (a stop string may have cut some): the totals after it."""
        self.totals = self.totals.after(drafted, accepted, emitted, draft_s, verify_s, drafter)
        return self.totals

    def clock(self) -> float:
        """Engine time: wall-clock seconds with the consumer's share taken out."""
        return time.perf_counter() - self.consumer_s

    def live_rate(self, pending: int) -> tuple[float, float | None, Certainty]:
        """Cumulative tokens/s with `pending` more tokens about to be emitted, the speedup and how sure it is."""
        gen_s = time.perf_counter() - self.t0 - self.consumer_s - self.prefill_s
        n = self.totals.tokens + pending
        tps = n / gen_s if gen_s > 0 else 0.0
        return tps, self.plain.speedup(n, gen_s), self.plain.certainty()

    def token_emitted(self) -> None:
        self.token_times.append(time.perf_counter() - self.consumer_s)

    def timed(self, event: T) -> Iterator[T]:
        """Yield `event`, not counting the consumer's time as the engine's."""
        t = time.perf_counter()
        yield event
        self.consumer_s += time.perf_counter() - t

    def inter_token_gaps(self) -> list[float]:
        ts = self.token_times
        return [b - a for a, b in zip(ts, ts[1:])]

    def finish(self, note: str) -> Stats:
        wall = time.perf_counter() - self.t0 - self.consumer_s
        gen_s = max(wall - self.prefill_s, 1e-9)
        llama_s = self.target.decode_s - self._target_decode0
        drafter_passes = 0
        if self._dmodel is not None:
            llama_s += self._dmodel.decode_s - self._drafter_decode0
            drafter_passes = self._dmodel.passes - self._drafter_passes0
        t = self.totals
        tps = t.tokens / gen_s if t.tokens else 0.0
        gaps = self.inter_token_gaps()
        plain = self.plain.plain_tokens_per_s()
        first = self.token_times[0] - self.t0 if self.token_times else 0.0
        # After the prompt's prefill, plain decoding's first token is one plain round: anything more is a drafter's cost.
        delay = (first - self.prefill_s - self._first_plain_s) if self.token_times and self._first_plain_s else None
        return Stats(
            tokens=t.tokens,
            rounds=t.rounds,
            drafted=t.drafted,
            accepted=t.accepted,
            acceptance_rate=t.accepted / t.drafted if t.drafted else 0.0,
            mean_accepted_per_round=t.accepted / t.drafting_rounds if t.drafting_rounds else 0.0,
            tokens_per_round=t.tokens / t.rounds if t.rounds else 0.0,
            acceptance_by_position=t.acceptance_by_position,
            target_passes=self.target.passes - self._target_passes0,
            drafter_passes=drafter_passes,
            prompt_tokens=self.prompt_tokens,
            prompt_tokens_reused=self.reused,
            ttft_s=first,
            tokens_per_s=tps,
            itl_p50_s=_percentile(gaps, 50),
            itl_p95_s=_percentile(gaps, 95),
            wall_s=wall,
            prefill_s=self.prefill_s,
            draft_s=t.draft_s,
            verify_s=t.verify_s,
            python_s=max(0.0, wall - llama_s),
            estimated_plain_tokens_per_s=plain,
            estimated_speedup=self.plain.speedup(t.tokens, gen_s),
            certainty=self.plain.certainty(),
            rounds_by_drafter=dict(t.by_drafter),
            draft_mode=self.draft_mode,
            note=note,
            auto_rounds_before=self.learned_rounds,
            first_token_delay_s=delay,
        )
