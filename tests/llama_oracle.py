"""llama.cpp's own sampler chain as the reference for the engine's sampling transforms.

The chain is the one llama.cpp's common sampler builds (common/sampling.cpp, default order):
top-k, top-p, min-p, temperature, then dist, which writes the final probabilities. It runs on a
llama_token_data_array filled from the same logits row, through llama-cpp-python's low-level
API, so nothing of the engine's code takes part in the reference.
"""
from __future__ import annotations

import ctypes

import llama_cpp as lc
import numpy as np

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
