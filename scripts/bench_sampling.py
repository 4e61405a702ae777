"""Python time per sampled row at a 152k vocabulary (issue 9: <= 0.5 ms a row, top_k = 0 included).

A row's work in speculative sampling: the target's distribution, the drafter's, the acceptance
test, and (after a rejection) the residual draw. Rows are real logits when --model is given
(the target's own rows along a prompt), else synthetic rows shaped like a language model's.

    python scripts/bench_sampling.py [--model TARGET.gguf] [--rows 64]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.decoding.sampling import (  # noqa: E402
    SamplingParams, accept_draft_token, distribution, sample_residual, softmax_prob,
)

VOCAB = 151_936  # Qwen2.5's
CONFIGS = {
    "defaults T0.8 k40 p0.95 m0.05": SamplingParams(0.8, 40, 0.95, 0.05),
    "top_k=0 p0.95 m0.05": SamplingParams(0.8, 0, 0.95, 0.05),
    "top_k=0 p0.9 m0": SamplingParams(0.8, 0, 0.9, 0.0),
    "top_k=0 p1 m0.05": SamplingParams(0.8, 0, 1.0, 0.05),
    "top_k=0 p1 m0 (nothing cut)": SamplingParams(0.8, 0, 1.0, 0.0),
}


def synthetic_rows(n: int, seed: int = 0) -> np.ndarray:
    """Logits with a language model's shape: a broad bulk, a few strong candidates on top."""
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((n, VOCAB)) * 2.0).astype(np.float32)
    for r in rows:
        top = rng.choice(VOCAB, 20, replace=False)
        r[top] += rng.uniform(4.0, 14.0, 20).astype(np.float32)
    return rows


def model_rows(path: str, n: int) -> np.ndarray:
    from engine.decoding.llama_backend import LlamaModel, LoadSettings

    model = LlamaModel(path, LoadSettings(n_ctx=512))
    try:
        text = "def quicksort(xs):\n    # sort a list of numbers in place, then explain the complexity\n"
        toks = model.tokenize(text * 4, add_special=True)[: n + 1]
        return np.array(model.decode(toks, "all")[-n:], dtype=np.float32)
    finally:
        model.close()


def distribution_ms(rows: np.ndarray, params: SamplingParams) -> float:
    t0 = time.perf_counter()
    for row in rows:
        distribution(row, params)
    return (time.perf_counter() - t0) / len(rows) * 1e3


def step_ms(rows: np.ndarray, drafts: np.ndarray, params: SamplingParams) -> float:
    """One drafted position: q (drafter row) and its draw, p (target row), the test, the residual."""
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for row, draft_row in zip(rows, drafts):
        q = distribution(draft_row, params)
        tok = q.sample(rng)
        p = distribution(row, params)
        if not accept_draft_token(p, q, tok, rng):
            sample_residual(p, q, tok, row.shape[0], rng)
    return (time.perf_counter() - t0) / len(rows) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="target GGUF: measure on its real logits rows")
    ap.add_argument("--rows", type=int, default=64)
    args = ap.parse_args()
    rows = model_rows(args.model, args.rows) if args.model else synthetic_rows(args.rows)
    # The drafter's row: the target's, perturbed (a drafter agrees often, not always).
    drafts = rows + np.random.default_rng(1).standard_normal(rows.shape).astype(np.float32) * 0.5
    print(f"{len(rows)} rows x {rows.shape[1]} tokens ({'model' if args.model else 'synthetic'}), best of 3")
    print(f"  {'settings':32s} {'distribution':>12s} {'drafted position':>17s}")
    for name, params in CONFIGS.items():
        step_ms(rows[:4], drafts[:4], params)  # warm-up
        one = min(distribution_ms(rows, params) for _ in range(3))
        step = min(step_ms(rows, drafts, params) for _ in range(3))
        print(f"  {name:32s} {one:9.3f} ms {step:14.3f} ms")
    print("  (drafted position = q and its draw, p, the acceptance test, the residual draw after a rejection)")
    t0 = time.perf_counter()
    for row in rows:
        softmax_prob(row, 0)
    print(f"  {'softmax_prob (greedy p)':32s} {(time.perf_counter() - t0) / len(rows) * 1e3:7.3f} ms/row")


if __name__ == "__main__":
    main()
