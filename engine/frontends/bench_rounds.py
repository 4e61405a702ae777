"""What a run's drafted rounds saved, priced in its own plain rounds: a measure of the drafting decisions that the
machine's drift between runs does not move.

Two runs of the same prompt a few seconds apart differ by a few percent on a busy or throttled machine (plain
decoding against itself on a 2-core EPYC: 6% at the median, 29% at worst), which buries the gap the bench asks
about in a category of 16 runs. Within one run, a drafted round and the plain rounds beside it ran under the same
load: a drafted round that verified a block in `verify_s` and emitted `accepted + 1` tokens saved
`accepted + 1 - (draft_s + verify_s) / P` plain rounds, P being the run's median plain round. Summed over the run,
its tokens took `tokens - saved` plain rounds, so the rounds ran `tokens / (tokens - saved)` x plain decoding.

Left out, on purpose: what is not a round (the prompt's prefill, a model drafter's catch-up and looks, the engine's
own time); the bench's tokens/s counts those. A run with fewer than MIN_PLAIN plain rounds has no price (None).
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from engine.frontends.bench import PLAIN, RunResult

#: Plain rounds a run needs for its own price of one: fewer, and one slow round would set it.
MIN_PLAIN = 5


def rounds_speedup(run: RunResult) -> float | None:
    """The run's rounds against plain decoding, in its own plain rounds (None: too few of them, or no tokens)."""
    plain = [r[4] for r in run.rounds if r[1] == 0]
    if len(plain) < MIN_PLAIN or run.tokens <= 0:
        return None
    price = statistics.median(plain)
    if price <= 0:
        return None
    saved = sum(r[2] + 1 - (r[3] + r[4]) / price for r in run.rounds if r[1] > 0)
    spent = run.tokens - saved
    return run.tokens / spent if spent > 0 else None


def by_category(results: Sequence[RunResult]) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Per category (and "all") and variant but plain decoding: the median and the geometric mean of its runs'
    rounds_speedup (most runs of a category that rarely drafts are 1.0 exactly: the median hides what the others
    cost), and how many runs had one."""
    cells: dict[tuple[str, str], list[float]] = {}
    for run in results:
        if run.variant == PLAIN:
            continue
        value = rounds_speedup(run)
        if value is not None:
            for category in (run.category, "all"):
                cells.setdefault((category, run.variant), []).append(value)
    out: dict[str, dict[str, tuple[float, float, int]]] = {}
    for (category, variant), values in cells.items():
        out.setdefault(category, {})[variant] = (statistics.median(values), statistics.geometric_mean(values),
                                                 len(values))
    return out
