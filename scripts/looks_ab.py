"""Auto with one look (policy.LOOKS = 1: stop 41's behaviour) against two (the look again), interleaved in one
process with plain decoding, on named bench prompts or chats; prints each run's tokens/s over plain's of the same
repeat, then the medians.

    python scripts/looks_ab.py doc-qa-work-policy,code-edit-modern-js,translation-10 3
"""
import sys, json, statistics
from pathlib import Path
from engine.decoding import policy
from engine.decoding.session import Session, GenerationSettings
from engine.decoding.draft_choice import DraftSpec
from engine.frontends.bench import load_prompts
from engine.decoding.events import DoneEvent
M = Path.home() / ".local/share/Draftlight/models"
names = sys.argv[1].split(",")
reps = int(sys.argv[2])
prompts = [p for f in ("resources/bench/chats.jsonl", "resources/bench/prompts.jsonl") for p in load_prompts(Path(f))]
prompts = [p for p in prompts if p.id in names]
s = Session(str(M / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"), DraftSpec.with_lookup(M / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
def run(p, k, max_tokens):
    s.reset_state()
    if p.history: s.read_ahead(p.history)
    done = [e for e in s.chat(p.messages, GenerationSettings(draft_max=k, max_tokens=max_tokens)) if isinstance(e, DoneEvent)][-1]
    return done.stats.tokens_per_s
res = {}
for rep in range(reps):
    for p in prompts:
        mt = 160 if p.history else 96
        plain = run(p, 0, mt)
        for looks in (1, 2):
            policy.LOOKS = looks
            r = run(p, "auto", mt) / plain
            res.setdefault((p.id, looks), []).append(r)
            print(p.id, looks, round(r, 3), flush=True)
for p in prompts:
    print(p.id, "one look", round(statistics.median(res[(p.id, 1)]), 3), "two looks", round(statistics.median(res[(p.id, 2)]), 3))
s.close()
