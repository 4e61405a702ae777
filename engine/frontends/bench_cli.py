"""`python -m engine bench`: plain decoding against speculative variants, interleaved."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine.frontends.options import draft_max_arg, load_settings
from engine.paths import resources_dir

DEFAULT_PROMPTS = resources_dir() / "bench" / "prompts.jsonl"


def register(sub) -> None:
    b = sub.add_parser("bench", help="measure speculative variants against plain decoding (ratios from the same run)")
    b.add_argument("--target", required=True, help="target model (GGUF file)")
    b.add_argument("--draft", action="append", default=None,
                   help="variant(s) to compare with plain decoding: a drafter GGUF, 'lookup', 'auto' (lookup first, "
                        "then the model drafter given with another --draft) or 'none'; ITEM@K sets that variant's draft length; "
                        "repeat or comma-separate")
    b.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help=f"JSONL with 'prompt' and 'category' (default: {DEFAULT_PROMPTS.name})")
    b.add_argument("--draft-max", type=draft_max_arg, default="auto", help="draft length k or 'auto' (default)")
    b.add_argument("--max-tokens", type=int, default=128)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--categories", default=None, help="only these categories (comma-separated)")
    b.add_argument("--ctx", type=int, default=4096)
    b.add_argument("--threads", type=int, default=None)
    b.add_argument("--gpu-layers", type=int, default=-1)
    b.add_argument("--out", type=Path, required=True, help="folder for report.json, report.md and chart.png")
    b.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    from engine.frontends.bench import load_prompts, meta_for, parse_variants, run_bench, write_report
    from engine.errors import EngineError
    from engine.decoding.session import Session

    try:  # fail before a long run, not after it
        import matplotlib  # noqa: F401
    except ImportError:
        raise EngineError("the benchmark draws its chart with matplotlib: pip install -e '.[bench]'") from None
    items = [i.strip() for d in (args.draft or ["lookup"]) for i in d.split(",") if i.strip()]
    variants = parse_variants(items, args.draft_max)
    prompts = load_prompts(args.prompts)
    if args.categories:
        wanted = {c.strip() for c in args.categories.split(",")}
        prompts = [p for p in prompts if p.category in wanted]
        if not prompts:
            raise EngineError(f"no prompts in the categories {sorted(wanted)}")
    if args.repeats < 1 or args.max_tokens < 1:
        raise EngineError("--repeats and --max-tokens must be at least 1")
    session = Session(args.target, None, target_load=load_settings(args))
    try:
        for v in variants:  # load and check every drafter before the long run starts
            session.set_drafter(v.draft)
        results = run_bench(session, prompts, variants, args.max_tokens, args.repeats)
        paths = write_report(results, meta_for(session, args.prompts, prompts, args.max_tokens, args.repeats), args.out)
    finally:
        session.close()
    print(paths["md"].read_text(encoding="utf-8"))
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0
