"""A reply's running totals: counted once per round in the engine, joined for a continued reply, filled in
for rounds stored before they carried them, read back from JSON. Expected values are written out here."""
from __future__ import annotations

import json

from engine.drafting.draft_choice import DraftKind
from engine.decoding.events import RoundEvent, RoundTotals, with_totals

FIRST = RoundTotals(tokens=5, rounds=2, drafted=4, accepted=3, drafting_rounds=1, draft_s=0.1, verify_s=0.2,
                    tried=(2, 1), kept=(2, 1), by_drafter={DraftKind.MODEL: 1, DraftKind.NONE: 1})
THEN = RoundTotals(tokens=3, rounds=2, drafted=3, accepted=1, drafting_rounds=2, draft_s=0.05, verify_s=0.3,
                   tried=(1, 1, 1), kept=(1, 0, 0), by_drafter={DraftKind.LOOKUP: 2})


def test_two_parts_of_a_reply_add_up_position_by_position_and_mode_by_mode():
    joined = FIRST.plus(THEN)
    assert (joined.tokens, joined.rounds, joined.drafted, joined.accepted, joined.drafting_rounds) == (8, 4, 7, 4, 3)
    assert (round(joined.draft_s, 9), round(joined.verify_s, 9)) == (0.15, 0.5)
    assert joined.tried == (3, 2, 1) and joined.kept == (3, 1, 0)  # the shorter part reads as zeros past its end
    assert joined.by_drafter == {DraftKind.MODEL: 1, DraftKind.NONE: 1, DraftKind.LOOKUP: 2}
    back = THEN.plus(FIRST)  # the longer part first
    assert back.tried == (3, 2, 1) and back.kept == (3, 1, 0)
    assert THEN.plus(THEN).by_drafter == {DraftKind.LOOKUP: 4}


def a_round(n: int, accepted: int, totals: RoundTotals | None = None) -> RoundEvent:
    return RoundEvent(round=n, k=2, drafted=(7, 8), drafted_text=("a", "b"), accepted=accepted,
                      rejected=(8,)[: 2 - accepted], rejected_text=("b",)[: 2 - accepted], emitted=accepted + 1,
                      draft_s=0.5, verify_s=1.0, drafter=DraftKind.MODEL, tokens_per_s=1.0, estimated_speedup=None,
                      totals=totals)


def test_rounds_stored_without_totals_are_counted_from_where_they_start():
    filled = with_totals([a_round(1, 2), a_round(2, 1)], start=FIRST)
    first, second = (r.totals for r in filled)
    assert (first.tokens, first.rounds, first.drafted, first.accepted) == (8, 3, 6, 5)
    assert first.tried == (3, 2) and first.kept == (3, 2)
    assert first.by_drafter == {DraftKind.MODEL: 2, DraftKind.NONE: 1}
    assert (second.tokens, second.rounds, second.accepted) == (10, 4, 6)
    assert second.tried == (4, 3) and second.kept == (4, 2)


def test_a_round_with_totals_is_kept_and_the_next_counts_on_from_it():
    own = RoundTotals(tokens=40, rounds=10, drafted=20, accepted=12, drafting_rounds=10, tried=(10, 6),
                      kept=(8, 4), by_drafter={DraftKind.MODEL: 10})
    filled = with_totals([a_round(1, 0, own), a_round(2, 2)])
    assert filled[0].totals is own
    after = filled[1].totals
    assert (after.tokens, after.rounds, after.accepted) == (43, 11, 14)
    assert after.tried == (11, 7) and after.kept == (9, 5) and after.by_drafter == {DraftKind.MODEL: 11}


def test_totals_read_back_from_json_and_from_rows_that_lack_fields():
    stored = json.loads(json.dumps(a_round(1, 2, FIRST).to_dict()))  # as a round row holds it
    assert RoundTotals.from_dict(stored["totals"]) == FIRST
    bare = RoundTotals.from_dict({"tokens": 3, "rounds": 1, "written_by_a_later_version": True})
    assert bare == RoundTotals(tokens=3, rounds=1)
    assert bare.tried == () and bare.kept == () and bare.by_drafter == {}


def test_one_round_counts_its_times_its_positions_and_its_mode():
    start = RoundTotals(draft_s=1.0, verify_s=2.0, drafting_rounds=1, tried=(1,), kept=(1,),
                        by_drafter={DraftKind.MODEL: 1})
    missed = start.after(drafted=3, accepted=0, emitted=1, draft_s=0.25, verify_s=0.5, drafter=DraftKind.MODEL)
    assert (missed.draft_s, missed.verify_s, missed.drafting_rounds) == (1.25, 2.5, 2)
    assert missed.tried == (2, 0, 0) and missed.kept == (1, 0, 0)  # only the first position was reached
    plain = missed.after(drafted=0, accepted=1, emitted=1, draft_s=0.0, verify_s=0.5, drafter=DraftKind.MODEL)
    assert plain.by_drafter == {DraftKind.MODEL: 2, DraftKind.NONE: 1}  # a round that drafted nothing is a plain one
    assert (plain.accepted, plain.drafting_rounds, plain.tried) == (0, 2, (2, 0, 0))


def test_modes_read_back_from_json_are_kinds_and_a_kind_from_a_later_version_is_left_out():
    back = RoundTotals.from_dict({"rounds": 4, "by_drafter": {"model": 2, "none": 1, "a-later-kind": 1}})
    assert back.by_drafter == {DraftKind.MODEL: 2, DraftKind.NONE: 1}
    assert all(type(k) is DraftKind for k in back.by_drafter)
