"""Auto with one look (policy.LOOKS = 1: stop 41's behaviour) against two (the look again), interleaved in one
process with plain decoding, on named bench prompts or chats; prints each run's tokens/s over plain's of the same
repeat, then the medians.

    python scripts/looks_ab.py TARGET DRAFT doc-qa-work-policy,code-edit-modern-js,translation-10 [--repeats 3]

A prompt with earlier turns (a chat) is read ahead into the drafter first, as the benchmark does.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.drafting import policy  # noqa: E402
from engine.drafting.draft_choice import DraftSpec  # noqa: E402
from engine.decoding.events import DoneEvent  # noqa: E402
from engine.decoding.session import GenerationSettings, Session  # noqa: E402
from engine.frontends.bench import BenchPrompt, load_prompts  # noqa: E402

BENCH = Path(__file__).resolve().parent.parent / "resources" / "bench"
#: Reply lengths the benchmark's runs use: the chats 160 tokens, the single prompts 96.
CHAT_TOKENS, PROMPT_TOKENS = 160, 96


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target")
    ap.add_argument("draft", help="a drafter spec, e.g. lookup+PATH.gguf")
    ap.add_argument("prompts", help="prompt ids, comma-separated (resources/bench/chats.jsonl, prompts.jsonl)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    names = args.prompts.split(",")
    prompts = [p for f in ("chats.jsonl", "prompts.jsonl") for p in load_prompts(BENCH / f) if p.id in names]
    s = Session(args.target, DraftSpec.parse(args.draft))

    def run(p: BenchPrompt, k) -> float:
        s.reset_state()
        if p.history:
            s.read_ahead(p.history)
        settings = GenerationSettings(draft_max=k, max_tokens=CHAT_TOKENS if p.history else PROMPT_TOKENS)
        done = [e for e in s.chat(p.messages, settings) if isinstance(e, DoneEvent)][-1]
        return done.stats.tokens_per_s

    looks_as_shipped = policy.LOOKS
    res: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(args.repeats):
            for p in prompts:
                plain = run(p, 0)
                for looks in (1, 2):
                    policy.LOOKS = looks
                    r = run(p, "auto") / plain
                    res.setdefault((p.id, looks), []).append(r)
                    print(p.id, looks, round(r, 3), flush=True)
    finally:
        policy.LOOKS = looks_as_shipped
        s.close()
    for p in prompts:
        print(p.id, "one look", round(statistics.median(res[(p.id, 1)]), 3),
              "two looks", round(statistics.median(res[(p.id, 2)]), 3))


if __name__ == "__main__":
    main()
