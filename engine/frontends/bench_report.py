"""The benchmark's report: medians per category and variant, the verdict's error, a Markdown table, a chart,
the run's metadata (command, commit, machine) and recorded traces for the replay."""
from __future__ import annotations

import json
import math
import platform
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from engine.decoding.session import Session
from engine.drafting.draft_choice import DraftSpec
from engine.frontends import bench_paired
from engine.frontends.bench import CONTROL, PLAIN, TIE_LOGITS, BenchPrompt, RunResult


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _equality(rs: Sequence[RunResult]) -> str:
    same = sum(bool(r.same_as_plain) for r in rs)
    ties = sum(bool(r.tie) for r in rs)
    other = len(rs) - same - ties
    text = f"{same}/{len(rs)}"
    if ties:
        text += f" (+{ties} at a tie)"
    if other:
        text += f" ({other} NOT at a tie)"
    return text


def _best_fixed(results: Sequence[RunResult], auto: RunResult) -> float:
    """The fixed draft length Auto could have picked for this prompt with hindsight: of the same
    drafter's fixed variants (plain decoding included), the one with the highest median tokens/s
    over the repeats; returned is its tokens/s in Auto's repeat. Each run's fastest variant would
    instead be the luckiest of several noisy measurements: Auto doing plain decoding's very work
    then reads below 1 (0.92x on translation with three repeats)."""
    families = {auto.family, PLAIN}
    if auto.family.startswith("lookup+"):  # lookup first, then the model: either alone counts too
        families |= {"lookup", auto.family.removeprefix("lookup+")}
    by_variant: dict[str, list[RunResult]] = {}
    for r in results:
        if r.prompt_id == auto.prompt_id and r.fixed and r.family in families:
            by_variant.setdefault(r.variant, []).append(r)
    if not by_variant:
        return 0.0
    best = max(by_variant.values(), key=lambda rs: statistics.median(r.tokens_per_s for r in rs))
    return next((r.tokens_per_s for r in best if r.repeat == auto.repeat), 0.0)


def summarise(results: Sequence[RunResult]) -> dict:
    """Per category and variant: medians, and speedup as the median of per-run ratios to plain."""
    plain = {(r.prompt_id, r.repeat): r for r in results if r.variant == PLAIN}
    control = {(r.prompt_id, r.repeat): r for r in results if r.variant == CONTROL}
    categories = sorted({r.category for r in results})
    variants = [PLAIN] + sorted({r.variant for r in results} - {PLAIN})
    table: dict[str, dict[str, dict]] = {}
    for cat in categories + ["all"]:
        table[cat] = {}
        for v in variants:
            rs = [r for r in results if r.variant == v and (cat == "all" or r.category == cat)]
            if not rs:
                continue
            ratios = [r.tokens_per_s / plain[(r.prompt_id, r.repeat)].tokens_per_s for r in rs
                      if plain[(r.prompt_id, r.repeat)].tokens_per_s > 0]
            vs_best = [r.tokens_per_s / best for r in rs if not r.fixed
                       for best in [_best_fixed(results, r)] if best > 0]
            est = [r.estimated_speedup for r in rs if r.estimated_speedup]
            judged = _verdict_ratios(rs, plain, control)
            waits = _first_token_delays(rs, plain)
            table[cat][v] = {
                "runs": len(rs),
                "tokens_per_s": _median([r.tokens_per_s for r in rs]),
                "speedup": _median(ratios),
                "speedup_min": min(ratios) if ratios else None,
                "estimated_speedup": _median(est),
                "verdict_ratio": _median(judged),
                "verdict_worst": max(judged, key=lambda x: abs(math.log(x))) if judged else None,
                "acceptance_rate": _median([r.acceptance_rate for r in rs]),
                "mean_accepted_per_round": _median([r.mean_accepted_per_round for r in rs]),
                "ttft_s": _median([r.ttft_s for r in rs]),
                "ttft_vs_plain_s": _median(waits),
                "ttft_vs_plain_worst_s": max(waits) if waits else None,
                "itl_p50_s": _median([r.itl_p50_s for r in rs]),
                "itl_p95_s": _median([r.itl_p95_s for r in rs]),
                "python_share": _median([r.python_share for r in rs]),
                "python_ms_per_token": _median([r.python_ms_per_token for r in rs]),
                "auto_vs_best_fixed": _median(vs_best),
                "greedy_equal": None if v == PLAIN or rs[0].family == "llama.cpp" else _equality(rs),
            }
    return {"categories": categories, "variants": variants, "table": table, "verdict": _verdict_summary(results, plain),
            "head_to_head": bench_paired.head_to_head(results, categories)}


