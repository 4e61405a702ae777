"""`python -m engine bench`: plain decoding against speculative variants, interleaved."""
from __future__ import annotations

import sys
from pathlib import Path

from engine.frontends.options import (
    add_history_options, add_thread_options, draft_load_settings, draft_max_arg, history_cap_bytes, load_settings,
)
from engine.drafting.draft_choice import DraftLength
from engine.paths import resources_dir

DEFAULT_PROMPTS = resources_dir() / "bench" / "prompts.jsonl"


def register(sub) -> None:
    b = sub.add_parser("bench", help="measure speculative variants against plain decoding (ratios from the same run)")
    b.add_argument("--target", required=True, help="target model (GGUF file)")
    b.add_argument("--draft", action="append", default=None,
                   help="variant(s) to compare with plain decoding: a drafter GGUF, 'lookup', 'history' (lookup that also "
                        "drafts from an index of the other conversations: see --history-warm), 'auto' (lookup first, "
                        "then the model drafter given with another --draft) or 'none'; ITEM@K sets that variant's draft length; "
                        "repeat or comma-separate")
    b.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help=f"JSONL with 'prompt' and 'category' (default: {DEFAULT_PROMPTS.name})")
    b.add_argument("--draft-max", type=draft_max_arg, default=DraftLength.AUTO, help="draft length k or 'auto' (default)")
    b.add_argument("--max-tokens", type=int, default=128)
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--categories", default=None, help="only these categories (comma-separated)")
    b.add_argument("--half", default=None, help="only the prompts of this half of a split set ('tune' or 'report')")
    b.add_argument("--ctx", type=int, default=4096)
    add_thread_options(b)
    b.add_argument("--gpu-layers", type=int, default=-1)
    b.add_argument("--traces", type=Path, default=None,
                   help="also write replayable traces of every prompt (JSONL) for tests/engine/drafting/test_replay.py")
    b.add_argument("--native", type=Path, default=None,
                   help="folder with llama.cpp's own llama-bench (scripts/build_llama_tools.sh): report plain / llama-bench tg")
    b.add_argument("--native-modes", default=None,
                   help="with --native: llama.cpp speculative modes to run head to head, e.g. "
                        "'draft-simple@4,ngram-simple,ngram-map-k,ngram-mod,ngram-cache' (draft-simple and draft-mtp use the "
                        "first drafter given; draft-mtp wants a Gemma 4 assistant)")
    b.add_argument("--history-warm", type=Path, default=None, metavar="FILE",
                   help="for 'history': conversations (JSONL, as --prompts) to index; each prompt is measured with an "
                        "index of the OTHER conversations only (default: the --prompts file itself)")
    b.add_argument("--history-index", type=Path, default=None, metavar="DIR",
                   help="for 'history': also start from the saved index for the target in DIR (read, never written; "
                        "it may hold the measured conversations, so only --history-warm is a fair head to head)")
    b.add_argument("--history-warm-replies", type=int, default=0, metavar="N",
                   help="for 'history': index each warm-up conversation with the target's own plain greedy reply to it "
                        "(up to N tokens, generated before the runs), as a past chat would hold (default 0: none)")
    add_history_options(b)
    b.add_argument("--busy-half", action="store_true",
                   help="a busy loop takes one core for every other prompt group: the verdict must follow the load")
    b.add_argument("--served", action="store_true",
                   help="also run the first variant through the local server (engine serve), streamed over HTTP and "
                        "timed at the client: what serving costs")
    b.add_argument("--out", type=Path, required=True, help="folder for report.json, report.md and chart.png")
    b.add_argument("--docs", type=Path, default=None, metavar="FILE",
                   help="also write the run's headline tables, headed by its command, commit and machine, "
                        "as Markdown for docs/benchmarks.md")
    b.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    from engine.drafting.draft_choice import DraftSpec
    from engine.frontends.bench import SERVED, Variant, load_prompts, parse_variants, run_bench
    from engine.frontends.bench_report import meta_for, record_traces, write_report
    from engine.errors import EngineError
    from engine.decoding.session import Session

    try:  # fail before a long run, not after it
        import matplotlib  # noqa: F401
    except ImportError:
        raise EngineError("the benchmark draws its chart with matplotlib: pip install -e '.[bench]'") from None
    items = [i.strip() for d in (args.draft or ["lookup"]) for i in d.split(",") if i.strip()]
    variants = parse_variants(items, args.draft_max)
    if args.served:
        from dataclasses import replace

        base = variants[0] if variants else Variant("plain", DraftSpec.NONE, DraftLength.fixed(0))
        variants.append(replace(base, name=f"{base.name}{SERVED}", served=True))
    prompts = load_prompts(args.prompts)
    if args.categories:
        wanted = {c.strip() for c in args.categories.split(",")}
        prompts = [p for p in prompts if p.category in wanted]
        if not prompts:
            raise EngineError(f"no prompts in the categories {sorted(wanted)}")
    if args.half:
        prompts = [p for p in prompts if p.half == args.half]
        if not prompts:
            raise EngineError(f"no prompts in the half {args.half!r}")
    if args.repeats < 1 or args.max_tokens < 1:
        raise EngineError("--repeats and --max-tokens must be at least 1")
    session = Session(args.target, None, target_load=load_settings(args), draft_load=draft_load_settings(args))
    try:
        for v in variants:  # load and check every drafter before the long run starts
            session.set_drafter(v.draft)
        native = _native_baseline(args, session, prompts) if args.native else None
        head_to_head = _native_modes(args, variants) if args.native and args.native_modes else None
        histories, history_meta = _histories(args, session, prompts) if any(v.history for v in variants) else (None, None)
        results = run_bench(session, prompts, variants, args.max_tokens, args.repeats, native=head_to_head,
                            histories=histories, busy_half=args.busy_half)
        meta = meta_for(session, args.prompts, prompts, args.max_tokens, args.repeats)
        meta["busy_half"] = args.busy_half
        if history_meta:
            meta["history"] = history_meta
        if native:
            # llama-bench ran on a quiet machine: set it against the quiet groups only.
            plain = sorted(r.tokens_per_s for r in results if r.variant == "plain" and not r.busy)
            native["plain_ratio"] = plain[len(plain) // 2] / native["tg_tokens_per_s"]
            meta["native"] = native
        if args.traces:
            models = [v.draft.model for v in variants if v.draft.model]
            record_traces(session, prompts, results, models[0] if models else None, args.traces, args.max_tokens)
        paths = write_report(results, meta, args.out, docs=args.docs)
    finally:
        if args.served:
            from engine.frontends.bench_served import close_servers

            close_servers()
        session.close()
    print(paths["md"].read_text(encoding="utf-8"))
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0


def _histories(args, session, prompts):
    """Per prompt, an index of the other warm-up conversations (and the saved index, if asked)."""
    import statistics

    from engine.drafting.history_index import HistoryIndex
    from engine.errors import EngineError
    from engine.frontends.bench import history_indexes, load_prompts

    cap = history_cap_bytes(args)
    warm_path = args.history_warm or args.prompts
    base = None
    if args.history_index:
        base = HistoryIndex.open_for(args.history_index, session.target, cap)
        for note in base.notes:
            print(f"note: {note}", file=sys.stderr)
    if args.history_warm_replies < 0:
        raise EngineError("--history-warm-replies must be 0 or more")
    warm = load_prompts(warm_path)
    if args.history_warm_replies:
        print(f"history: generating the target's replies to {len(warm)} warm-up conversations", file=sys.stderr)
    indexes = history_indexes(session, prompts, warm, base, cap, args.history_warm_replies)
    sizes = [i.entries for i in indexes.values()]
    meta = {"warm": str(warm_path), "saved_index": str(base.path) if base is not None else None,
            "warm_reply_tokens": args.history_warm_replies, "entries_median": int(statistics.median(sizes)), "mb_max": round(max(i.nbytes for i in indexes.values()) / 2**20, 2),
            "rule": "each prompt's index holds the other conversations only"}
    print(f"history indexes: {meta['entries_median']:,} n-grams (median) per prompt from {warm_path}", file=sys.stderr)
    return indexes, meta


def _native_baseline(args, session, prompts) -> dict:
    """llama.cpp's own llama-bench tg on the same model and threads, repacking as the engine has it,
    generating from the median prompt's length on (-d), where the benchmark's replies start."""
    import statistics

    from engine.frontends import native

    tools = native.locate(args.native)
    depth = int(statistics.median(len(session.render(p.messages).tokens) for p in prompts))
    rep = native.llama_bench(tools, session.target.path, threads=session.target.n_threads, n_gen=args.max_tokens,
                             repack=session.target.extra_buffers, depth=depth,
                             flash_attn=session.target.flash_attn)
    tg = [t for t in rep.tests if t.kind == "tg"]
    return {"tg_tokens_per_s": tg[0].tokens_per_s, "depth": tg[0].depth,
            "command": " ".join(str(c) for c in rep.command[:1]) + " "
            + " ".join(str(c) for c in rep.command[1:]).replace(str(session.target.path), session.target.path.name)}


def _native_modes(args, variants):
    from engine.errors import EngineError
    from engine.frontends import native
    from engine.frontends.bench import NativeVariant

    models = [v.draft.model for v in variants if v.draft.model]
    modes = []
    for item in (i.strip() for i in args.native_modes.split(",") if i.strip()):
        kind, _, k = item.partition("@")
        with_model = kind in (native.DRAFT_SIMPLE, native.DRAFT_MTP)
        if with_model and not models:
            raise EngineError(f"{kind} needs a drafter model among --draft")
        modes.append(NativeVariant(kind, int(k) if k else None, models[0] if with_model else None))
    return native.locate(args.native), modes
