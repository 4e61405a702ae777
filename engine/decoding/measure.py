"""How a session measures its pair at load: the target's block costs at two depths, the drafter's step, catch-up
and interference, timed again where a passing load disturbed them, and kept for the next launch: as the machine's
when quiet, else as provisional (used at the next launch without measuring, refined by the undisturbed rounds a
person runs, and the machine's once calibration.SETTLED_ROUNDS of them have been counted)."""
from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from enum import StrEnum

from engine.drafting.costs import BlockCost, DepthLine, Ewma, QuietDrafter
from engine.errors import LoadCancelled
from engine.llama import calibration
from engine.llama.backend import (
    LlamaModel,
)
from engine.llama.types import Logits

#: Block sizes the target is timed at when a pair loads (drafts of 1-5 are the common ones, so
#: they are measured, not interpolated), and the context depth they are timed at (a short chat).
CALIBRATED_SIZES = (1, 2, 3, 4, 5, 6, 8, 12, 16)
PROBE_DEPTH = 128
#: The shape again, this deep in the context (CostModel.shape): a long attached file puts replies
#: thousands of tokens in. Fewer sizes: the line between the two depths is what is read off.
DEEP_DEPTH, DEEP_SIZES = 1024, (1, 2, 4, 8, 16)
#: Rounds of timed passes at most, in units of the repeats asked for: passes disturbed by a passing
#: load are timed again, at most this much longer; under a steady load (a round with no undisturbed
#: pass) measuring stops at once and says its figures are not the machine's (not kept as quiet).
MAX_ROUNDS = 2


class LoadStage(StrEnum):
    """What a load is doing, as the `progress` callback of Session reports it."""

    TARGET = "target"
    """Reading the target model (with a fraction done)."""
    DRAFTER = "drafter"
    """Reading the drafter model (with a fraction done)."""
    MEASURING = "measuring"
    """Timing a model for Auto (no fraction), reported as the timing starts: a load that reuses a kept
    measurement reports none."""
    DRAFTER_CPU_COPY = "drafter for this CPU"
    """Making the drafter's copy for this CPU, once (no fraction)."""
    CHECKING_KERNELS = "checking this CPU's kernels"
    """Trying a model file with llama.cpp's AMX kernels in a child process, once per file and build (no fraction)."""

    @property
    def has_fraction(self) -> bool:
        """The stage reports how far it is (else it shows as busy)."""
        return self in (LoadStage.TARGET, LoadStage.DRAFTER)


def _depth_line(depths: tuple[int, int], step: float, blocks: dict[int, float], deep: dict[int, float]) -> DepthLine | None:
    """The drafter's depth line from its step and 16-token read at two depths (None: not both measured)."""
    shallow, deep_at = depths
    if deep_at <= shallow or not step or not blocks.get(16) or not deep.get(1) or not deep.get(16):
        return None
    return DepthLine(shallow, deep_at, deep[1] / step, deep[16] / blocks[16])


