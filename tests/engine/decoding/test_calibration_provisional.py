"""A calibration measured beside other work is kept as provisional: the next launch uses it and measures nothing
(a busy laptop measured at every launch, and its first reply waited 10-15 s), the undisturbed rounds a person
runs refine it and are counted across launches, and once calibration.SETTLED_ROUNDS of them exist it is kept as
the machine's. Real llama.cpp on the tiny models, a real calibration.json; the rounds' CPU shares are given by the
test (RoundOutcome.share, as the engine's rounds report them), so nothing depends on the machine's load."""
from __future__ import annotations

import pytest

from engine.decoding.session import GenerationSettings, Session
from engine.drafting.costs import RoundOutcome
from engine.drafting.request import MODEL_KEY
from engine.llama import calibration
from engine.llama.types import LoadSettings


def open_session(tiny, drafter=True) -> Session:
    return Session(tiny["target"], str(tiny["drafter"]) if drafter else None, target_load=LoadSettings(n_threads=1))


def measured_beside_load(tiny) -> tuple[str, str, dict, dict]:
    """Both models measured once, then their entries marked as measured beside other work (what a busy launch
    keeps: calibration_busy shows the real judgement on the real pair)."""
    s = open_session(tiny)
    keys = s._key(s.target), s._key(s.draft_model)
    s.close()
    target, drafter = (calibration.load(k) for k in keys)
    calibration.save(keys[0], target["blocks"], quiet=False)
    calibration.save(keys[1], drafter["blocks"], drafter["step"], drafter["interference"], quiet=False)
    return *keys, target, drafter


def plain_round(s: Session, share: float) -> RoundOutcome:
    return RoundOutcome(k=0, drafted=0, accepted=0, draft_s=0.0, verify_s=s.costs.verify_cost(1), share=share)


def model_round(s: Session, step: float, share: float) -> RoundOutcome:
    return RoundOutcome(k=2, drafted=2, accepted=2, draft_s=2 * step, verify_s=s.costs.verify_cost(3), key=MODEL_KEY,
                        share=share, draft_steps=2, draft_share=share)


def test_a_provisional_calibration_is_used_at_launch_and_counts_undisturbed_rounds_only(tiny):
    tkey, dkey, target, drafter = measured_beside_load(tiny)
    s = open_session(tiny)
    try:
        # Nothing timed: the drafter's one pass is its read of the template's opening (Session.opening).
        assert s.target.passes == 0 and s.draft_model.passes == 1
        assert sorted(s.provisional_calibration) == sorted([tiny["target"].name, tiny["drafter"].name])
        assert s.costs.verify_cost(1) == pytest.approx(target["blocks"][1])
        for _ in range(10):
            s.costs.record(plain_round(s, share=0.5))  # beside a busy process: not counted
            s.costs.record(model_round(s, drafter["step"], share=0.5))
        for _ in range(7):
            s.costs.record(plain_round(s, share=0.97))
            s.costs.record(model_round(s, drafter["step"], share=0.97))
        s.keep_calibration()
    finally:
        s.close()
    kept_t, kept_d = calibration.load(tkey), calibration.load(dkey)
    assert (kept_t["quiet"], kept_t["rounds"]) == (False, 14)  # 7 plain + 7 drafting rounds, undisturbed
    assert (kept_d["quiet"], kept_d["rounds"]) == (False, 7)


def test_enough_undisturbed_rounds_over_launches_settle_it_as_the_machines(tiny):
    tkey, dkey, _, drafter = measured_beside_load(tiny)
    half = calibration.SETTLED_ROUNDS // 2
    for launch in range(2):
        s = open_session(tiny)
        try:
            assert s.target.passes == 0
            assert len(s.provisional_calibration) == 2  # still provisional at the second launch
            for _ in range(half):
                s.costs.record(model_round(s, drafter["step"], share=0.97))
            s.keep_calibration()
        finally:
            s.close()
        kept = calibration.load(tkey)
        if launch == 0:
            assert (kept["quiet"], kept["rounds"]) == (False, half)
    assert calibration.load(tkey)["quiet"] is True and calibration.load(dkey)["quiet"] is True
    third = open_session(tiny)
    try:
        assert third.target.passes == 0 and third.provisional_calibration == []
    finally:
        third.close()


def test_a_real_reply_refines_and_counts_toward_settling(tiny):
    """The tiny models' passes are too short to be judged (calibration.judged): every round of a real reply
    counts as undisturbed."""
    tkey, _, _, _ = measured_beside_load(tiny)
    s = open_session(tiny, drafter=False)
    try:
        events = list(s.chat([{"role": "user", "content": "hello"}], GenerationSettings(draft_max=0, max_tokens=6)))
    finally:
        s.close()
    rounds = events[-1].stats.rounds
    kept = calibration.load(tkey)
    assert rounds > 0 and kept["quiet"] is False and kept["rounds"] == rounds


def test_a_quiet_measurement_replaces_a_provisional_one(tiny):
    tkey, _, target, _ = measured_beside_load(tiny)
    s = open_session(tiny, drafter=False)
    try:
        s.calibrate_target(repeats=1, fresh=True)  # measured again, quietly (tiny passes are not judged)
    finally:
        s.close()
    kept = calibration.load(tkey)
    assert kept["quiet"] is True and kept["rounds"] == 0
