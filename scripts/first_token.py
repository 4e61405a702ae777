"""Where a reply's time before its first token goes: every llama.cpp pass (target or drafter) from the reply's
start to its first token, for plain decoding and for Auto with lookup + model, on one prompt, interleaved.

    nice -n 19 python scripts/first_token.py TARGET DRAFT "Translate into German: ..." [--repeats 3]

Timings depend on the machine's load; the list of passes (which model, how many tokens) does not.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.decoding.events import RoundEvent, TokenEvent  # noqa: E402
from engine.decoding.session import GenerationSettings, Session  # noqa: E402
from engine.drafting.draft_choice import DraftLength, DraftSpec  # noqa: E402
from engine.llama.backend import LlamaModel  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target")
    ap.add_argument("draft", help="the drafter GGUF")
    ap.add_argument("prompt")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()
    s = Session(args.target, DraftSpec(model=Path(args.draft), lookup=True))
    passes: list[tuple[str, int, float, float]] = []
    t_start = [0.0]
    decode = LlamaModel.decode

    def timed(self, tokens, *a, **kw):
        t0 = time.perf_counter()
        try:
            return decode(self, tokens, *a, **kw)
        finally:
            who = "target" if self is s.target else "drafter"
            passes.append((who, len(tokens), 1000 * (t0 - t_start[0]), 1000 * (time.perf_counter() - t0)))

    LlamaModel.decode = timed
    try:
        for r in range(args.repeats):
            for mode in (DraftLength.fixed(0), DraftLength.AUTO):
                s.reset_state()
                passes.clear()
                t_start[0] = time.perf_counter()
                first = None
                rounds = []
                for ev in s.chat([{"role": "user", "content": args.prompt}], GenerationSettings(draft_max=mode, max_tokens=args.max_tokens)):
                    if isinstance(ev, RoundEvent) and first is None:
                        rounds.append((ev.drafter.value, ev.k, len(ev.drafted), ev.looked))
                    if isinstance(ev, TokenEvent) and first is None:
                        first = 1000 * (time.perf_counter() - t_start[0])
                        before = list(passes)
                print(f"repeat {r} {mode}: first token at {first:.0f} ms; first round {rounds[:1]}")
                for who, n, at, ms in before:
                    print(f"    {who:7s} {n:4d} tokens at {at:7.1f} ms, {ms:6.1f} ms")
    finally:
        LlamaModel.decode = decode
        s.close()


if __name__ == "__main__":
    main()
