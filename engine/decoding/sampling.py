"""Sampling transforms and the acceptance rule of speculative sampling.

Target (p) and drafter (q) distributions both come from `distribution()` with the same
settings, so the min(1, p/q) test and the residual norm(max(0, p - q)) are taken between
like and like. Order of transforms as in llama.cpp's default chain: top-k, top-p and min-p
on the raw softmax, then temperature on what survives.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How the next token is chosen."""

    temperature: float = 0.0
    """0 (or less) is greedy decoding."""
    top_k: int = 40
    """Keep the k most likely tokens (0 = all)."""
    top_p: float = 0.95
    """Keep the smallest set whose probability reaches top_p (1 = all)."""
    min_p: float = 0.05
    """Drop tokens below min_p times the top probability (0 = none)."""
    seed: int | None = None
    """Seed for the random stream (None = fresh entropy)."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        if self.top_k < 0:
            raise ValueError("top-k must be 0 (off) or positive")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top-p must be in (0, 1]")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError("min-p must be in [0, 1)")


@dataclass(frozen=True, slots=True)
class Distribution:
    """A sparse probability distribution: the tokens that survived the transforms."""

    ids: np.ndarray
    """Token ids, most likely first."""
    probs: np.ndarray
    """Their probabilities (float64, sum 1)."""

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def sample(self, rng: np.random.Generator) -> int:
        return int(self.ids[_draw(self.probs, rng)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab, dtype=np.float64)
        out[self.ids] = self.probs
        return out


def _draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(probs)
    return min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), len(probs) - 1)


def distribution(logits: np.ndarray, params: SamplingParams) -> Distribution:
    """The sampling distribution for one row of logits under `params` (temperature > 0)."""
    n = logits.shape[0]
    if 0 < params.top_k < n:
        ids = np.argpartition(logits, n - params.top_k)[n - params.top_k :]
    else:
        ids = np.arange(n)
    vals = logits[ids].astype(np.float64)
    order = np.argsort(-vals, kind="stable")
    ids, vals = ids[order], vals[order]
    probs = np.exp(vals - vals[0])
    probs /= probs.sum()
    keep = len(probs)
    if params.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1)
    if params.min_p > 0.0:
        keep = min(keep, max(1, int(np.count_nonzero(probs >= params.min_p * probs[0]))))
    ids, vals = ids[:keep], vals[:keep]
    tempered = np.exp((vals - vals[0]) / params.temperature)
    return Distribution(ids.astype(np.int64), tempered / tempered.sum())


def softmax_prob(logits: np.ndarray, token: int) -> float:
    """Plain softmax probability of one token (what greedy decoding reports as p and q)."""
    top = float(logits.max())
    return float(np.exp(float(logits[token]) - top) / np.exp(logits - top, dtype=np.float64).sum())


def top_prob(logits: np.ndarray) -> tuple[int, float]:
    """The argmax token and its softmax probability."""
    tok = int(np.argmax(logits))
    return tok, softmax_prob(logits, tok)


def accept_draft_token(p: Distribution, q: Distribution | None, token: int, rng: np.random.Generator) -> bool:
    """Speculative sampling's test: keep `token` with probability min(1, p(x) / q(x)).

    q None means the drafter proposed `token` deterministically (prompt lookup): q(x) = 1.
    """
    px = p.prob(token)
    qx = 1.0 if q is None else q.prob(token)
    if qx <= 0.0:  # cannot happen for a token the drafter sampled; be safe, not sorry
        return px > 0.0
    return rng.random() < min(1.0, px / qx)


def sample_residual(p: Distribution, q: Distribution | None, token: int, n_vocab: int, rng: np.random.Generator) -> int:
    """After a rejection: sample from norm(max(0, p - q)) over the full vocabulary."""
    residual = p.dense(n_vocab)
    if q is None:
        residual[token] = 0.0
    else:
        residual -= q.dense(n_vocab)
        np.maximum(residual, 0.0, out=residual)
    if residual.sum() <= 0.0:  # p == q exactly: rejection had probability 0
        return p.sample(rng)
    support = np.flatnonzero(residual)
    return int(support[_draw(residual[support], rng)])
