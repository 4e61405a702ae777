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
from engine.sampling import SamplingParams, accept_draft_token, distribution, sample_residual, softmax_prob

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
    from engine.llama.backend import LlamaModel
    from engine.llama.types import LoadSettings, Logits

    model = LlamaModel(path, LoadSettings(n_ctx=512))
    try:
        text = "def quicksort(xs):\n    # sort a list of numbers in place, then explain the complexity\n"
        toks = model.tokenize(text * 4, add_special=True)[: n + 1]
        return np.array(model.decode(toks, Logits.ALL)[-n:], dtype=np.float32)
    finally:
        model.close()


def best_ms(work, repeats: int = 5) -> float:
    """The fastest of a few runs: the machine's other load only ever adds time."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def distribution_ms(rows: np.ndarray, params: SamplingParams) -> list[float]:
    return [best_ms(lambda: distribution(row, params)) for row in rows]


def step_ms(rows: np.ndarray, drafts: np.ndarray, params: SamplingParams) -> list[float]:
    """One drafted position: q (drafter row) and its draw, p (target row), the test, the residual."""
    def step(row, draft_row, rng=np.random.default_rng(0)):
        q = distribution(draft_row, params)
        tok = q.sample(rng)
        p = distribution(row, params)
        if not accept_draft_token(p, q, tok, rng):
            sample_residual(p, q, tok, row.shape[0], rng)
    return [best_ms(lambda: step(row, draft_row)) for row, draft_row in zip(rows, drafts)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="target GGUF: measure on its real logits rows")
    ap.add_argument("--rows", type=int, default=64)
    args = ap.parse_args()
    rows = model_rows(args.model, args.rows) if args.model else synthetic_rows(args.rows)
    # The drafter's row: the target's, perturbed (a drafter agrees often, not always).
    drafts = rows + np.random.default_rng(1).standard_normal(rows.shape).astype(np.float32) * 0.5
    print(f"{len(rows)} rows x {rows.shape[1]} tokens ({'model' if args.model else 'synthetic'}); per row the best of 5,")
    print("then the median (and the slowest) row")
    print(f"  {'settings':32s} {'distribution':>18s} {'drafted position':>20s}")
    for name, params in CONFIGS.items():
        one, step = distribution_ms(rows, params), step_ms(rows, drafts, params)
        print(f"  {name:32s} {np.median(one):6.3f} ms ({max(one):5.2f}) {np.median(step):8.3f} ms ({max(step):5.2f})")
    print("  (drafted position = q and its draw, p, the acceptance test, the residual draw after a rejection)")
    greedy = [best_ms(lambda: softmax_prob(row, 0)) for row in rows]
    print(f"  {'softmax_prob (greedy p)':32s} {np.median(greedy):6.3f} ms ({max(greedy):5.2f})")


if __name__ == "__main__":
    main()