class Measuring:
    """Session's measuring at load (a part of Session: it uses the session's models and cost model)."""

    def calibrate_target(self, sizes: Sequence[int] = CALIBRATED_SIZES, repeats: int = 3,
                         cancel: threading.Event | None = None, fresh: bool = False) -> None:
        """Time the target's pass for a few block sizes: Auto prices every draft length from
        these before the first reply, and refines them online. A measurement kept for this file
        on this machine (engine.llama.calibration) is used instead unless `fresh`."""
        key = self._key(self.target)
        kept = None if fresh else calibration.load(key)
        if kept is not None:  # measured beside other work, it is used as provisional: never measured at launch
            for n, dt in kept["blocks"].items():
                self.costs.add_verify(n, dt)
            if kept["deep"]:
                self.costs.depths = kept["depths"]
                for n, dt in kept["deep"].items():
                    self.costs.add_deep(n, dt)
            self._kept(self.target, key, kept)
            return
        self._say_measuring()
        points, self._quiet[key] = self._time_blocks(self.target, sizes, repeats, cancel)
        for n, dt in points:
            self.costs.add_verify(n, dt)
        shallow, deep = self._probe_depth(self.target, sizes), self._probe_depth(self.target, DEEP_SIZES, DEEP_DEPTH)
        # Models too small to judge (calibration.judged) pass in a millisecond at any depth: one shape.
        if deep >= 4 * shallow and self.target.can_trim and calibration.judged(self.target.info.size):
            deep_points, deep_quiet = self._time_blocks(self.target, DEEP_SIZES, repeats, cancel, DEEP_DEPTH)
            self._quiet[key] = self._quiet[key] and deep_quiet
            self.costs.depths = (shallow, deep)
            for n, dt in deep_points:
                self.costs.add_deep(n, dt)
        self.keep_calibration()

    def calibrate_drafter(self, repeats: int = 3) -> None:
        """One drafting step, and reading a block of unseen tokens (what catching up costs)."""
        if self.draft_model is not None:
            self.costs.interference, self.costs.draft_depth, self.costs.quiet_drafter = self._measure_drafter(
                self.draft_model, self.costs.draft_per_token, self.costs.catchup, repeats, fresh=True)

    def _measure_drafter(self, model: LlamaModel, per_token: Ewma, catchup: BlockCost, repeats: int = 3,
                         cancel: threading.Event | None = None,
                         fresh: bool = False) -> tuple[float, DepthLine | None, QuietDrafter]:
        """Times the drafter (or takes what was kept); returns its interference (CostModel.interference),
        how its costs grow with the depth (CostModel.draft_depth) and its costs in seconds as measured or
        kept (CostModel.quiet_drafter)."""
        key = self._key(model)
        kept = None if fresh else calibration.load(key)
        # Kept and held at the calibration's speed (CostModel.draft_per_token): what is read or timed now,
        # mid-session, is at today's speed as plain rounds measure it (kept figures were written at it).
        # Stored as read, a kept step re-read under a 3x load grew 3x at every switch of drafter.
        now = self.costs.plain_speed.value or 1.0
        if kept is not None and kept["step"]:
            per_token.add(kept["step"] / now)
            for n, dt in kept["blocks"].items():
                catchup.add(n, dt / now)
            self._kept(model, key, kept)
            return (kept["interference"], _depth_line(kept["depths"], kept["step"], kept["blocks"], kept["deep"]),
                    QuietDrafter.seeded(kept["step"], kept["blocks"]))
        self._say_measuring()
        points, self._quiet[key] = self._time_blocks(model, (1, 16, 64), repeats, cancel)
        measured = dict(points)
        step, blocks = measured[1], {n: v for n, v in measured.items() if n > 1}
        per_token.add(step / now)
        for n, dt in blocks.items():
            catchup.add(n, dt / now)
        depth_line, deep = None, {}
        shallow, deep_at = self.costs.depths
        if deep_at > shallow and model.can_trim and calibration.judged(model.info.size):
            deep_points, deep_quiet = self._time_blocks(model, (1, 16), repeats, cancel, deep_at)
            self._quiet[key] = self._quiet[key] and deep_quiet
            deep = dict(deep_points)
            depth_line = _depth_line((shallow, deep_at), step, measured, deep)
        interference = self._interference(model, cancel) if model.can_trim and self.target.can_trim else 1.0
        if blocks:
            calibration.save(key, blocks, step, interference, quiet=self._quiet[key],
                             deep=deep if depth_line else None, depths=(shallow, deep_at))
        return interference, depth_line, QuietDrafter.seeded(step, blocks)

    def _kept(self, model: LlamaModel, key: str, kept: dict) -> None:
        """A kept calibration is in use: quiet, or provisional (its undisturbed rounds so far carried on)."""
        self.kept_calibration.append(model.path.name)
        self._quiet[key] = kept["quiet"]
        if not kept["quiet"]:
            self.provisional_calibration.append(model.path.name)
            self._rounds_before[key] = kept["rounds"]

    def _settled(self, key: str, rounds_now: int) -> tuple[bool, int]:
        """Whether the calibration under `key` is the machine's now (measured quietly, or provisional and refined
        by SETTLED_ROUNDS undisturbed rounds in all), and its undisturbed rounds counted so far."""
        if self._quiet.get(key, False):
            return True, 0
        rounds = self._rounds_before.get(key, 0) + rounds_now
        return rounds >= calibration.SETTLED_ROUNDS, rounds

    def _say_measuring(self) -> None:
        if self._progress:
            self._progress(LoadStage.MEASURING, 0.0)

    def _interference(self, drafter: LlamaModel, cancel: threading.Event | None = None, repeats: int = 5) -> float:
        """How much slower a target step is right after a drafter step than after a target step (the two
        models share the cores, caches and memory bandwidth): plain decoding, the baseline, never pays it."""
        depth = max(1, min(PROBE_DEPTH, self.target.n_ctx - 4, drafter.n_ctx - 4))
        probe = self._repeated_probe(depth)
        tok = probe[-1:]
        for m in (self.target, drafter):
            m.watch(None)  # measuring is never cut short by a reply's stop request
        for m in (self.target, drafter):
            m.clear()
            m.decode(probe, Logits.NONE)
        clean, after = [], []
        try:
            for rep in range(repeats + 1):
                if cancel is not None and cancel.is_set():
                    raise LoadCancelled(f"loading {drafter.path.name} was cancelled while measuring its speed")
                for follows_drafter, times in ((False, clean), (True, after)):
                    (drafter if follows_drafter else self.target).decode(tok, Logits.ALL)
                    (drafter if follows_drafter else self.target).truncate(depth)
                    t = time.perf_counter()
                    self.target.decode(tok, Logits.ALL)
                    if rep:
                        times.append(time.perf_counter() - t)
                    self.target.truncate(depth)
        finally:
            self.target.clear()
            drafter.clear()
        return min(3.0, max(1.0, statistics.median(after) / statistics.median(clean)))

    def _repeated_probe(self, n: int) -> list[int]:
        """n tokens of a short code text, repeated: what the calibration times."""
        text = self.target.tokenize("def fibonacci(n):\n    return n if n < 2 else", add_special=True)
        return (text * (n // len(text) + 1))[:n]

    def _key(self, model: LlamaModel) -> str:
        """The calibration key of a loaded model, made once: it hashes the file's first MiB, and every
        reply writes the costs back under it."""
        keys = self._keys
        if id(model) not in keys:
            s = model.settings
            keys[id(model)] = calibration.key_for(model.path, {
                "n_threads": model.n_threads, "n_threads_batch": s.n_threads_batch, "n_gpu_layers": s.n_gpu_layers,
                "n_batch": model.n_batch, "extra_buffers": model.extra_buffers,
                "flash_attn": model.flash_attn,
            })
        return keys[id(model)]

    def keep_calibration(self) -> None:
        """Write what the costs are now (calibration refined by real rounds, at today's speed) for the
        next launch. Only where this session measures: one that was told not to keeps nothing."""
        if not self._calibrate:
            return
        c = self.costs
        blocks = {n: v for n in c.verify.by_size if (v := c.kept_cost(n))}
        deep = {n: v for n in c.deep.by_size if (v := c.kept_cost(n, deep=True))}
        if blocks:
            key = self._key(self.target)
            quiet, rounds = self._settled(key, c.quiet_rounds)
            calibration.save(key, blocks, quiet=quiet, deep=deep, depths=c.depths, rounds=rounds)
        quiet = c.quiet_drafter
        if self.draft_model is not None and (step := quiet.step.value):
            # As undisturbed passes measured them, at the depth the step was calibrated at: the line gives the rest.
            drafted = {n: v for n in quiet.catchup.by_size if (v := quiet.catchup(n))}
            if drafted:
                key = self._key(self.draft_model)
                line = c.draft_depth
                deep = ({1: step * line.step_ratio, 16: (quiet.catchup(16) or 0.0) * line.block_ratio}
                        if line is not None and quiet.catchup(16) else None)
                quiet, rounds = self._settled(key, c.quiet_draft_rounds)
                calibration.save(key, drafted, step, c.interference, quiet=quiet, deep=deep,
                                 depths=(line.shallow, line.deep) if deep else (0, 0), rounds=rounds)

    @staticmethod
    def _probe_depth(model: LlamaModel, sizes: Sequence[int], want: int = PROBE_DEPTH) -> int:
        """How deep in the context blocks of `sizes` are timed: `want` tokens, where the context has room."""
        return max(1, min(want, model.n_ctx - max(sizes) - 2))

    def _time_blocks(self, model: LlamaModel, sizes: Sequence[int], repeats: int,
                     cancel: threading.Event | None = None, depth: int = PROBE_DEPTH) -> tuple[list[tuple[int, float]], bool]:
        """The median of `repeats` undisturbed passes per block size (calibration.disturbed), at `depth`
        in the context (a reply's: PROBE_DEPTH tokens), sizes interleaved so a change of load
        touches them all alike; each size's first pass (its compute graph is allocated then) is not
        counted. Passes that ran beside other work are timed again, up to MAX_ROUNDS x `repeats`
        rounds in all, while a round still had an undisturbed pass; the flag says whether every size
        got its undisturbed passes."""
        depth = self._probe_depth(model, sizes, depth)
        probe = self._repeated_probe(depth)
        model.watch(None)  # measuring is never cut short by a reply's stop request

        def back_to_probe() -> None:
            if model.can_trim and len(model.kv) >= len(probe):
                model.truncate(len(probe))
            else:  # a recurrent state cannot be rolled back: read the probe again
                model.clear()
                model.decode(probe, Logits.NONE)

        sizes = list(sizes) if model.can_trim else list(sizes[:1])
        passes: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}

        def enough(n: int) -> bool:
            return calibration.undisturbed_median(passes[n], repeats)[1]

        todo, calm = list(sizes), True
        for rep in range(MAX_ROUNDS * repeats + 1):
            if rep > repeats:
                todo = [n for n in sizes if not enough(n)]
                if not todo or not calm:
                    break  # done, or a round with no undisturbed pass: the load is steady, waiting won't help
            calm = False
            for n in todo:
                if cancel is not None and cancel.is_set():
                    model.clear()
                    raise LoadCancelled(f"loading {model.path.name} was cancelled while measuring its speed")
                back_to_probe()
                t = time.perf_counter()
                model.decode(self._repeated_probe(n), Logits.ALL)
                seconds = time.perf_counter() - t
                if rep:  # the first round of passes only warms up
                    passes[n].append((seconds, calibration.judged_share(model.last_share, model.info.size)))
                    calm = calm or not calibration.disturbed(passes[n][-1][1])
        model.clear()
        medians = {n: calibration.undisturbed_median(ps, repeats) for n, ps in passes.items()}
        return [(n, m) for n, (m, _) in medians.items()], all(ok for _, ok in medians.values())

    # -- prompts ----------------------------------------------------------------
