"""Prompt lookup drafts from the reply, not from the chat template's frame around it.

Every turn of a conversation ends in the same frame ("<|im_end|>\\n<|im_start|>assistant\\n" in Qwen's
template): at a reply's first round lookup matched it with the previous turn's frame and drafted what the
previous reply began with. In the 5 recorded two-turn chats (resources/bench/chat_traces.jsonl) that draft
was right 0 times of 5, and in the app it showed as a correction on the first token of a reply."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app_support import install_tiny, open_window, send  # noqa: E402

from engine.drafting.draft_choice import DraftSpec  # noqa: E402
from engine.drafting.lookup import LookupDrafter  # noqa: E402
from engine.decoding.events import RoundEvent, TokenEvent  # noqa: E402
from engine.drafting.draft_choice import DraftKind  # noqa: E402
from engine.decoding.session import GenerationSettings, Session  # noqa: E402

FRAME = [90, 91, 92]  # a turn's frame for the reply, as a template writes it every turn
EARLIER = [10, 11, 12, 13]  # the previous reply
PROMPT = [1, 50, 51, *FRAME, *EARLIER, 95, 96, 52, 53, *FRAME]


def test_a_match_starts_after_the_frame_and_does_not_reach_back_into_it():
    lk = LookupDrafter()
    lk.reply_starts(len(PROMPT))
    assert lk.find(PROMPT, 4) is None  # was (3, [10, 11, 12, 13]): the frame matched the last turn's
    assert lk.find([*PROMPT, 10], 4) is None  # one token of the reply is no 2-token match
    # Two reply tokens that did follow the frame before: a match of 2, not of 5 reaching back through it.
    assert lk.find([*PROMPT, 10, 11], 4) == (2, [12, 13, 95, 96])
    assert lk.find([*PROMPT, 10, 11, 12], 4) == (3, [13, 95, 96, 52])


def test_raw_text_the_reply_continues_still_matches_at_its_first_token():
    lk = LookupDrafter()
    lk.reply_starts(None)  # a completion: the prompt's own tail is the text the reply goes on with
    assert lk.find(PROMPT, 4) == (3, [10, 11, 12, 13])
    assert lk.find([*PROMPT, 10, 11], 4) == (5, [12, 13, 95, 96])


def test_a_real_second_turn_does_not_draft_the_previous_reply_at_its_first_round(tiny):
    s = Session(tiny["target"], "lookup", calibrate=False)
    try:
        earlier = "the model is fast and the code is small and the draft is good"
        messages = [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": earlier},
                    {"role": "user", "content": "python code token"}]
        events = list(s.chat(messages, GenerationSettings(draft_max=4, max_tokens=4)))
        first = next(e for e in events if isinstance(e, RoundEvent))
        assert first.drafted == () and first.emitted == 1
        # The same tokens as raw text the reply continues: the lookup drafts at once, from the earlier frame.
        tokens = s.render(messages).tokens
        events = list(s.generate_tokens(tokens, GenerationSettings(draft_max=4, max_tokens=4)))
        first = next(e for e in events if isinstance(e, RoundEvent))
        assert first.drafted and earlier.startswith("".join(first.drafted_text).strip()), first.drafted_text
        assert [e for e in events if isinstance(e, TokenEvent)]
    finally:
        s.close()


def test_a_continued_reply_matches_within_what_it_had_written(tiny):
    """Continuing a reply (Session.chat's reply_prefix): its written part is the reply's, so the lookup
    drafts from it at the first round."""
    s = Session(tiny["target"], "lookup", calibrate=False)
    try:
        messages = [{"role": "user", "content": "say: the model is fast and the code is small"}]
        prefix = s.reply_tokens("the model is")
        events = list(s.chat(messages, GenerationSettings(draft_max=4, max_tokens=4), reply_prefix=prefix))
        first = next(e for e in events if isinstance(e, RoundEvent))
        assert first.drafter is DraftKind.LOOKUP and "".join(first.drafted_text).startswith(" fast and")
    finally:
        s.close()


def test_lookup_with_a_model_drafter_leaves_a_second_turn_s_first_round_to_the_model(tiny):
    s = Session(tiny["target"], f"lookup+{tiny['drafter']}", calibrate=False)
    try:
        messages = [{"role": "user", "content": "hello world"},
                    {"role": "assistant", "content": "the model is fast and the code is small"},
                    {"role": "user", "content": "python code token"}]
        events = list(s.chat(messages, GenerationSettings(draft_max=4, max_tokens=4)))
        first = next(e for e in events if isinstance(e, RoundEvent))
        assert first.drafter is DraftKind.MODEL and first.drafted  # was the lookup, with the last reply's opening
    finally:
        s.close()


def test_in_the_app_a_second_reply_starts_without_a_draft_of_the_first(qtbot, tiny, isolated_home):
    """The same through the window, with prompt lookup at a fixed 4: two messages typed and sent."""
    install_tiny(tiny, isolated_home, drafter=DraftSpec.LOOKUP, drafter_chosen=True, max_tokens=12)
    w = open_window(qtbot)
    first_rounds: list[RoundEvent] = []
    w.controller.worker.sig_event.connect(
        lambda _rid, e: first_rounds.append(e) if isinstance(e, RoundEvent) and e.round == 1 else None)
    send(qtbot, w, "hello world the code")
    send(qtbot, w, "python code token")
    assert [r.drafted for r in first_rounds] == [(), ()]
