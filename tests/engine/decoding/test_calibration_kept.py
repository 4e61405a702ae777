"""A measurement is kept per model file and machine: the next load is ready without measuring,
and a change of file, threads or GPU layers measures again. Real llama.cpp on the tiny models."""
from __future__ import annotations

import os

import pytest

from engine.llama import calibration
from engine.llama.types import LoadSettings
from engine.decoding.measure import LoadStage
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
        # No timing decode at all: the drafter's one pass is its read of the template's opening (Session.opening).
        assert second.target.passes == 0 and second.draft_model.passes == 1
        assert list(second.draft_model.kv) == second.opening()
        assert sorted(second.kept_calibration) == sorted([tiny["target"].name, tiny["drafter"].name])
        for n, v in measured.items():
            assert second.costs.verify_cost(n) == pytest.approx(v)
        assert second.costs.draft_per_token.value == pytest.approx(step)
    finally:
        second.close()


def test_only_a_load_that_measures_says_it_is_measuring(tiny):
    """The status line shows the stage the load reports: with a kept measurement it reads the models
    and is ready, and never says it is timing them."""
    def load() -> list[LoadStage]:
        stages: list[LoadStage] = []
        Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_threads=1),
                progress=lambda stage, _fraction: stages.append(stage)).close()
        stages = [s for s in stages if s in (LoadStage.TARGET, LoadStage.DRAFTER, LoadStage.MEASURING)]
        return [s for i, s in enumerate(stages) if i == 0 or stages[i - 1] is not s]  # one per stage in turn

    assert load() == [LoadStage.TARGET, LoadStage.MEASURING, LoadStage.DRAFTER, LoadStage.MEASURING]
    assert load() == [LoadStage.TARGET, LoadStage.DRAFTER]


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


def test_a_drafter_switched_to_under_load_costs_what_was_kept_and_switching_back_changes_nothing(tiny):
    """The drafter's step is held at the calibration's speed and priced at today's (CostModel.draft_cost):
    a kept step read while plain rounds run 3x slow is today's price, and switching drafters back and
    forth neither measures nor re-reads the store (found: each switch under a 3x load tripled the step
    written back, to 0.5 s a token after a benchmark run)."""
    from engine.decoding.session import GenerationSettings

    open_session(tiny, n_threads=1).close()  # measures and keeps target and drafter
    s = open_session(tiny, drafter=False, n_threads=1)
    try:
        kept = calibration.load(s._key(s.target))
        assert kept is not None and s.target.passes == 0
        s.costs.plain_speed.value = 3.0  # plain rounds now run 3x slower than the calibration
        s.set_drafter(str(tiny["drafter"]))
        step = calibration.load(s._key(s.draft_model))["step"]
        assert s.draft_model.passes == 1  # read, not measured: its one pass read the template's opening
        assert s.costs.draft_cost(1) == pytest.approx(step)  # kept at the speed it was written at: today's
        assert s.costs.draft_per_token.value == pytest.approx(step / 3)
        price = s.costs.draft_cost(1)
        for _ in range(3):
            s.set_drafter(None)
            s.set_drafter(str(tiny["drafter"]))
        assert s.costs.draft_cost(1) == pytest.approx(price) and s.draft_model.passes == 1  # it holds the opening
        # A reply writes the price back at today's speed; the load then halves. A drafter switched back to
        # keeps what this session held (at the calibration's speed), priced at the new speed: the half.
        list(s.chat([{"role": "user", "content": "hello"}], GenerationSettings(draft_max=0, max_tokens=2)))
        s.costs.plain_speed.value = 1.5
        held = s.costs.draft_per_token.value
        s.set_drafter(None)
        s.set_drafter(str(tiny["drafter"]))
        assert s.costs.draft_per_token.value == pytest.approx(held)
        assert s.costs.draft_cost(1) == pytest.approx(held * 1.5)
    finally:
        s.close()


def test_a_damaged_store_only_costs_a_measurement(tiny):
    calibration.store_path().parent.mkdir(parents=True, exist_ok=True)
    calibration.store_path().write_bytes(b"\x00not json{")
    s = open_session(tiny, drafter=False, n_threads=1)
    try:
        assert s.target.passes > 0
    finally:
        s.close()
    assert calibration.load(s._key(s.target)) is not None  # and the store works again


# -- the store itself, worked by hand ------------------------------------------------------------------------
import json  # noqa: E402
import os  # noqa: E402


