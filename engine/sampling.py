"""Sampling transforms and the acceptance rule of speculative sampling.

Target (p) and drafter (q) distributions both come from `distribution()` with the same
settings, so the min(1, p/q) test and the residual norm(max(0, p - q)) are taken between
like and like.

The transforms are llama.cpp's common sampler chain (top-k, top-p, min-p, temperature, dist):
top-k, top-p and min-p cut the untempered softmax, temperature reshapes what survives.
tests/engine/decoding/test_sampling_oracle.py holds every kept set and probability to llama.cpp's own chain.
The one difference is deliberate and in arithmetic: kept probabilities and top-p running sums
are float64 here (llama.cpp: float32, drifting by up to n * 2^-24 over n terms), so where a
running sum lands that close to top-p, llama.cpp may keep a token more or fewer. The min-p floor,
top + log(min_p), is computed in the row's float32 as llama.cpp does.

Speed (a GPU token step takes a few ms, so Python per row must stay well below that; measured
per row at a 152k vocabulary): nothing sorts the whole vocabulary. Top-k partitions only the
tokens above a threshold taken from a strided sample; top-p takes whole bins of logits while the
running mass stays below top-p and sorts only the bin where it crosses; the draw goes by blocks.
The one full-vocabulary pass left is the softmax normaliser that top-p needs when top-k is off
(float32 exponentials summed in float64; the kept tokens' share recomputed in float64).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Top-k looks for a threshold in every _STRIDE-th logit.
_STRIDE = 64
#: Thresholds on exp(logit - top) tried in turn for a set that holds the top-p mass (0: everything).
_MASS_STEPS = (1e-4, 0.0)
#: Top-p bins per unit of logit: only the bin where the running mass crosses top-p gets sorted.
_BINS = 16.0
#: Block size of the two-level draw: no cumulative sum over the whole vocabulary.
_BLOCK = 4096


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
    """Token ids, the most likely first, the rest in no particular order (sorting a vocabulary
    is what this module avoids)."""
    probs: np.ndarray
    """Their probabilities (float64, sum 1)."""

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def sample(self, rng: np.random.Generator) -> int:
        return int(self.ids[_draw(self.probs, rng)])

    def dense(self, n_vocab: int) -> np.ndarray:
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


def _draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Inverse-CDF draw with one uniform number, in two levels: block sums, then one block.
    (Searching all but the last running sum needs no clamp: past them all is the last.)"""
    starts = np.arange(0, probs.size, _BLOCK)
    cdf = np.cumsum(np.add.reduceat(probs, starts))
    u = rng.random() * cdf[-1]
    b = int(np.searchsorted(cdf[:-1], u, side="right"))
    if b:
        u -= cdf[b - 1]
    inner = np.cumsum(probs[starts[b] : starts[b] + _BLOCK])
    return int(starts[b]) + int(np.searchsorted(inner[:-1], u, side="right"))


def distribution(logits: np.ndarray, params: SamplingParams) -> Distribution:
    """The sampling distribution for one row of logits under `params` (temperature > 0)."""
    row = np.asarray(logits)
    n = row.shape[0]
    top = row.max()
    k = min(params.top_k, n)
    # min-p keeps logit >= top + log(min_p), in the row's own precision as llama.cpp does
    with np.errstate(divide="ignore"):  # min_p = 0: no floor
        floor = top + np.log(row.dtype.type(params.min_p))
    # 1. a pool that holds every kept token, its weights exp(logit - top), the top-p normaliser z
    if k > 0:
        ids = _top_k(row, k)
        weights = np.exp(row[ids] - np.float64(top))
        z = float(weights.sum())
    elif params.top_p < 1.0:
        e = _exp_below(row, top)  # the one full-vocabulary pass: top-p needs the normaliser
        z = float(e.sum(dtype=np.float64))
        ids = np.flatnonzero(row >= floor) if params.min_p > 0.0 else _mass_set(e, params.top_p * z)
        weights = np.exp(row[ids] - np.float64(top))
        # the pool's share of the normaliser in float64 too: float32 is left only in the tail
        z += float(weights.sum()) - float(e[ids].sum(dtype=np.float64))
    elif params.min_p > 0.0:
        ids = np.flatnonzero(row >= floor)
    else:
        return _uncut(row, top, params.temperature)
    # 2. the cuts: each keeps a top set, so applying them one after the other is their order
    if params.top_p < 1.0:
        ids = _top_p(row, top, ids, weights, params.top_p * z)
    ids = ids[row[ids] >= floor]
    # 3. temperature on what survives; the most likely token first
    best = int(np.argmax(row[ids]))
    ids[[0, best]] = ids[[best, 0]]
    tempered = np.exp((row[ids] - np.float64(top)) / params.temperature)
    return Distribution(ids.astype(np.int64), tempered / tempered.sum())


