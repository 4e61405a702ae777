"""Every sampling transform of the engine against llama.cpp's own sampler chain.

The reference (tests/llama_oracle.py) is llama.cpp's common chain, top-k > top-p > min-p >
temperature > dist, run through llama-cpp-python's low-level API on the same logits row. Over
the grid temperature x top-k x top-p x min-p below, on real rows of the tiny models, on
vocabulary-sized (152k) rows of several shapes and on the real target's rows when it is
installed, the engine must keep the same tokens with the same probabilities.

Ties and rounding: tokens with equal logits are interchangeable (each side may keep a
different one), so kept sets are compared as multisets of logits. llama.cpp works in float32
and the engine in float64, which matters only on a cut: llama.cpp's sums drift by up to
n * 2^-24 over n terms, so a token may differ when the running sum before it lies that close
to top-p (or its logit within 1e-6 of the min-p floor). A second reference, the chain written
out plainly in float64 (sort, cut, temper), holds the engine to 1e-9 on every cut. The one
deliberate difference (float64 top-p sums) has its own test at the end.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings, Logits
from engine.sampling import SamplingParams, distribution
from llama_oracle import TOL, Row, assert_same, float64_reference, llama_distribution, llama_rtol

# numpy's warnings (a log of 0, an overflow) are failures here: the transforms must not raise them
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

TEMPERATURES = (0.3, 0.7, 1.0, 1.5)
TOP_K = (0, 1, 40)
TOP_P = (0.5, 0.9, 1.0)
MIN_P = (0.0, 0.05, 0.2)
GRID = list(itertools.product(TEMPERATURES, TOP_K, TOP_P, MIN_P))
#: Synthetic rows: large enough for every large-vocabulary path (strided top-k search, binned
#: top-p, the mass steps), small enough to run the grid quickly; the real target's rows are 152k.
VOCAB = 24_576


def lm_like_row(rng: np.random.Generator, bulk: float, peaks: int, lift: tuple[float, float]) -> np.ndarray:
    """A broad bulk of logits and a few strong candidates above it, as a language model's."""
    row = (rng.standard_normal(VOCAB) * bulk).astype(np.float32)
    top = rng.choice(VOCAB, peaks, replace=False)
    row[top] += rng.uniform(*lift, peaks).astype(np.float32)
    return row


def vocabulary_rows() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20240611)
    return {
        "peaked": lm_like_row(rng, 2.0, 20, (6.0, 14.0)),
        # top-p 0.9 reaches deep into the bulk here: thousands of tokens, many top-p bins
        "flat": lm_like_row(rng, 1.5, 5, (1.0, 4.0)),
        # logits on a 1/4 grid: ties at every cut
        "ties": np.round(lm_like_row(rng, 2.0, 30, (4.0, 10.0)) * 4) / 4,
        # one token far above everything: min-p and top-p keep it alone
        "certain": lm_like_row(rng, 1.0, 1, (30.0, 30.0)),
        # the largest logits all at every 64th id: the strided top-k search sees only them
        # one token, then a deep tail that holds most of the mass: top-p reaches far below the top
        "tail": np.concatenate([[0.0], -10.0 + 0.05 * rng.standard_normal(VOCAB - 1)]).astype(np.float32),
        # far from 0: only differences of logits may matter (exp(logit + top) would overflow)
        "shifted": lm_like_row(rng, 2.0, 20, (6.0, 14.0)) + np.float32(400.0),
        "strided": np.where(np.arange(VOCAB) % 64 == 0, 10.0 + np.arange(VOCAB) / VOCAB,
                            lm_like_row(rng, 1.0, 3, (2, 3))).astype(np.float32),
    }


def model_rows(path, text: str) -> np.ndarray:
    model = LlamaModel(path, LoadSettings(n_ctx=256, n_threads=1))
    try:
        return np.array(model.decode(model.tokenize(text, add_special=True), Logits.ALL), dtype=np.float32)
    finally:
        model.close()


@pytest.fixture(scope="module")
def tiny_rows(tiny) -> list[np.ndarray]:
    text = "def hello world the model is fast and the"
    return [*model_rows(tiny["target"], text)[::2], *model_rows(tiny["drafter"], text)[1::3]]