def test_what_is_kept_reads_back_and_a_malformed_entry_reads_as_nothing():
    calibration.save("k1", {1: 0.1, 4: 0.3}, 0.05, 1.2)
    one_depth = {"deep": {}, "depths": (0, 0), "rounds": 0}
    assert calibration.load("k1") == {"blocks": {1: 0.1, 4: 0.3}, "step": 0.05, "interference": 1.2, "quiet": True,
                                      **one_depth}
    calibration.save("k2", {2: 0.2}, quiet=False)
    assert calibration.load("k2") == {"blocks": {2: 0.2}, "step": None, "interference": 1.0, "quiet": False, **one_depth}
    calibration.save("k3", {1: 0.1}, deep={1: 0.12, 16: 0.4}, depths=(128, 1024))
    assert calibration.load("k3")["deep"] == {1: 0.12, 16: 0.4} and calibration.load("k3")["depths"] == (128, 1024)
    assert calibration.load("missing") is None
    data = json.loads(calibration.store_path().read_text())
    data["bad-blocks"] = {"blocks": [1, 2], "step": 0.1}
    data["negative"] = {"blocks": {"1": -0.1}, "step": 0.1}
    data["bad-step"] = {"blocks": {"1": 0.1}, "step": "fast"}
    data["zero-step"] = {"blocks": {"1": 0.1}, "step": 0}
    data["odd-interference"] = {"blocks": {"1": 0.1}, "step": 0.1, "interference": 7}
    data["not-a-dict"] = 5
    data["no-quiet-flag"] = {"blocks": {"1": 0.1}, "step": 0.1}  # kept before passes were judged
    data["provisional"] = {"blocks": {"1": 0.1}, "quiet": False, "rounds": 12}
    data["odd-rounds"] = {"blocks": {"1": 0.1}, "quiet": False, "rounds": -3}
    data["odd-quiet-flag"] = {"blocks": {"1": 0.1}, "step": 0.1, "quiet": "yes"}
    # A deep shape that cannot be read leaves the entry at one depth (its shallow shape is still good).
    data["deep-depths-reversed"] = {"blocks": {"1": 0.1}, "deep": {"1": 0.2}, "depths": [1024, 128]}
    data["deep-negative"] = {"blocks": {"1": 0.1}, "deep": {"1": -0.2}, "depths": [128, 1024]}
    data["deep-no-depths"] = {"blocks": {"1": 0.1}, "deep": {"1": 0.2}}
    data["deep-not-a-dict"] = {"blocks": {"1": 0.1}, "deep": [0.2], "depths": [128, 1024]}
    data["deep-three-depths"] = {"blocks": {"1": 0.1}, "deep": {"1": 0.2}, "depths": [1, 2, 3]}
    calibration.store_path().write_text(json.dumps(data))
    for key in ("deep-depths-reversed", "deep-negative", "deep-no-depths", "deep-not-a-dict", "deep-three-depths"):
        assert calibration.load(key)["blocks"] == {1: 0.1} and calibration.load(key)["deep"] == {}, key
        assert calibration.load(key)["depths"] == (0, 0), key
    for key in ("bad-blocks", "negative", "bad-step", "zero-step", "not-a-dict"):
        assert calibration.load(key) is None, key
    assert calibration.load("odd-interference")["interference"] == 1.0
    assert calibration.load("provisional")["rounds"] == 12 and calibration.load("odd-rounds")["rounds"] == 0
    assert calibration.load("no-quiet-flag")["quiet"] is False and calibration.load("odd-quiet-flag")["quiet"] is False
    calibration.store_path().write_text("[1, 2]")  # valid JSON, not an object
    assert calibration.load("k1") is None


def test_the_store_keeps_the_newest_entries():
    for i in range(calibration.MAX_ENTRIES + 5):
        calibration.save(f"k{i}", {1: 0.1})
    data = json.loads(calibration.store_path().read_text())
    assert len(data) == calibration.MAX_ENTRIES
    assert "k0" not in data and f"k{calibration.MAX_ENTRIES + 4}" in data
    assert [p.name for p in calibration.store_path().parent.iterdir()] == [calibration.store_path().name]  # no temp left


def test_the_key_changes_with_the_file_and_with_what_loads_it(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(100))
    load = {"n_threads": 2, "n_gpu_layers": -1}
    base = calibration.key_for(f, load)
    assert calibration.key_for(f, dict(load)) == base
    assert calibration.key_for(f, {**load, "n_threads": 1}) != base
    assert calibration.key_for(f, {**load, "n_gpu_layers": 0}) != base
    st = os.stat(f)
    f.write_bytes(b"GGUF" + bytes(99) + b"\x01")  # same size, another header
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert calibration.key_for(f, load) != base
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(f.read_bytes())
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert calibration.key_for(copy, load) != calibration.key_for(f, load)  # another path