def _first_token_delays(rs: Sequence[RunResult], plain: dict) -> list[float]:
    """Per run: its time to the first token less plain decoding's for the same prompt in the same repeat."""
    return [r.ttft_s - base.ttft_s for r in rs if r.variant != PLAIN
            and (base := plain.get((r.prompt_id, r.repeat))) is not None]


def _verdict_ratios(rs: Sequence[RunResult], plain: dict, control: dict | None = None) -> list[float]:
    """Per run: the engine's estimated speedup over the one measured against plain decoding of the
    same prompt in the same repeat (1.0 = the verdict was exact). With `control` (the group's second plain
    run, across the group from the first), plain's speed is the geometric mean of the two: either alone
    differs from the other by up to 30% here, and that noise is not the verdict's."""
    out = []
    for r in rs:
        base = plain.get((r.prompt_id, r.repeat))
        if r.variant in (PLAIN, CONTROL) or not r.estimated_speedup or base is None or not base.tokens_per_s or not r.tokens_per_s:
            continue
        speed = base.tokens_per_s
        again = (control or {}).get((r.prompt_id, r.repeat))
        if again is not None and again.tokens_per_s:
            speed = math.sqrt(speed * again.tokens_per_s)
        out.append(r.estimated_speedup / (r.tokens_per_s / speed))
    return out


def _verdict_summary(results: Sequence[RunResult], plain: dict) -> dict:
    """How far the verdict was off, over every speculative run: all, quiet and under the busy loop."""
    out = {}
    control = {(r.prompt_id, r.repeat): r for r in results if r.variant == CONTROL}
    for name, keep in (("all", lambda r: True), ("quiet", lambda r: not r.busy), ("busy loop", lambda r: r.busy)):
        ratios = _verdict_ratios([r for r in results if keep(r)], plain, control)
        # The same work measured twice: plain (control) over plain, the floor of every error above.
        noise = [base.tokens_per_s / r.tokens_per_s for r in results if keep(r) and r.variant == CONTROL
                 and (base := plain.get((r.prompt_id, r.repeat))) is not None and r.tokens_per_s]
        for label, xs in ((name, ratios), (f"{name}: plain vs plain", noise)):
            if not xs:
                continue
            errors = sorted(abs(x - 1.0) for x in xs)
            out[label] = {"runs": len(xs), "median_error": statistics.median(errors), "worst_error": errors[-1],
                          "within_10": sum(e <= 0.10 for e in errors) / len(errors),
                          "within_25": sum(e <= 0.25 for e in errors) / len(errors)}
    return out


