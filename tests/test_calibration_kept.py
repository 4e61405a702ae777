"""A measurement is kept per model file and machine: the next load is ready without measuring,
and a change of file, threads or GPU layers measures again. Real llama.cpp on the tiny models."""
from __future__ import annotations

import os

import pytest

from engine.decoding import calibration
from engine.decoding.llama_backend import LoadSettings
from engine.decoding.session import Session


def open_session(tiny, drafter=True, **load) -> Session:
    return Session(tiny["target"], str(tiny["drafter"]) if drafter else None, target_load=LoadSettings(**load))


def test_the_second_load_uses_the_kept_measurement_and_measures_nothing(tiny):
    first = open_session(tiny, n_threads=1)
    assert first.target.passes > 0 and first.draft_model.passes > 0  # measured: nothing was kept yet
    measured = {n: first.costs.verify_cost(n) for n in (1, 2, 4, 8, 16)}
    step = first.costs.draft_per_token.value
    first.close()
    second = open_session(tiny, n_threads=1)
    try:
        assert second.target.passes == 0 and second.draft_model.passes == 0  # no timing decode at all
        assert sorted(second.kept_calibration) == sorted([tiny["target"].name, tiny["drafter"].name])
        for n, v in measured.items():
            assert second.costs.verify_cost(n) == pytest.approx(v)
        assert second.costs.draft_per_token.value == pytest.approx(step)
    finally:
        second.close()


@pytest.mark.parametrize("change", ["threads", "gpu layers", "file"])
def test_a_change_of_threads_gpu_layers_or_file_measures_again(tiny, change):
    open_session(tiny, drafter=False, n_threads=1).close()
    load = {"n_threads": 1}
    if change == "threads":
        load["n_threads"] = 2
    elif change == "gpu layers":
        load["n_gpu_layers"] = 0
    else:
        st = os.stat(tiny["target"])
        os.utime(tiny["target"], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    s = open_session(tiny, drafter=False, **load)
    try:
        assert s.target.passes > 0 and s.kept_calibration == []
    finally:
        s.close()


def test_replies_refine_what_is_kept(tiny):
    from engine.decoding.session import GenerationSettings

    s = open_session(tiny, drafter=False, n_threads=1)
    key = s._key(s.target)
    before = calibration.load(key)["blocks"]
    s.costs.speed.value = 2.0  # the machine now runs at half the speed it was measured at
    list(s.chat([{"role": "user", "content": "hello"}], GenerationSettings(draft_max=0, max_tokens=4)))
    s.close()
    after = calibration.load(key)["blocks"]
    assert set(after) == set(before)
    assert all(after[n] != before[n] for n in before)  # written back at the speed the reply ran


def test_a_damaged_store_only_costs_a_measurement(tiny):
    calibration.store_path().parent.mkdir(parents=True, exist_ok=True)
    calibration.store_path().write_bytes(b"\x00not json{")
    s = open_session(tiny, drafter=False, n_threads=1)
    try:
        assert s.target.passes > 0
    finally:
        s.close()
    assert calibration.load(s._key(s.target)) is not None  # and the store works again
