"""How fast could prompt lookup make the chats of issue 13 at best, per cost profile?

    python scripts/lookup_ceiling.py            # record the traces with the real target, then replay
    python scripts/lookup_ceiling.py --replay   # replay resources/bench/chat_traces.jsonl only

Recording: each chat of the chosen categories (resources/bench/chats.jsonl) is rendered as the
benchmark renders it, the target's plain greedy reply is generated (160 tokens, no drafter, as the
head-to-head) and a lookup trace of it is recorded (engine.decoding.replay.record_trace). The traces
are saved with the cost header of resources/bench/traces.jsonl, copied and not measured again.

Replay, per category and cost profile (this machine as measured, "gpu", "apple"), with the drafter
"lookup": plain decoding, Auto, the best fixed k in hindsight, and the ceiling (`ceiling`): the
fastest decode of the reply that any choice of draft length per round could get from lookup's
proposals, drafting free. Also the coverage: the share of reply tokens that some lookup proposal
got right at all. Rates are pooled over a category's chats (tokens / time); costs are simulated.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.decoding.replay import (
    K_MAX,
    PROFILES,
    CostProfile,
    Trace,
    auto_policy,
    best_fixed,
    fixed_policy,
    load_traces,
    recorded_profile,
    save_traces,
    simulate,
)

CHATS = ROOT / "resources" / "bench" / "chats.jsonl"
COSTS = ROOT / "resources" / "bench" / "traces.jsonl"
OUT = ROOT / "resources" / "bench" / "chat_traces.jsonl"
CATEGORIES = ("code editing", "summarisation")
MAX_TOKENS = 160


def ceiling(trace: Trace, profile: CostProfile) -> tuple[int, float]:
    """(tokens, time) of the fastest decode of the reply with lookup's proposals: a shortest path
    over reply positions where a round at t keeps any j <= right_t of the tokens lookup proposes
    there (all of them correct, drafting free) and costs verify(j + 1) + the profile's overhead.
    No draft-length policy with this drafter can be faster under these costs: the proposal at t is
    fixed by the greedy text, drafting past right_t only adds rejected tokens to the block, and any
    j <= right_t is a choice this search already weighs."""
    n = trace.tokens
    best = [0.0] * (n + 1)
    for t in range(n - 1, -1, -1):
        right = trace.lookup.get(t, (0, 0, 0))[2]
        best[t] = min(profile.verify(j + 1) + profile.overhead + best[min(t + j + 1, n)]
                      for j in range(min(right, K_MAX) + 1))
    return n, best[0]


def coverage(trace: Trace) -> int:
    """Reply tokens that some lookup proposal got right: u is covered when a proposal at t <= u
    has its first u - t + 1 tokens right."""
    covered = set()
    for t, (_, _, right) in trace.lookup.items():
        covered.update(range(t, min(t + right, trace.tokens)))
    return len(covered)


def all_accepted_speedup(k: int, profile: CostProfile) -> float:
    """Speed over plain if every round drafted k tokens and kept them all (lookup drafts are free)."""
    return (k + 1) / profile.verify(k + 1) * profile.verify(1)


# -- recording -------------------------------------------------------------------------------------------
def cost_header() -> dict:
    head = json.loads(COSTS.read_text(encoding="utf-8").splitlines()[0])
    return {**head, "max_tokens": MAX_TOKENS, "costs_from": "resources/bench/traces.jsonl",
            "note": "costs copied from resources/bench/traces.jsonl (engine bench --traces), not measured again: the "
                    "machine was loaded by other work when these traces were recorded; the traces themselves hold "
                    "only tokens, so they do not depend on the load",
            "recorded_by": f"scripts/lookup_ceiling.py (plain greedy replies, {MAX_TOKENS} tokens, no drafter)"}


def record(categories: Sequence[str], out: Path) -> tuple[dict, list[Trace]]:
    from engine.decoding.events import TokenEvent
    from engine.llama.types import LoadSettings
    from engine.decoding.replay import record_trace
    from engine.decoding.session import GenerationSettings, Session
    from engine.frontends.bench import load_prompts
    from engine.models.default_pair import installed_pair

    pair = installed_pair()
    if pair is None:
        sys.exit("the default model pair is not installed: python -m engine models install-default")
    chats = [c for c in load_prompts(CHATS) if c.category in categories]
    session = Session(pair[0], None, target_load=LoadSettings(n_ctx=4096), calibrate=False)
    traces = []
    try:
        session.use_history(None)
        session.set_drafter(None)
        for c in chats:
            t0 = time.perf_counter()
            prompt = session.render(c.messages, reserve=MAX_TOKENS).tokens  # what chat() decodes from
            assert prompt == session.render(c.messages).tokens, f"{c.id}: the template dropped turns"
            session.reset_state()
            settings = GenerationSettings(draft_max=0, max_tokens=MAX_TOKENS)
            reply = [e.token_id for e in session.chat(c.messages, settings) if isinstance(e, TokenEvent)]
            traces.append(record_trace(c.id, c.category, session.target.n_vocab, prompt, reply, drafter_model=None))
            print(f"{c.id}: prompt {len(prompt)} tokens, reply {len(reply)}, {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
    finally:
        session.close()
    head = cost_header()
    save_traces(out, head, traces)
    print(f"wrote {out}", file=sys.stderr)
    return head, traces


# -- replay ----------------------------------------------------------------------------------------------
def pooled(results) -> float:
    return sum(r[0] for r in results) / sum(r[1] for r in results)


def table(head: dict, traces: Sequence[Trace]) -> str:
    profiles = {"this machine": recorded_profile(head), "gpu": PROFILES["gpu"], "apple": PROFILES["apple"]}
    lines = ["| category | profile | plain | Auto | best fixed k (k) | ceiling | coverage | chats, tokens |",
             "|---|---|---|---|---|---|---|---|"]
    per_chat = ["| chat | profile | Auto | best fixed k (k) | ceiling | coverage |", "|---|---|---|---|---|---|"]
    for cat in sorted({t.category for t in traces}):
        group = [t for t in traces if t.category == cat]
        covered, tokens = sum(coverage(t) for t in group), sum(t.tokens for t in group)
        for pname, prof in profiles.items():
            scale, unit = (1000.0, "tok/s") if pname == "this machine" else (prof.verify(1), "x")

            def sims(make):
                return [(r.tokens, r.seconds) for r in (simulate(t, prof, make, "lookup") for t in group)]

            plain = pooled(sims(fixed_policy(0)))
            auto = pooled(sims(auto_policy("lookup")))
            by_k = {k: pooled(sims(fixed_policy(k))) for k in range(K_MAX + 1)}
            k_best = max(by_k, key=by_k.get)  # one k for the whole category, in hindsight
            ceil = pooled([ceiling(t, prof) for t in group])
            plain_s = f"{plain * scale:.2f} {unit}" if unit == "tok/s" else "1 step/token"
            lines.append(f"| {cat} | {pname} | {plain_s} | {auto / plain:.2f}x | {by_k[k_best] / plain:.2f}x ({k_best}) "
                         f"| {ceil / plain:.2f}x | {covered / tokens:.0%} ({covered}/{tokens}) | {len(group)}, {tokens} |")
            for t in group:
                p = simulate(t, prof, fixed_policy(0), "lookup").rate
                a = simulate(t, prof, auto_policy("lookup"), "lookup").rate
                k, b = best_fixed(t, prof, "lookup")
                n, s = ceiling(t, prof)
                per_chat.append(f"| {t.name} | {pname} | {a / p:.2f}x | {b.rate / p:.2f}x ({k}) | {n / s / p:.2f}x "
                                f"| {coverage(t) / t.tokens:.0%} |")
    curve = ["| profile | " + " | ".join(f"k={k}" for k in (1, 2, 3, 4, 7, 11, 15)) + " |", "|---" * 8 + "|"]
    for pname, prof in profiles.items():
        curve.append(f"| {pname} | " + " | ".join(f"{all_accepted_speedup(k, prof):.2f}x" for k in (1, 2, 3, 4, 7, 11, 15)) + " |")
    return "\n".join([
        "Speed over plain decoding (pooled over each category's chats), drafter: lookup.",
        "ceiling: the fastest decode any per-round draft length could get from lookup's proposals, drafting free.",
        "coverage: reply tokens some lookup proposal got right.", "", *lines, "", "Per chat:", "", *per_chat, "",
        "If every round drafted k tokens and kept them all (the most any lookup round can give):", "", *curve])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replay", action="store_true", help="only replay the saved traces (no model)")
    ap.add_argument("--traces", type=Path, default=OUT)
    ap.add_argument("--categories", default=",".join(CATEGORIES), help="comma-separated (default: %(default)s)")
    args = ap.parse_args()
    if args.replay:
        head, traces = load_traces(args.traces)
    else:
        head, traces = record([c.strip() for c in args.categories.split(",")], args.traces)
    print(table(head, traces))


if __name__ == "__main__":
    main()
