"""References for the engine's sampling, none of which uses the engine's sampling code.

`llama_distribution`: llama.cpp's own sampler chain, the one its common sampler builds
(common/sampling.cpp, default order): top-k, top-p, min-p, temperature, then dist, which writes
the final probabilities. It runs on a llama_token_data_array filled from the same logits row,
through llama-cpp-python's low-level API. It works in float32.

`float64_reference`: the same chain written out plainly in float64 (sort everything, cut,
temper). `assert_same` compares two kept sets and their probabilities, allowing only ties and
tokens that sit on a cut within a given slack.
"""
from __future__ import annotations

import ctypes
import math

import llama_cpp as lc
import numpy as np

#: Relative tolerance on probabilities (llama.cpp's float32 against float64), for logits near 0.
TOL = 1e-5


def llama_rtol(logits: np.ndarray, temperature: float) -> float:
    """llama.cpp divides the logits themselves by the temperature in float32: far from 0 the
    quotient keeps fewer bits of the differences that matter (8e-5 at logit 400, T = 0.3)."""
    return TOL + float(np.abs(logits).max()) / temperature * 2.0**-22

_TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
assert _TOKEN_DATA.itemsize == ctypes.sizeof(lc.llama_token_data)


def llama_distribution(logits: np.ndarray, temperature: float, top_k: int, top_p: float,
                       min_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The ids of the tokens llama.cpp's chain keeps and their probabilities."""
    row = np.ascontiguousarray(logits, dtype=np.float32)
    n = row.shape[0]
    data = (lc.llama_token_data * n)()
    view = np.frombuffer(data, dtype=_TOKEN_DATA)
    view["id"] = np.arange(n)
    view["logit"] = row
    view["p"] = 0.0
    cur = lc.llama_token_data_array(data, n, -1, False)
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    try:
        # min_keep 0, as common_params_sampling has it; the chain owns (and frees) its samplers
        for smpl in (
            lc.llama_sampler_init_top_k(top_k),
            lc.llama_sampler_init_top_p(top_p, 0),
            lc.llama_sampler_init_min_p(min_p, 0),
            lc.llama_sampler_init_temp(temperature),
            lc.llama_sampler_init_dist(1234),
        ):
            lc.llama_sampler_chain_add(chain, smpl)
        lc.llama_sampler_apply(chain, ctypes.byref(cur))
    finally:
        lc.llama_sampler_free(chain)
    kept = np.frombuffer(data, dtype=_TOKEN_DATA, count=cur.size)
    return kept["id"].astype(np.int64), kept["p"].astype(np.float64)


class Row:
    """A logits row and its float64 descending sort, computed once for the whole grid."""

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits
        self.order = np.argsort(-logits.astype(np.float64), kind="stable")
        self.desc = logits[self.order].astype(np.float64)
        self._softmax: dict[int, np.ndarray] = {}

    def pool(self, k: int) -> np.ndarray:
        """The logits top-k keeps, descending."""
        return self.desc[:k] if 0 < k < self.desc.size else self.desc

    def softmax(self, k: int) -> np.ndarray:
        """The untempered softmax over the top-k pool, as top-p sees it."""
        if k not in self._softmax:
            w = np.exp(self.pool(k) - self.desc[0])
            self._softmax[k] = w / w.sum()
        return self._softmax[k]


def float64_reference(row: Row, t: float, k: int, top_p: float, min_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The chain written out plainly: sort everything, cut, temper (float64 throughout)."""
    v = row.pool(k)
    keep = v.size
    if top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(row.softmax(k)), top_p)) + 1)
    if min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(v >= v[0] + math.log(min_p))))
    tempered = np.exp((v[:keep] - v[0]) / t)
    return row.order[:keep], tempered / tempered.sum()


def on_a_cut(row: Row, value: float, k: int, top_p: float, min_p: float, slack: float) -> bool:
    """Whether a logit sits on the top-k, top-p or min-p cut, within `slack` of probability
    mass (top-p) or of logit (min-p); ties on the top-k cut always are."""
    pool, w = row.pool(k), row.softmax(k)
    if 0 < k < row.desc.size and value == pool[-1]:
        return True
    before, tied = w[pool > value].sum(), w[pool == value].sum()
    if top_p < 1.0 and before < top_p + slack and before + tied > top_p - slack:
        return True
    return min_p > 0.0 and abs(value - (pool[0] + math.log(min_p))) <= 1e-6 * max(1.0, abs(pool[0]))


def assert_same(row: Row, ours: tuple, ref: tuple, params: tuple, slack: float, who: str, rtol: float = TOL) -> None:
    """Same kept tokens (up to ties and tokens on a cut) with the same probabilities."""
    n = row.logits.size
    kept_a, kept_b = np.zeros(n, bool), np.zeros(n, bool)
    kept_a[ours[0]], kept_b[ref[0]] = True, True
    only_a, only_b = np.flatnonzero(kept_a & ~kept_b), np.flatnonzero(kept_b & ~kept_a)
    # a logit kept more often on one side: a tie swapped for a tie (same logit) is no difference
    va, ca = np.unique(row.logits[only_a], return_counts=True)
    vb, cb = np.unique(row.logits[only_b], return_counts=True)
    da, db = dict(zip(va.tolist(), ca.tolist())), dict(zip(vb.tolist(), cb.tolist()))
    odd = {v for v in da.keys() | db.keys() if da.get(v, 0) != db.get(v, 0)}
    where = f"{who}, T={params[0]} top_k={params[1]} top_p={params[2]} min_p={params[3]}"
    assert all(on_a_cut(row, v, *params[1:], slack) for v in odd), \
        f"{where}: kept sets differ at {len(odd)} logits, e.g. {sorted(odd)[:8]}"
    # probabilities of what both kept, each renormalised over that common part
    pa, pb = np.zeros(n), np.zeros(n)
    pa[ours[0]], pb[ref[0]] = ours[1], ref[1]
    both = kept_a & kept_b
    np.testing.assert_allclose(pa[both] / pa[both].sum(), pb[both] / pb[both].sum(), rtol=rtol, atol=1e-6, err_msg=where)


def greedy_chain(oracle, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """A model's greedy continuation of `prompt`, one plain decode a token, stopping at nothing but a full
    context, and each token's softmax probability (float64). `oracle`: an engine LlamaModel (cleared before
    and after) or a model file's path (opened with one thread, closed after)."""
    from engine.llama.backend import LlamaModel
    from engine.llama.types import LoadSettings, Logits

    owned = not isinstance(oracle, LlamaModel)
    model = LlamaModel(oracle, LoadSettings(n_ctx=256, n_threads=1, n_threads_batch=1)) if owned else oracle
    try:
        model.clear()
        row, tokens, probs = model.decode(prompt, Logits.LAST)[0], [], []
        for _ in range(n):
            x = row.astype(np.float64)
            tokens.append(int(np.argmax(x)))
            probs.append(float(1.0 / np.exp(x - x.max()).sum()))
            if len(model.kv) == model.n_ctx:
                break
            row = model.decode(tokens[-1:], Logits.LAST)[0]
        model.clear()
        return tokens, probs
    finally:
        if owned:
            model.close()


def argmax_chain(oracle, prompt: list[int], n: int) -> list[int]:
    """The tokens of greedy_chain."""
    return greedy_chain(oracle, prompt, n)[0]
