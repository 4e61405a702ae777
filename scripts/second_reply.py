"""A reply after another one in the same session, as the app runs them: Auto's speed against plain decoding.

    python scripts/second_reply.py TARGET DRAFT [--first translation] [--second code_writing] [--repeats 2]
                                   [--carried] [--out FILE]

For every pair (a bench prompt of the --first category, then one of the --second), one session answers the
first (Auto), then the second (Auto), then, after Session.reset_state, the second again with plain decoding;
the line printed is the second reply's tokens/s over plain's (greedy, so the same text). `--carried` also runs
each pair with what Auto learned in the first reply carried into the second (the app until stop 42), interleaved.
The pairs run one after another on one machine: compare ratios of the same run, not runs of different days.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.drafting import policy  # noqa: E402
from engine.drafting.draft_choice import DraftSpec  # noqa: E402
from engine.decoding.session import GenerationSettings, Session  # noqa: E402
from engine.frontends.bench import BenchPrompt, load_prompts  # noqa: E402

PROMPTS = Path(__file__).resolve().parent.parent / "resources" / "bench" / "prompts.jsonl"


def carried(memory: policy.ReplyAuto, costs, drafter_is_model, drafter, prompt, continues=False):
    """ReplyAuto.for_reply as it was: the last Auto, whatever the prompt."""
    if memory._last is not None:
        return memory._last[2]
    return AFRESH(memory, costs, drafter_is_model, drafter, prompt, continues)


AFRESH = policy.ReplyAuto.for_reply


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target")
    ap.add_argument("draft", help="a drafter spec, e.g. lookup+PATH.gguf")
    ap.add_argument("--first", default="translation")
    ap.add_argument("--second", default="code_writing")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--carried", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    prompts = load_prompts(PROMPTS)
    firsts = [p for p in prompts if p.category == args.first]
    seconds = [p for p in prompts if p.category == args.second]
    settings = lambda k: GenerationSettings(draft_max=k, max_tokens=args.max_tokens)  # noqa: E731
    s = Session(args.target, DraftSpec.parse(args.draft))

    def reply(p: BenchPrompt, k):
        return list(s.chat(p.messages, settings(k)))[-1].stats

    modes = ["afresh", "carried"] if args.carried else ["afresh"]
    rows = []
    try:
        for rep in range(args.repeats):
            for a in firsts:
                for b in seconds:
                    for mode in modes:
                        policy.ReplyAuto.for_reply = AFRESH if mode == "afresh" else carried
                        s.reset_state()
                        reply(a, "auto")
                        auto = reply(b, "auto")
                        s.reset_state()
                        plain = reply(b, 0)
                        row = {"repeat": rep, "first": a.id, "second": b.id, "mode": mode,
                               "ratio": auto.tokens_per_s / plain.tokens_per_s, "auto_rounds_before": auto.auto_rounds_before,
                               "rounds_by_drafter": auto.rounds_by_drafter}
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        policy.ReplyAuto.for_reply = AFRESH
        s.close()
    for mode in modes:
        xs = [r["ratio"] for r in rows if r["mode"] == mode]
        print(f"{mode}: {args.second} after {args.first}, Auto / plain median {statistics.median(xs):.3f} "
              f"(runs {min(xs):.2f}-{max(xs):.2f}, {len(xs)})")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