def assert_matches_llama(row: Row, t: float, k: int, top_p: float, min_p: float) -> None:
    params = (t, k, top_p, min_p)
    d = distribution(row.logits, SamplingParams(temperature=t, top_k=k, top_p=top_p, min_p=min_p))
    assert d.ids.size == np.unique(d.ids).size, "a token kept twice"
    assert abs(d.probs.sum() - 1.0) < 1e-9
    assert float(row.logits[d.ids[0]]) == row.desc[0], "the most likely token must come first"
    # llama.cpp adds its softmax normaliser and the top-p running sum one term at a time in
    # float32: relative error up to n * 2^-24 over n terms (measured: 5e-4 of mass on a real
    # 152k row), so its top-p cut may move that far
    ref = llama_distribution(row.logits, *params)
    assert_same(row, (d.ids, d.probs), ref, params, TOL + row.pool(k).size * 2.0**-24, "llama.cpp", llama_rtol(row.logits, t))
    # the plain float64 chain: the same cut to 1e-9 of mass
    assert_same(row, (d.ids, d.probs), float64_reference(row, *params), params, 1e-9, "float64 reference")


def test_tiny_model_rows_match_llama_cpp(tiny_rows):
    assert len(tiny_rows) >= 6
    for row in tiny_rows:
        facts = Row(row)
        for params in GRID:
            assert_matches_llama(facts, *params)


@pytest.mark.parametrize("shape", ["peaked", "flat", "ties", "certain", "tail", "shifted", "strided"])
def test_large_rows_match_llama_cpp(shape):
    row = vocabulary_rows()[shape]
    facts = Row(row)
    for params in GRID:
        assert_matches_llama(facts, *params)
    if shape == "flat":  # the large-set code paths really ran
        assert distribution(row, SamplingParams(1.0, 0, 0.9, 0.0)).ids.size > 1000