# -- passes that ran beside other work ------------------------------------------------------------------------
def test_a_pass_is_judged_by_the_share_of_cpu_time_its_threads_got():
    assert not calibration.disturbed(0.97)  # quiet, measured: 0.93-0.99
    assert calibration.disturbed(0.66)  # a busy loop on one of two cores
    assert not calibration.disturbed(0.85) and calibration.disturbed(0.849)
    assert calibration.judged(64 * 2**20) and not calibration.judged(64 * 2**20 - 1)  # tiny models: wake-ups dominate
    assert calibration.judged_share(0.5, 64 * 2**20) == 0.5 and calibration.judged_share(0.5, 64 * 2**20 - 1) == 1.0


def test_the_median_is_of_the_undisturbed_passes_and_says_whether_there_were_enough():
    passes = [(0.080, 0.97), (0.200, 0.60), (0.084, 0.95), (0.240, 0.62), (0.090, 0.96)]
    assert calibration.undisturbed_median(passes, 3) == (pytest.approx(0.084), True)
    assert calibration.undisturbed_median(passes, 4) == (pytest.approx(0.084), False)
    assert calibration.undisturbed_median(passes[:2], 1) == (pytest.approx(0.080), True)
    busy = [(0.200, 0.60), (0.240, 0.62), (0.260, 0.5)]
    assert calibration.undisturbed_median(busy, 1) == (pytest.approx(0.240), False)  # all of them, not kept as quiet


def test_a_calibration_kept_from_a_busy_machine_is_used_as_provisional_not_measured_again(tiny):
    """A store entry measured beside other work (quiet: false) is used as it is, provisional: a busy laptop
    measured again at every launch, and the first reply waited for it (tests/engine/decoding/
    test_calibration_provisional.py: how rounds settle it)."""
    first = open_session(tiny, drafter=False, n_threads=1)
    key = first._key(first.target)
    first.close()
    entry = calibration.load(key)
    assert entry["quiet"] is True  # tiny passes are too short to be judged: quiet
    calibration.save(key, entry["blocks"], quiet=False)
    second = open_session(tiny, drafter=False, n_threads=1)
    try:
        assert second.target.passes == 0 and second.kept_calibration == [tiny["target"].name]
        assert second.provisional_calibration == [tiny["target"].name]
    finally:
        second.close()
    assert calibration.load(key)["quiet"] is False  # no rounds ran: still provisional


def test_the_real_target_is_measured_at_two_depths_and_both_are_kept(real_pair, monkeypatch):
    """A model large enough to judge gets its shape again 1,024 tokens in (CostModel.shape reads a reply's
    depth off the line through the two); the tiny models keep one depth. Nothing here is a timing: what was
    measured, where, and that the next load reads it back unmeasured."""
    from engine.decoding.measure import DEEP_DEPTH, DEEP_SIZES, PROBE_DEPTH

    # Whether a pass ran undisturbed is the test's to say, not the machine's: every pass reads as quiet, so
    # what is kept does not depend on other work beside the test (the busy case has its own test above).
    monkeypatch.setattr(calibration, "judged_share", lambda share, size: 1.0)
    target, _ = real_pair
    load = LoadSettings(n_ctx=2048)
    first = Session(target, None, target_load=load)
    try:
        assert first.costs.depths == (PROBE_DEPTH, DEEP_DEPTH)
        assert sorted(first.costs.deep.by_size) == list(DEEP_SIZES)
        measured = {n: first.costs.deep(n) for n in DEEP_SIZES}
    finally:
        first.close()
    again = Session(target, None, target_load=load)
    try:
        assert target.name in again.kept_calibration and again.costs.depths == (PROBE_DEPTH, DEEP_DEPTH)
        assert {n: again.costs.deep(n) for n in DEEP_SIZES} == pytest.approx(measured)
    finally:
        again.close()


def test_a_tiny_model_keeps_one_depth(tiny):
    s = Session(tiny["target"], None, target_load=LoadSettings(n_ctx=2048, n_threads=1))
    try:
        assert s.costs.depths == (0, 0) and not s.costs.deep.by_size
    finally:
        s.close()


