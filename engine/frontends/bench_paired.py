"""The default mode against each other variant, run for run: a comparison that says whether a gap is more than noise.

Each variant's speedup in the report is a median of its runs over plain decoding's, and two such medians differ by
the noise of both. Here each run of the default mode (lookup then the model, Auto) is divided by the other variant's
run of the same prompt in the same group (seconds apart, under the same load), and the median of those ratios gets a
95% interval by resampling whole prompts (a prompt's repeats move together). Plain decoding timed twice in each group
(`plain (control)` over `plain`) gets the same treatment: the width of an interval that measures nothing. A gap whose
interval holds 1.0, as wide as the control's, is not one this run can see.
"""
from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

from engine.frontends.bench import CONTROL, PLAIN, SERVED, RunResult

#: Resamples of the prompts for each interval: at 2,000 the bounds moved by up to 0.16% between seeds (six repeats).
RESAMPLES = 2000
#: Fixed, so that one report always prints the same interval.
SEED = 20261206
#: The interval's share: the 2.5th to the 97.5th percentile of the resampled medians.
LEVEL = 0.95


def default_variant(results: Sequence[RunResult]) -> str | None:
    """The run's default mode: lookup first, then the model, under Auto, in the engine's own loop (the first such
    variant; one timed through the local server is the same mode measured another way); None if not run."""
    return next((r.variant for r in results
                 if r.family.startswith("lookup+") and not r.fixed and not r.family.endswith(SERVED)), None)


def ratios(results: Sequence[RunResult], a: str, b: str) -> list[tuple[str, str, float]]:
    """(prompt, category, a's tokens/s over b's) for every group that ran both, in the order of the runs."""
    other = {(r.prompt_id, r.repeat): r for r in results if r.variant == b}
    out = []
    for r in results:
        twin = other.get((r.prompt_id, r.repeat))
        if r.variant == a and twin is not None and twin.tokens_per_s > 0 and r.tokens_per_s > 0:
            out.append((r.prompt_id, r.category, r.tokens_per_s / twin.tokens_per_s))
    return out


def interval(by_prompt: dict[str, list[float]], resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float]:
    """The LEVEL interval of the median ratio: prompts drawn with replacement, each bringing all its runs."""
    rng = random.Random(seed)
    prompts = sorted(by_prompt)
    medians = sorted(statistics.median([x for p in rng.choices(prompts, k=len(prompts)) for x in by_prompt[p]])
                     for _ in range(resamples))
    tail = (1.0 - LEVEL) / 2
    return medians[int(tail * resamples)], medians[min(resamples - 1, int((1.0 - tail) * resamples))]


def compare(results: Sequence[RunResult], a: str, b: str, categories: Sequence[str]) -> dict[str, dict]:
    """Per category and "all": runs, the median of a over b in the same group, and its interval."""
    got = ratios(results, a, b)
    out = {}
    for cat in [*categories, "all"]:
        by_prompt: dict[str, list[float]] = {}
        for prompt, category, x in got:
            if cat == "all" or category == cat:
                by_prompt.setdefault(prompt, []).append(x)
        xs = [x for v in by_prompt.values() for x in v]
        if xs:
            low, high = interval(by_prompt)
            out[cat] = {"runs": len(xs), "ratio": statistics.median(xs), "low": low, "high": high}
    return out


def head_to_head(results: Sequence[RunResult], categories: Sequence[str]) -> dict:
    """The default mode over each other variant except plain decoding, and plain decoding over itself (the
    control, when it ran): {"default": name, "pairs": {other: compare(...)}, "noise": compare(...) | None}."""
    default = default_variant(results)
    if default is None:
        return {}
    others = sorted({r.variant for r in results} - {default, PLAIN, CONTROL})
    pairs = {b: got for b in others if (got := compare(results, default, b, categories))}
    noise = compare(results, CONTROL, PLAIN, categories) or None
    return {"default": default, "pairs": pairs, "noise": noise} if pairs else {}


def markdown(h2h: dict, categories: Sequence[str]) -> list[str]:
    """The table of head_to_head (no lines when there is none): one column per comparison."""
    if not h2h:
        return []
    columns = [(f"default / {b}", got) for b, got in h2h["pairs"].items()]
    if h2h.get("noise"):
        columns.append(("plain (control) / plain: noise", h2h["noise"]))
    lines = [f"The default mode (`{h2h['default']}`) over each other variant, run for run in the same group: the median "
             f"ratio [its {LEVEL:.0%} interval, prompts resampled]. Over 1.00x: the default mode was faster. The last "
             "column is plain decoding timed twice: how wide an interval is when nothing differs.", "",
             "| category | " + " | ".join(name for name, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for cat in [*categories, "all"]:
        cells = [f"{c['ratio']:.3f}x [{c['low']:.3f}, {c['high']:.3f}]" if (c := got.get(cat)) else "-"
                 for _, got in columns]
        lines.append(f"| {cat} | " + " | ".join(cells) + " |")
    return lines