def test_real_target_rows_match_llama_cpp(real_pair):
    rows = model_rows(real_pair[0], "def quicksort(xs):\n    # sort a list of numbers, then explain why it is fast\n")
    for row in rows[[1, len(rows) // 2, -1]]:  # a few positions: each is 108 chains over 152k tokens
        facts = Row(row)
        for params in GRID:
            assert_matches_llama(facts, *params)


# -- llama.cpp's own hand-written cases (tests/test-sampling.cpp), each transform alone --------
BASE = np.log(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32))


def kept(params: SamplingParams, row: np.ndarray = BASE) -> dict[int, float]:
    d = distribution(row, params)
    return {int(i): round(float(p), 5) for i, p in zip(d.ids, d.probs)}


@pytest.mark.parametrize("k, expected", [
    (1, {3: 1.0}),
    (3, {3: 0.44444, 2: 0.33333, 1: 0.22222}),
    (4, {3: 0.4, 2: 0.3, 1: 0.2, 0: 0.1}),
    (0, {3: 0.4, 2: 0.3, 1: 0.2, 0: 0.1}),
])
def test_top_k_by_hand(k, expected):
    assert kept(SamplingParams(1.0, k, 1.0, 0.0)) == expected


@pytest.mark.parametrize("p, expected", [
    (1e-9, {3: 1.0}),
    (0.7, {3: 0.57143, 2: 0.42857}),
    (0.8, {3: 0.44444, 2: 0.33333, 1: 0.22222}),
    (1.0, {3: 0.4, 2: 0.3, 1: 0.2, 0: 0.1}),
])
def test_top_p_by_hand(p, expected):
    assert kept(SamplingParams(1.0, 0, p, 0.0)) == expected
    assert kept(SamplingParams(1.0, 4, p, 0.0)) == expected  # the same through the top-k path


@pytest.mark.parametrize("k", [0, 4])
def test_top_p_cut_inside_a_group_of_close_tokens(k):
    # 0.26, 0.255, 0.25 lie within 0.04 of each other in logits: 0.5 needs exactly the first two
    row = np.log(np.array([0.26, 0.255, 0.25, 0.235], dtype=np.float32))
    assert kept(SamplingParams(1.0, k, 0.5, 0.0), row) == {0: round(0.26 / 0.515, 5), 1: round(0.255 / 0.515, 5)}
    assert set(kept(SamplingParams(1.0, k, 0.95, 0.0))) == {0, 1, 2, 3}  # reached only with the last


@pytest.mark.parametrize("k, top_p", [(0, 1.0), (0, 0.99), (3, 1.0), (3, 0.99)])
def test_a_token_exactly_on_the_min_p_floor_is_kept(k, top_p):
    """llama.cpp keeps logit >= top + logf(min_p): a token exactly there stays."""
    row = np.array([0.0, np.log(np.float32(0.5)), -3.0], dtype=np.float32)
    assert set(kept(SamplingParams(1.0, k, top_p, 0.5), row)) == {0, 1}
    assert sorted(llama_distribution(row, 1.0, k, top_p, 0.5)[0].tolist()) == [0, 1]


@pytest.mark.parametrize("m, expected", [
    (0.0, {3: 0.4, 2: 0.3, 1: 0.2, 0: 0.1}),
    (0.24, {3: 0.4, 2: 0.3, 1: 0.2, 0: 0.1}),
    (0.26, {3: 0.44444, 2: 0.33333, 1: 0.22222}),
    (0.49, {3: 0.44444, 2: 0.33333, 1: 0.22222}),
    (0.51, {3: 0.57143, 2: 0.42857}),
    (0.74, {3: 0.57143, 2: 0.42857}),
    (0.76, {3: 1.0}),
])
def test_min_p_by_hand(m, expected):
    assert kept(SamplingParams(1.0, 0, 1.0, m)) == expected
    assert kept(SamplingParams(1.0, 0, 0.999999, m)) == expected  # through the top-p path
    # top-k 3 drops 0.1 first; min-p's cut is relative to the top, so it is the same cut
    assert kept(SamplingParams(1.0, 3, 1.0, m)) == (expected if 0 not in expected else {3: 0.44444, 2: 0.33333, 1: 0.22222})


def test_temperature_by_hand():
    # p^(1/T), renormalised: T = 0.5 squares the probabilities, T = 2 takes their square root
    sq = np.array([0.01, 0.04, 0.09, 0.16]) / 0.30
    rt = np.sqrt([0.1, 0.2, 0.3, 0.4]) / np.sqrt([0.1, 0.2, 0.3, 0.4]).sum()
    assert kept(SamplingParams(0.5, 0, 1.0, 0.0)) == {i: round(float(sq[i]), 5) for i in range(4)}
    assert kept(SamplingParams(2.0, 0, 1.0, 0.0)) == {i: round(float(rt[i]), 5) for i in range(4)}
    # the cuts come first and see the untempered probabilities: top-p 0.7 keeps {0.4, 0.3} at any T
    assert set(kept(SamplingParams(0.1, 0, 0.7, 0.0))) == {3, 2}
    assert set(kept(SamplingParams(5.0, 0, 0.7, 0.0))) == {3, 2}
    # min-p 0.6 keeps 0.3 (0.75 of the top) whatever the temperature does to it afterwards
    assert kept(SamplingParams(4.0, 0, 1.0, 0.6)) == {3: round(0.4**0.25 / (0.4**0.25 + 0.3**0.25), 5),
                                                      2: round(0.3**0.25 / (0.4**0.25 + 0.3**0.25), 5)}


def test_cuts_combine_in_llama_cpp_order():
    # top-k 3 first: top-p then renormalises over {0.4, 0.3, 0.2} (sum 0.9), where two tokens
    # hold 0.78 >= 0.75; over the whole vocabulary they hold 0.7 < 0.75 and a third is needed
    assert kept(SamplingParams(1.0, 3, 0.75, 0.0)) == {3: 0.57143, 2: 0.42857}
    assert set(kept(SamplingParams(1.0, 0, 0.75, 0.0))) == {3, 2, 1}
    # min-p last, relative to the top: 0.6 keeps 0.3 (0.75 of 0.4), 0.8 does not
    assert kept(SamplingParams(1.0, 3, 0.75, 0.6)) == {3: 0.57143, 2: 0.42857}
    assert kept(SamplingParams(1.0, 3, 0.75, 0.8)) == {3: 1.0}


def test_deliberate_difference_top_p_sums_in_float64():
    """llama.cpp sums the probabilities for top-p in float32 (against top_p as a C float), the
    engine in float64. Here the first two tokens hold 0.89999993 of the mass (exact, by hand
    below): short of 0.9, so top-p needs the third token. llama.cpp's float32 sum reaches
    0.9f and stops at two; the engine keeps three, as exact arithmetic says."""
    row = np.array([-0.5108256340026855, -1.2039730548858643, -2.302584409713745], dtype=np.float32)
    w = [math.exp(float(v) - float(row[0])) for v in row]
    assert 0.9 - 1e-7 < (w[0] + w[1]) / math.fsum(w) < 0.9
    for k in (0, 3):  # both ways through the engine: the whole vocabulary, and a top-k pool
        assert sorted(distribution(row, SamplingParams(1.0, k, 0.9, 0.0)).ids.tolist()) == [0, 1, 2]
    assert sorted(llama_distribution(row, 1.0, 0, 0.9, 0.0)[0].tolist()) == [0, 1]