def test_the_real_drafter_is_timed_at_the_targets_two_depths_and_its_line_is_kept(real_pair, monkeypatch):
    """The drafter's step and a 16-token read are timed again where the target's deep shape was, and the
    next load reads the same line back without measuring (what was measured and where; no timing)."""
    from engine.decoding.measure import DEEP_DEPTH, PROBE_DEPTH

    # Whether a pass ran undisturbed is the test's to say, not the machine's: every pass reads as quiet, so
    # what is kept does not depend on other work beside the test (the busy case has its own test above).
    monkeypatch.setattr(calibration, "judged_share", lambda share, size: 1.0)
    target, drafter = real_pair
    load = LoadSettings(n_ctx=2048)
    first = Session(target, str(drafter), target_load=load)
    try:
        line = first.costs.draft_depth
        assert line is not None and (line.shallow, line.deep) == (PROBE_DEPTH, DEEP_DEPTH)
        assert line.step_ratio > 0 and line.block_ratio > 0
    finally:
        first.close()
    again = Session(target, str(drafter), target_load=load)
    try:
        kept = again.costs.draft_depth
        assert len(again.kept_calibration) == 2 and kept is not None
        assert (kept.shallow, kept.deep) == (line.shallow, line.deep)
        assert (kept.step_ratio, kept.block_ratio) == pytest.approx((line.step_ratio, line.block_ratio))
    finally:
        again.close()


def test_a_tiny_drafter_keeps_no_depth_line(tiny):
    s = open_session(tiny, n_ctx=2048, n_threads=1)
    try:
        assert s.draft_model is not None and s.costs.draft_depth is None
    finally:
        s.close()


def test_a_drafter_step_is_kept_only_as_undisturbed_rounds_measured_it(tiny):
    """What the next launch reads for the drafter (calibration.json, a real file) moves with rounds whose drafter
    passes ran undisturbed, never with rounds beside a busy process, however many (the test gives the rounds'
    times and shares; the file and the Session are real). Found: an app session drafting beside a test run
    wrote a 63 ms step for a drafter whose undisturbed step is 15-24 ms, and Auto never drafted again."""
    from engine.drafting.request import MODEL_KEY
    from engine.drafting.costs import RoundOutcome

    s = open_session(tiny, n_threads=1)
    try:
        key = s._key(s.draft_model)
        first = calibration.load(key)
        assert set(first["blocks"]) == {16, 64}  # the reads timed at load; the step apart
        step, read16 = first["step"], first["blocks"][16]
        for _ in range(40):  # each pass 4x slower beside other work, and no plain round to say so
            s.costs.record(RoundOutcome(k=4, drafted=4, accepted=4, draft_s=16 * step, verify_s=0.01, key=MODEL_KEY,
                                        share=0.5, draft_steps=4, draft_share=0.5, catchup_s=4 * read16,
                                        catchup_tokens=16))
        assert s.costs.draft_cost(1) == pytest.approx(4 * step, rel=0.05)  # priced now as the load makes it
        s.keep_calibration()
        kept = calibration.load(key)
        assert kept["step"] == pytest.approx(step) and kept["blocks"][16] == pytest.approx(read16)
        s.costs.record(RoundOutcome(k=4, drafted=4, accepted=4, draft_s=8 * step, verify_s=0.01, key=MODEL_KEY,
                                    draft_steps=4, draft_share=0.97))
        s.keep_calibration()
        assert calibration.load(key)["step"] == pytest.approx(step + 0.15 * (2 * step - step))
    finally:
        s.close()
    again = open_session(tiny, n_threads=1)  # the next launch takes it as kept
    try:
        assert again.draft_model.passes == 1  # the opening's read
        assert again.costs.draft_cost(1) == pytest.approx(1.15 * step)
    finally:
        again.close()


def test_a_real_reply_refines_the_kept_drafter_step(tiny):
    """The rounds of a real reply reach what is kept: the tiny models' passes are undisturbed by definition
    (calibration.judged), so drafting rounds move the kept step from what the load measured."""
    from engine.decoding.session import GenerationSettings

    open_session(tiny, n_threads=1).close()
    s = open_session(tiny, n_threads=1)
    try:
        key = s._key(s.draft_model)
        before = calibration.load(key)["step"]
        list(s.chat([{"role": "user", "content": "count to twenty"}], GenerationSettings(draft_max=3, max_tokens=24)))
        assert s.costs.quiet_drafter.step.n > 8  # seeded (8) and refined by the reply's drafting rounds
        assert calibration.load(key)["step"] == pytest.approx(s.costs.quiet_drafter.step.value)
        assert calibration.load(key)["step"] != before
    finally:
        s.close()


@pytest.fixture(scope="module")
def home_seen_by_a_module_fixture() -> str:
    from engine import paths

    return str(paths.cache_dir())


def test_fixtures_made_before_a_test_write_in_the_runs_own_home(home_seen_by_a_module_fixture):
    """Module fixtures that open sessions keep calibrations like any load: they must not keep them in the
    user's cache (tests/conftest.py gives the whole run a home of its own)."""
    import platformdirs

    assert home_seen_by_a_module_fixture != platformdirs.user_cache_dir("Draftlight", appauthor=False)
    assert "draftlight-tests-" in home_seen_by_a_module_fixture
