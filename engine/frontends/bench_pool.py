"""Several `engine bench` runs of the same prompts pooled into one report: more repeats than one stretch of quiet
machine allows (a 2-core CPU measures two plain runs of the same prompt up to 22% apart). `load_runs` reads one
saved report's runs back, checked (scripts/bench_rewrite.py uses it too).

Each report's repeats are numbered on after the ones before it, so every run is still compared with plain
decoding of its own prompt in its own repeat, as in one run; the reports must have run the same prompts file,
half, target, token limit and variants, else pooling says which differs.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from engine.frontends.bench import PLAIN, RunResult

#: What two reports must share to be pooled (the variants are compared apart).
SAME = ("prompts", "target", "max_tokens", "n_prompts")
_FIELDS = {f.name for f in fields(RunResult)}


class PoolError(ValueError):
    """The reports cannot be pooled: unreadable, or not runs of the same bench."""


def _read(path: Path) -> dict:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PoolError(f"{path}: not a readable bench report ({exc})") from None
    if (not isinstance(report, dict) or not isinstance(report.get("meta"), dict)
            or not isinstance(report.get("runs"), list)):
        raise PoolError(f"{path}: not a bench report (no meta and runs)")
    return report


def _is_round(x: object) -> bool:
    """A round as RunResult.rounds holds it: k, drafted, accepted (counts), draft and verify seconds, the drafter."""
    return (isinstance(x, list) and len(x) == 6 and isinstance(x[5], str)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in x[:3])
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in x[3:5]))


def _run(d: dict, path: Path) -> RunResult:
    try:
        r = RunResult(**{k: v for k, v in d.items() if k in _FIELDS})
    except TypeError as exc:
        raise PoolError(f"{path}: a run lacks a field ({exc})") from None
    numbers = (r.tokens, r.tokens_per_s, r.ttft_s, r.itl_p50_s, r.itl_p95_s, r.python_share, r.acceptance_rate,
               r.mean_accepted_per_round)
    names = (r.prompt_id, r.category, r.variant)
    if not all(isinstance(x, str) for x in names):
        raise PoolError(f"{path}: a run's prompt, category or variant is not a name")
    if (not isinstance(r.repeat, int) or isinstance(r.repeat, bool) or r.repeat < 0
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in numbers)):
        raise PoolError(f"{path}: run {r.prompt_id!r} / {r.variant!r} has a repeat or a measurement that is not "
                        "a number")
    if not isinstance(r.rounds, list) or not all(_is_round(x) for x in r.rounds):
        raise PoolError(f"{path}: run {r.prompt_id!r} / {r.variant!r} has rounds that are not lists of k, drafted, "
                        "accepted, draft and verify seconds and a drafter")
    r.rounds = [tuple(x) for x in r.rounds]
    return r


def load_runs(path: Path) -> tuple[list[RunResult], dict]:
    """A saved report's runs and meta, checked: every field a number or a name where one is due, and every run
    with a plain run of its prompt and repeat to be compared with."""
    path = Path(path)
    report = _read(path)
    meta = report["meta"]
    if not isinstance(meta.get("repeats"), int) or isinstance(meta.get("repeats"), bool):
        raise PoolError(f"{path}: its repeats are not a count")
    runs = [_run(d, path) for d in report["runs"] if isinstance(d, dict)]
    plain = {(r.prompt_id, r.repeat) for r in runs if r.variant == PLAIN}
    alone = next((r for r in runs if (r.prompt_id, r.repeat) not in plain), None)
    if alone is not None:
        raise PoolError(f"{path}: run {alone.prompt_id!r} / {alone.variant!r} has no plain run in its repeat to be "
                        "compared with")
    return runs, meta


def pool(paths: Sequence[Path]) -> tuple[list[RunResult], dict]:
    """The runs of every report, repeats renumbered, and the meta of the pooled report (commits, dates and
    commands of each, repeats summed)."""
    if len(paths) < 2:
        raise PoolError("pooling needs two reports or more")
    paths = [Path(p) for p in paths]
    loaded = [load_runs(p) for p in paths]
    first = loaded[0][1]
    results: list[RunResult] = []
    variants = None
    for path, (runs, meta) in zip(paths, loaded):
        for key in SAME:
            if meta.get(key) != first.get(key):
                raise PoolError(f"{path}: {key} is {meta.get(key)!r}, not {first.get(key)!r} as in {paths[0]}")
        these = sorted({r.variant for r in runs})
        if variants is not None and these != variants:
            raise PoolError(f"{path}: variants {these} differ from {variants}")
        variants = these
        offset = 1 + max((r.repeat for r in results), default=-1)
        for r in runs:
            r.repeat += offset
        results += runs
    metas = [meta for _, meta in loaded]
    pooled = {k: v for k, v in first.items() if k != "command"}  # each report's command is in pooled_from
    pooled["repeats"] = sum(m["repeats"] for m in metas)
    pooled["date"] = ", ".join(str(m.get("date")) for m in metas)
    pooled["commit"] = ", ".join(str(m.get("commit")) for m in metas)
    pooled["cpu"] = ", ".join(sorted({str(m.get("cpu")) for m in metas}))
    pooled["pooled_from"] = [{"report": str(p), **{k: m.get(k) for k in ("command", "commit", "date", "repeats")}}
                             for p, m in zip(paths, metas)]
    return results, pooled
