"""Replayable traces of a prompts file's plain greedy replies (engine.decoding.replay), without a benchmark run:
each prompt decoded plainly once, then the drafter's predictions and prompt lookup recorded along the reply.

    nice -n 19 python scripts/record_traces.py TARGET DRAFT PROMPTS OUT [--half tune] [--max-tokens 96]

What a trace holds (which draft tokens the target would keep) does not depend on the machine's load, so this
may run beside other work; the costs in its header do (record them on a quiet machine, or replay the traces
under a recorded machine's profile, as tests/engine/drafting/test_replay.py does).
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.decoding.session import Session  # noqa: E402
from engine.frontends.bench import _one_run, load_prompts  # noqa: E402
from engine.decoding.replay import load_traces, save_traces  # noqa: E402
from engine.frontends.bench_report import record_traces  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("draft", type=Path, help="the drafter GGUF")
    ap.add_argument("prompts", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--half", default=None, help="only this half of a split set ('tune' or 'report')")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--no-calibrate", action="store_true",
                    help="skip measuring costs at load (the header's costs are then empty: replay under a recorded profile)")
    args = ap.parse_args()
    chosen = [p for p in load_prompts(args.prompts) if args.half is None or p.half == args.half]
    # One of each category in turn: a run stopped early has recorded every kind of request, not the first few.
    by_cat: dict[str, list] = {}
    for p in chosen:
        by_cat.setdefault(p.category, []).append(p)
    prompts = [p for row in itertools.zip_longest(*by_cat.values()) for p in row if p is not None]
    from engine.llama.types import LoadSettings

    session = Session(args.target, None, target_load=LoadSettings(n_ctx=args.ctx), draft_load=LoadSettings(n_ctx=args.ctx),
                      calibrate=not args.no_calibrate)
    try:
        head, traces = load_traces(args.out) if args.out.exists() else (None, [])  # goes on from a run stopped early
        done = {t.name for t in traces}
        prompts = [p for p in prompts if p.id not in done]
        part = args.out.with_suffix(".part.jsonl")
        for i, p in enumerate(prompts, 1):
            plain = _one_run(session, p, None, args.max_tokens, 0)
            record_traces(session, [p], [plain], args.draft, part, args.max_tokens)
            head, (trace,) = load_traces(part)
            traces.append(trace)
            save_traces(args.out, head, traces)  # written as it goes: a long run stopped early keeps what it recorded
            print(f"[{i}/{len(prompts)}] {p.id}: {plain.tokens} tokens", file=sys.stderr, flush=True)
        part.unlink(missing_ok=True)
    finally:
        session.close()
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
