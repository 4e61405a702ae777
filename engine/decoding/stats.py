"""Running totals for one reply, turned into `events.Stats` at the end."""
from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TypeVar

from engine.decoding.events import Certainty, DraftKind, Stats
from engine.decoding.policy import CostModel, RoundOutcome
from engine.decoding.verdict import PlainEstimate

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
        self.rounds = self.drafted = self.accepted = self.drafting_rounds = self.tokens = 0
        self.by_position_tried: list[int] = []
        self.by_position_ok: list[int] = []
        self.draft_s = self.verify_s = self.consumer_s = 0.0
        self.token_times: list[float] = []
        self.plain = PlainEstimate()
        self.by_drafter: dict[str, int] = {}

    def prefill_done(self, n_prompt: int, reused: int, seconds: float) -> None:
        self.prompt_tokens, self.reused, self.prefill_s = n_prompt, reused, seconds

    def round_done(self, o: RoundOutcome, kept: int, costs: CostModel) -> None:
        """Before `costs.record(o)`: plain decoding's price for this round's tokens, at this round's speed."""
        self.plain.add_round(costs, o, kept)
        kind = o.key.kind.value if o.drafted else DraftKind.NONE.value
        self.by_drafter[kind] = self.by_drafter.get(kind, 0) + 1
        self.rounds += 1
        self.draft_s += o.draft_s + o.catchup_s
        self.verify_s += o.verify_s
        if o.drafted:
            self.drafting_rounds += 1
            self.drafted += o.drafted
            self.accepted += o.accepted
            while len(self.by_position_tried) < o.drafted:
                self.by_position_tried.append(0)
                self.by_position_ok.append(0)
            # Position i counts as tried when every position before it was accepted.
            for i in range(min(o.drafted, o.accepted + 1)):
                self.by_position_tried[i] += 1
                self.by_position_ok[i] += i < o.accepted

    def clock(self) -> float:
        """Engine time: wall-clock seconds with the consumer's share taken out."""
        return time.perf_counter() - self.consumer_s

    def live_rate(self, pending: int) -> tuple[float, float | None, Certainty]:
        """Cumulative tokens/s with `pending` more tokens about to be emitted, the speedup and how sure it is."""
        gen_s = time.perf_counter() - self.t0 - self.consumer_s - self.prefill_s
        n = self.tokens + pending
        tps = n / gen_s if gen_s > 0 else 0.0
        return tps, self.plain.speedup(n, gen_s), self.plain.certainty()

    def token_emitted(self) -> None:
        self.tokens += 1
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
        tps = self.tokens / gen_s if self.tokens else 0.0
        gaps = self.inter_token_gaps()
        plain = self.plain.plain_tokens_per_s()
        first = self.token_times[0] - self.t0 if self.token_times else 0.0
        return Stats(
            tokens=self.tokens,
            rounds=self.rounds,
            drafted=self.drafted,
            accepted=self.accepted,
            acceptance_rate=self.accepted / self.drafted if self.drafted else 0.0,
            mean_accepted_per_round=self.accepted / self.drafting_rounds if self.drafting_rounds else 0.0,
            tokens_per_round=self.tokens / self.rounds if self.rounds else 0.0,
            acceptance_by_position=tuple(ok / n for ok, n in zip(self.by_position_ok, self.by_position_tried) if n),
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
            draft_s=self.draft_s,
            verify_s=self.verify_s,
            python_s=max(0.0, wall - llama_s),
            estimated_plain_tokens_per_s=plain,
            estimated_speedup=self.plain.speedup(self.tokens, gen_s),
            certainty=self.plain.certainty(),
            rounds_by_drafter=dict(self.by_drafter),
            draft_mode=self.draft_mode,
            note=note,
            auto_rounds_before=self.learned_rounds,
        )