def markdown(summary: dict, meta: dict) -> str:
    lines = [
        "# Draftlight benchmark", "",
        f"- target: `{meta['target']}`", f"- machine: {meta['machine']}", f"- llama.cpp backends: {meta['backends']}",
        f"- prompts: {meta['prompts']} ({meta['n_prompts']}), max tokens {meta['max_tokens']}, repeats {meta['repeats']}, "
        f"interleaved, medians", f"- date: {meta['date']}", "",
        "| category | variant | tok/s | speedup vs plain (min) | Auto / best fixed k | estimated speedup "
        "| estimated / measured (worst) | acceptance "
        "| accepted/round | TTFT ms | TTFT vs plain ms (worst) | ITL p50/p95 ms | Python ms/token | greedy = plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x, spec=".2f", scale=1.0):
        return "-" if x is None else format(x * scale, spec)

    for cat in summary["categories"] + ["all"]:
        for v, row in summary["table"][cat].items():
            lines.append(
                f"| {cat} | {v} | {f(row['tokens_per_s'])} | {f(row['speedup'])}x ({f(row['speedup_min'])}) "
                f"| {f(row['auto_vs_best_fixed'])}{'x' if row['auto_vs_best_fixed'] else ''} "
                f"| {f(row['estimated_speedup'])}x | {f(row.get('verdict_ratio'))} ({f(row.get('verdict_worst'))}) "
                f"| {f(row['acceptance_rate'])} | {f(row['mean_accepted_per_round'])} "
                f"| {f(row['ttft_s'], '.0f', 1000)} | {_signed_ms(row.get('ttft_vs_plain_s'))} ({_signed_ms(row.get('ttft_vs_plain_worst_s'))}) "
                f"| {f(row['itl_p50_s'], '.0f', 1000)}/{f(row['itl_p95_s'], '.0f', 1000)} "
                f"| {f(row['python_ms_per_token'], '.2f')} | {row['greedy_equal'] or '-'} |"
            )
    verdict = summary.get("verdict") or {}
    if verdict:
        busy = " A busy loop took one core for every other prompt group (plain decoding and every variant of " \
               "that prompt and repeat under the same load), so the load changed between groups." \
            if meta.get("busy_half") else ""
        lines += ["", "The verdict: per speculative run, the engine's estimated speedup (plain decoding priced round "
                  "by round at the machine's speed in that round) over the speedup measured against plain decoding "
                  "of the same prompt in the same repeat (the geometric mean of its two plain runs, 'plain' and "
                  f"'plain (control)').{busy} Rows 'plain vs plain': plain decoding ran twice in "
                  "each group (the second, 'plain (control)', across the group from the first); their speeds over "
                  "each other say how far two measurements of the same work differ here: the floor under the "
                  "verdict's error.", "",
                  "| runs | n | median error | worst error | within 10% | within 25% |", "|---|---|---|---|---|---|"]
        for name, v in verdict.items():
            lines.append(f"| {name} | {v['runs']} | {v['median_error']:.1%} | {v['worst_error']:.1%} "
                         f"| {v['within_10']:.0%} | {v['within_25']:.0%} |")
    if pairs := bench_paired.markdown(summary.get("head_to_head") or {}, summary["categories"]):
        lines += ["", *pairs]
    native = meta.get("native")
    if native:
        lines += ["", f"llama.cpp's own `llama-bench` on the same model, threads and repacking ({native['command']}): "
                  f"tg {native['tg_tokens_per_s']:.2f} tokens/s from {native.get('depth', 0)} tokens into the context "
                  f"(the median prompt's length, where replies start); Draftlight's plain decoding / llama-bench tg = "
                  f"{native['plain_ratio']:.2f} (median plain tokens/s over the prompts run without a busy loop, against llama-bench's mean)."]
    hist = meta.get("history")
    if hist:
        replies = (f", each with the target's own greedy reply (up to {hist['warm_reply_tokens']} tokens)"
                   if hist.get("warm_reply_tokens") else "")
        lines += ["", f"history: each prompt drafts from an index of the other conversations in `{hist['warm']}`{replies} "
                  f"(never its own; {hist['entries_median']:,} n-grams median, at most {hist['mb_max']} MB)"
                  + (f", on top of the saved index {hist['saved_index']}" if hist.get("saved_index") else "") + "."]
    lines += ["", "TTFT vs plain: per run, its time to the first token less plain decoding's for the same prompt in "
              "the same repeat (the median, and the longest extra wait): a drafter that reads the question before "
              "the first token shows here, however fast the rest of the reply runs.",
              "Auto / best fixed k: per prompt, the fixed draft length of the same drafter (plain decoding "
              "included) with the highest median tokens/s over the repeats, chosen in hindsight; per run, Auto's "
              "tokens/s over that variant's in the same repeat; the median is shown.",
              "Python ms/token: the engine's own time per emitted token (neither llama.cpp nor the consumer)."]
    lines += ["", f"greedy = plain: runs whose tokens equal plain greedy decoding's; where one left it, the "
              f"target's two candidates there swapped places between the batched (speculative) and the "
              f"single-token (plain) pass, within {TIE_LOGITS} logits: a numerical tie, unless marked NOT."]
    at = lines.index(f"- date: {meta['date']}")  # the header: what ran, at which commit, where
    lines[at:at] = _facts(meta)
    return "\n".join(lines) + "\n"


def _facts(meta: dict) -> list[str]:
    """The header lines for what a run recorded of its command, commit and CPU (older reports have none)."""
    return [f"- {k}: `{meta[k]}`" if k == "command" else f"- {k}: {meta[k]}"
            for k in ("command", "commit", "cpu") if meta.get(k)]


def docs_markdown(summary: dict, meta: dict) -> str:
    """The run's headline for docs/benchmarks.md: what ran, at which commit, where; the speedup against plain
    decoding per category and variant; the verdict's error. The full table stays in report.md."""
    variants = [v for v in summary["variants"] if v != PLAIN]
    load = ", a busy loop on one core for every other prompt group" if meta.get("busy_half") else ""
    lines = [f"## {Path(meta['prompts']).name}, {meta['date']}", "", *_facts(meta),
             f"- machine: {meta['machine']}, llama.cpp backends {meta['backends']}, {meta.get('n_threads')} threads",
             (f"- target `{meta['target']}`, {meta['n_prompts']} prompts, max tokens {meta['max_tokens']}, "
              f"{meta['repeats']} interleaved repeats{load}; medians of per-run speed over plain decoding's "
              "in the same group"),
             "", "| category | plain tok/s | " + " | ".join(variants) + " |", "|---" * (len(variants) + 2) + "|"]
    for cat in summary["categories"] + ["all"]:
        row = summary["table"][cat]
        plain = row.get(PLAIN, {}).get("tokens_per_s")
        cells = [f"{row[v]['speedup']:.2f}x" if row.get(v, {}).get("speedup") is not None else "-" for v in variants]
        lines.append(f"| {cat} | {'-' if plain is None else f'{plain:.2f}'} | " + " | ".join(cells) + " |")
    if summary.get("verdict"):
        lines += ["", "| verdict: runs | n | median error | worst error | within 10% | within 25% |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {name} | {v['runs']} | {v['median_error']:.1%} | {v['worst_error']:.1%} | {v['within_10']:.0%} "
                  f"| {v['within_25']:.0%} |" for name, v in summary["verdict"].items()]
    if pairs := bench_paired.markdown(summary.get("head_to_head") or {}, summary["categories"]):
        lines += ["", *pairs]
    return "\n".join(lines) + "\n"


def _signed_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:+.0f}"