def _top_k(row: np.ndarray, k: int) -> np.ndarray:
    """Ids of the k largest logits, unordered. A strided sample's few largest give a threshold
    that a few hundred tokens pass, and only those are partitioned (the whole row if too few)."""
    sample = row[::_STRIDE]
    j = min(k // _STRIDE + 4, sample.size)
    near = np.flatnonzero(row >= np.partition(sample, sample.size - j)[sample.size - j])
    if near.size < k:
        near = np.arange(row.shape[0])
    return near[np.argpartition(row[near], near.size - k)[near.size - k :]]


def _mass_set(e: np.ndarray, mass: float) -> np.ndarray:
    """Ids of a top set (everything above a threshold) whose weights sum to at least `mass`:
    the top-p prefix lies inside it."""
    for step in _MASS_STEPS:
        ids = np.flatnonzero(e >= step)
        if float(e[ids].sum(dtype=np.float64)) >= mass:
            break
    return ids


def _top_p(row: np.ndarray, top: float, ids: np.ndarray, weights: np.ndarray, mass: float) -> np.ndarray:
    """The shortest prefix of `ids` in descending logit order whose weights reach `mass`, found
    without sorting the pool: bins of 1/_BINS logit are taken whole while the running mass stays
    below `mass`, and only the bin where it crosses is sorted. (Float rounding may leave the
    whole pool short of `mass`: then the last bin is the crossing one, and all of it is kept.)"""
    bins = ((top - row[ids]) * row.dtype.type(_BINS)).astype(np.int64)
    per_bin = np.bincount(bins, weights=weights)
    before = np.cumsum(per_bin)
    b = int(np.searchsorted(before[:-1], mass))
    edge = np.flatnonzero(bins == b)
    edge = edge[np.argsort(-row[ids[edge]])]
    m = int(np.searchsorted(np.cumsum(weights[edge]), mass - before[b] + per_bin[b])) + 1
    return np.concatenate([ids[bins < b], ids[edge[:m]]])


def _exp_below(row: np.ndarray, top: float, temperature: float = 1.0) -> np.ndarray:
    """exp((row - top) / temperature) in the row's precision, computed in place in one new
    array: a second vocabulary-sized temporary costs more in page faults than the exponentials."""
    out = row - top
    out /= row.dtype.type(temperature)
    np.exp(out, out=out)
    return out


def _uncut(row: np.ndarray, top: float, temperature: float) -> Distribution:
    """Nothing is cut: the whole vocabulary, in id order with the most likely token swapped
    to the front (float32 exponentials, float64 normalisation)."""
    w = _exp_below(row, top, temperature)
    probs = w / w.sum(dtype=np.float64)
    ids = np.arange(row.shape[0])
    best = int(np.argmax(row))
    ids[[0, best]] = ids[[best, 0]]
    probs[[0, best]] = probs[[best, 0]]
    return Distribution(ids, probs)


def softmax_prob(logits: np.ndarray, token: int) -> float:
    """Plain softmax probability of one token (what greedy decoding reports as p and q)."""
    row = np.asarray(logits)
    top = row.max()
    z = float(_exp_below(row, top).sum(dtype=np.float64))
    return float(np.exp(float(row[token]) - float(top))) / z


def top_prob(logits: np.ndarray) -> tuple[int, float]:
    """The argmax token and its softmax probability: the argmax's logit is the top, so one
    full-row pass (the max) fewer than softmax_prob. The exponentials stay exact over the whole
    row: on real rows of the 1.5B target, skipping chunks far below the top with a proven error
    below 1e-4 still had to keep 1-80% of them (median ~30%), too little to be worth it."""
    row = np.asarray(logits)
    tok = int(np.argmax(row))
    return tok, 1.0 / float(_exp_below(row, row[tok]).sum(dtype=np.float64))


def accept_draft_token(p: Distribution, q: Distribution | None, token: int, rng: np.random.Generator) -> bool:
    """Speculative sampling's test: keep `token` with probability min(1, p(x) / q(x)).

    q None means the drafter proposed `token` deterministically (prompt lookup): q(x) = 1.
    Written u * q(x) < p(x), so q(x) = 0 (a token the drafter could not have sampled) keeps
    the token exactly when the target allows it, without dividing by zero.
    """
    qx = 1.0 if q is None else q.prob(token)
    return rng.random() * qx < p.prob(token)


def sample_residual(p: Distribution, q: Distribution | None, token: int, n_vocab: int, rng: np.random.Generator) -> int:
    """After a rejection: sample from norm(max(0, p - q)).

    The residual lives on p's support, so it is computed there; q is read through one scratch
    array as long as the larger id (a drafter's vocabulary may exceed the target's n_vocab, which
    is therefore not needed). With q None (prompt lookup, q a point mass on `token`) the
    residual is p without `token`.
    """
    residual = p.probs.copy()
    if q is None:
        residual[p.ids == token] = 0.0
    else:
        scratch = np.zeros(1 + max(int(q.ids.max()), int(p.ids.max())))
        scratch[q.ids] = q.probs
        residual = np.maximum(residual - scratch[p.ids], 0.0)
    support = np.flatnonzero(residual)
    if not support.size:  # p == q: a rejection had probability 0
        return p.sample(rng)
    return int(p.ids[support[_draw(residual[support], rng)]])
