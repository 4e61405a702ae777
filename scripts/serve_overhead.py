"""What serving costs per token: the same replies from the engine directly and through `python -m engine serve`
(streamed over HTTP to the openai client, and whole), interleaved in one run, medians.

    python scripts/serve_overhead.py --target T.gguf --draft D.gguf [--reps 10] [--max-tokens 200] [--k 3]

The server runs as its own process (as a client program meets it); the direct replies run in this one, on the
same files, with the same settings. Prints milliseconds per token for each path and the differences."""
from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PROMPTS = ["python code token draft", "the model is fast", "hello world def return class"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", default="none")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--k", default="3")
    ap.add_argument("--threads", default="1")
    args = ap.parse_args()

    import openai

    from engine.decoding.events import DoneEvent
    from engine.decoding.session import GenerationSettings, Session
    from engine.llama.types import LoadSettings

    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRAFTLIGHT_CONTROL_ROUNDS": "0"}
    os.environ["DRAFTLIGHT_CONTROL_ROUNDS"] = "0"
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--target", args.target, "--draft", args.draft,
                             "--draft-max", args.k, "--port", "0", "--threads", args.threads],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = ""
        while "serving" not in line:
            line = proc.stderr.readline()
            if not line:
                raise SystemExit("the server did not start")
        url = re.search(r"at (\S+/v1)", line).group(1)
        model = re.search(r"serving (\S+)", line).group(1)
        client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
        session = Session(args.target, args.draft, target_load=LoadSettings(n_threads=int(args.threads)))
        settings = GenerationSettings(draft_max=args.k, max_tokens=args.max_tokens)
        import httpx

        raw = httpx.Client(timeout=600)
        per_token: dict[str, list[float]] = {"direct": [], "streamed": [], "raw SSE": [], "whole": []}
        tokens_seen = set()
        for rep in range(args.reps):
            for prompt in PROMPTS:
                messages = [{"role": "user", "content": prompt}]
                t = time.perf_counter()
                done = [e for e in session.chat(messages, settings) if isinstance(e, DoneEvent)][-1]
                per_token["direct"].append((time.perf_counter() - t) / max(1, done.stats.tokens))
                t = time.perf_counter()
                chunks = list(client.chat.completions.create(model=model, messages=messages, temperature=0,
                                                             max_tokens=args.max_tokens, stream=True,
                                                             stream_options={"include_usage": True}))
                n = chunks[-1].usage.completion_tokens
                per_token["streamed"].append((time.perf_counter() - t) / max(1, n))
                t = time.perf_counter()
                body = {"model": model, "messages": messages, "max_tokens": args.max_tokens, "stream": True}
                with raw.stream("POST", f"{url}/chat/completions", json=body) as r:
                    events = sum(1 for line in r.iter_lines() if line.startswith("data: {"))
                per_token["raw SSE"].append((time.perf_counter() - t) / max(1, events - 2))  # less role and finish
                t = time.perf_counter()
                whole = client.chat.completions.create(model=model, messages=messages, temperature=0,
                                                       max_tokens=args.max_tokens)
                per_token["whole"].append((time.perf_counter() - t) / max(1, whole.usage.completion_tokens))
                tokens_seen.add((done.stats.tokens, n, whole.usage.completion_tokens))
        session.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    med = {k: statistics.median(v) * 1000 for k, v in per_token.items()}
    print(f"replies: {len(per_token['direct'])} per path; tokens per reply (direct, streamed, whole): "
          f"{sorted(tokens_seen)}")
    for k, v in med.items():
        print(f"{k:9s} median {v:.3f} ms/token")
    print(f"served overhead per token: streamed (openai client) {med['streamed'] - med['direct']:+.3f} ms, "
          f"streamed (httpx, lines only) {med['raw SSE'] - med['direct']:+.3f} ms, "
          f"whole {med['whole'] - med['direct']:+.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