def chart(summary: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = summary["categories"]
    variants = [v for v in summary["variants"] if v != PLAIN]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5.2))
    width = 0.8 / max(1, len(variants))
    palette = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00"]
    for i, v in enumerate(variants):
        xs = [c + (i - (len(variants) - 1) / 2) * width for c in range(len(cats))]
        sp = [summary["table"][c].get(v, {}).get("speedup") or 0 for c in cats]
        acc = [summary["table"][c].get(v, {}).get("acceptance_rate") or 0 for c in cats]
        ax1.bar(xs, sp, width, label=v, color=palette[i % len(palette)])
        ax2.bar(xs, acc, width, label=v, color=palette[i % len(palette)])
    ax1.axhline(1.0, color="black", linewidth=1)
    ax1.axhline(0.95, color="black", linewidth=0.8, linestyle="--")
    ax1.set_title("Speed vs plain decoding (median ratio; 1.0 = same)")
    ax1.set_ylabel("speedup (x)")
    ax2.set_title("Acceptance rate of drafted tokens")
    ax2.set_ylim(0, 1)
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(cats)), cats, rotation=20)
    # one legend under both plots: inside either one it covered bars
    handles, labels = ax1.get_legend_handles_labels()
    rows = -(-len(labels) // 3)
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.035 * rows + 0.01, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(results: Sequence[RunResult], meta: dict, out: Path, docs: Path | None = None) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(results)
    report = {"meta": meta, "summary": summary,
              "runs": [{k: v for k, v in asdict(r).items() if k not in ("token_ids", "second_choices")} for r in results]}
    # Every round's outcome is in "runs"[i]["rounds"]: (k, drafted, accepted, draft s, verify s, drafter).
    paths = {"json": out / "report.json", "md": out / "report.md", "chart": out / "chart.png"}
    paths["json"].write_text(json.dumps(report, indent=2), encoding="utf-8")
    paths["md"].write_text(markdown(summary, meta), encoding="utf-8")
    chart(summary, paths["chart"])
    if docs is not None:  # the headline for docs/benchmarks.md
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text(docs_markdown(summary, meta), encoding="utf-8")
        paths["docs"] = docs
    return paths


def machine_description() -> str:
    import os

    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"


def record_traces(session: Session, prompts: Sequence[BenchPrompt], results: Sequence[RunResult],
                  drafter: Path | None, path: Path, max_tokens: int) -> Path:
    """Replayable traces of each prompt's plain greedy reply (engine.decoding.replay), headed by this
    machine's measured costs in milliseconds and the replies' token limit."""
    from engine.decoding.replay import record_trace, save_traces

    session.set_drafter(DraftSpec(model=drafter) if drafter else None)
    model = session.draft_model
    traces = []
    for p in prompts:
        plain = next(r for r in results if r.prompt_id == p.id and r.variant == PLAIN)
        tokens = session.render(p.messages).tokens
        ahead = session.opening(p.history)  # what the drafter holds, as in _one_run (no history: the cached opening)
        held = len(ahead) if tokens[: len(ahead)] == ahead else 0
        traces.append(record_trace(p.id, p.category, session.target.n_vocab, tokens, plain.token_ids, model, held))
    c = session.costs
    # The calibrated shape, not today's price: after a run that ends under the busy loop or deep in a long
    # prompt, today's is several times the machine's quiet speed.
    step = c.draft_per_token.value or c.draft_cost(1)
    header = {"machine": machine_description(), "units": "ms", "max_tokens": max_tokens,
              "verify_ms": {n: 1000 * (c.verify(n) or 0) for n in (1, 2, 4, 8, 16)},
              "draft_ms": 1000 * step, "catchup_ms": {n: 1000 * (c.catchup(n) or n * step) for n in (1, 16, 64)}}
    save_traces(path, header, traces)
    return path


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what the platform module says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str | None:
    """The checkout's commit, marked when tracked files differ from it; None outside a git checkout."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head} (with uncommitted changes)" if head and dirty else head or None


def command_line() -> str | None:
    """The bench command as typed, when this process is `python -m engine bench ...`."""
    import shlex
    import sys

    return "python -m engine " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else None


def meta_for(session: Session, prompts_path: Path, prompts: Sequence[BenchPrompt], max_tokens: int, repeats: int) -> dict:
    from engine.llama.backend import backends

    return {
        "target": session.target.path.name, "machine": machine_description(), "backends": ", ".join(backends()),
        "prompts": str(prompts_path), "n_prompts": len(prompts), "max_tokens": max_tokens, "repeats": repeats,
        "date": time.strftime("%Y-%m-%d %H:%M"), "n_threads": session.target.n_threads,
        "calibrated_verify_ms": {n: round((session.costs.verify(n) or 0) * 1000, 1) for n in (1, 2, 4, 8, 16)},
        "calibrated_depths": list(session.costs.depths),
        "calibrated_deep_verify_ms": {n: round((session.costs.deep(n) or 0) * 1000, 1) for n in (1, 2, 4, 8, 16)},
        "command": command_line(), "commit": commit(), "cpu": cpu_name(),
    }
