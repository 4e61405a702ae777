"""After a reply, while the user reads it and writes the next message, the model drafter reads the conversation.

A second turn's first model draft (a fixed k: with the prefill; Auto: at its look) read everything its drafter
had not: on this CPU a reply decoded plainly (Auto's choice on translations and explanations) left the whole
reply and the next question to read, 100-200 tokens and 150-250 ms of the next reply's time. The drafter reads
them as soon as the reply is over (Session.read_ahead; in the app the engine thread does it after each reply,
and gives way to any request queued meanwhile). Expected tokens are written here as text through llama.cpp's
tokenizer, not derived from the engine's renderer."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app_support import install_tiny, open_window, send  # noqa: E402

from engine.drafting.draft_choice import DraftSpec  # noqa: E402
from engine.decoding.events import DoneEvent  # noqa: E402
from engine.llama.types import LoadSettings, StopRequest  # noqa: E402
from engine.decoding.session import GenerationSettings, Session  # noqa: E402
from session_reads import chatml, counted_reads  # noqa: E402

QUESTION = "hello world the model is fast"
NEXT = "python code token"


def test_the_drafter_reads_a_finished_conversation_and_the_next_reply_reads_only_its_question(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        first = [{"role": "user", "content": QUESTION}]
        events = list(s.chat(first, GenerationSettings(draft_max=0, max_tokens=6)))  # plain: the drafter reads nothing
        reply = next(e for e in events if isinstance(e, DoneEvent)).text
        assert reply and list(s.draft_model.kv) == s.opening()
        conversation = [*first, {"role": "assistant", "content": reply}]
        expected = chatml(s, f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{reply}<|im_end|>\n"
                             "<|im_start|>user\n")
        assert s.read_ahead(conversation) == len(expected)
        assert list(s.draft_model.kv) == expected
        reads = counted_reads(s)
        second = [*conversation, {"role": "user", "content": NEXT}]
        prompt = chatml(s, f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{reply}<|im_end|>\n"
                           f"<|im_start|>user\n{NEXT}<|im_end|>\n<|im_start|>assistant\n")
        assert prompt[: len(expected)] == expected
        list(s.chat(second, GenerationSettings(draft_max=2, max_tokens=4)))
        # A fixed k reads the prompt with the prefill: now only the question and the frame after it, less the last.
        assert reads[0] == len(prompt) - 1 - len(expected) < 25, (reads, len(prompt), len(expected))
    finally:
        s.close()


def test_a_stopped_read_ahead_reads_nothing_more_and_the_reply_reads_the_rest(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        conversation = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "the code is fast"}]
        stop = StopRequest()
        stop.set()  # a request came before the read began
        opening = s.opening()
        assert s.read_ahead(conversation, stop) == len(opening)  # what it held already: the template's opening
        assert list(s.draft_model.kv) == opening
        reads = counted_reads(s)
        second = [*conversation, {"role": "user", "content": NEXT}]
        prompt = s.render(second).tokens
        list(s.chat(second, GenerationSettings(draft_max=2, max_tokens=2)))
        assert reads[0] == len(prompt) - 1 - len(opening)
    finally:
        s.close()


def test_a_conversation_read_ahead_leaves_what_every_conversation_opens_with_as_it_was(tiny):
    """Reading one conversation ahead must not become the opening of the next one: after a reset (the bench's
    "as after a load") the drafter holds the template's opening again, not the conversation."""
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        opening = chatml(s, "<|im_start|>user\n")
        assert s.read_ahead([{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "ok"}]) > 20
        assert s.opening() == opening
        s.reset_state()
        assert list(s.draft_model.kv) == opening
    finally:
        s.close()


def test_the_drafter_reads_nothing_once_asked_to_stop(tiny):
    """The drafter's own read checks the stop between its passes (Session.read_ahead also has llama.cpp check it
    inside each pass)."""
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        held = list(s.draft_model.kv)
        stop = StopRequest()
        stop.set()
        s.drafter.prime([*held, *s.target.tokenize(QUESTION, add_special=False)], stop)
        assert list(s.draft_model.kv) == held
    finally:
        s.close()


def test_without_a_model_drafter_or_room_in_its_context_nothing_is_read(tiny):
    conversation = [{"role": "user", "content": QUESTION * 60}, {"role": "assistant", "content": "ok"}]
    lookup = Session(tiny["target"], DraftSpec.LOOKUP, calibrate=False)
    try:
        assert lookup.read_ahead(conversation) == 0
    finally:
        lookup.close()
    small = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_ctx=256), calibrate=False)
    try:
        assert len(chatml(small, f"<|im_start|>user\n{QUESTION * 60}<|im_end|>\n")) > small.draft_model.n_ctx == 256
        before = list(small.draft_model.kv)
        assert small.read_ahead(conversation) == 0  # no error: the reply to it says the context is full
        assert list(small.draft_model.kv) == before
        assert small.read_ahead([]) == 0
    finally:
        small.close()


def test_in_the_app_the_drafter_reads_each_finished_reply_before_the_next_question(qtbot, tiny, isolated_home):
    """Two messages typed and sent in the window, the 0-layer drafter at a fixed 4: at the second reply the
    drafter's prefill read holds only the second question; each request queued told the engine thread first."""
    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    worker = w.controller.worker
    asked = worker.asked
    first = send(qtbot, w, QUESTION)
    session = worker._session
    expected = chatml(session, f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{first.text}"
                               "<|im_end|>\n<|im_start|>user\n")
    qtbot.waitUntil(lambda: list(session.draft_model.kv) == expected, timeout=10_000)
    reads = counted_reads(session)
    send(qtbot, w, NEXT)
    prompt = chatml(session, f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{first.text}<|im_end|>\n"
                             f"<|im_start|>user\n{NEXT}<|im_end|>\n<|im_start|>assistant\n")
    assert reads[0] == len(prompt) - 1 - len(expected) < 25, (reads, len(prompt), len(expected))
    assert worker.asked == asked + 2


def test_in_the_app_a_question_sent_before_the_read_ahead_starts_is_not_kept_waiting_for_it(qtbot, tiny, isolated_home):
    """The engine thread is held between the first reply's end and its read ahead while the second question is
    typed and sent: the read ahead gives way (it would have read the first conversation, 40-odd tokens, before
    the question's reply began), and the second reply reads the whole backlog itself."""
    import threading

    from PySide6.QtCore import Qt

    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    worker = w.controller.worker
    gate, held = threading.Event(), threading.Event()

    def hold(_rid):
        held.set()
        gate.wait(20)

    worker.sig_reply_finished.connect(hold, Qt.ConnectionType.DirectConnection)  # runs on the engine thread
    try:
        first = send(qtbot, w, QUESTION)
        assert held.wait(10)
        worker.sig_reply_finished.disconnect(hold)
        session = worker._session
        reads = counted_reads(session)
        w.input.setPlainText(NEXT)
        with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=30_000):
            qtbot.keyClick(w.input, Qt.Key.Key_Return)
            gate.set()
    finally:
        gate.set()
    prompt = chatml(session, f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{first.text}<|im_end|>\n"
                             f"<|im_start|>user\n{NEXT}<|im_end|>\n<|im_start|>assistant\n")
    ahead = chatml(session, f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{first.text}<|im_end|>\n"
                            "<|im_start|>user\n")
    # The second reply's prefill read: what the fixed k's drafts left unread of the first reply, the frame and the
    # question; after a read ahead it would have been the question alone (the test above).
    assert reads[0] > len(prompt) - 1 - len(ahead), (reads, len(prompt), len(ahead))


def test_with_lookup_and_model_the_model_reads_ahead_and_gives_way_to_a_stop(tiny):
    s = Session(tiny["target"], DraftSpec(model=tiny["drafter"], lookup=True), calibrate=False)
    try:
        conversation = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "ok"}]
        expected = chatml(s, f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
                             "<|im_start|>user\n")
        stop = StopRequest()
        stop.set()
        s.drafter.prime(expected, stop)
        assert list(s.draft_model.kv) == s.opening()
        assert s.read_ahead(conversation) == len(expected) and list(s.draft_model.kv) == expected
    finally:
        s.close()


def test_after_a_launch_the_chat_shown_is_read_ahead_and_opening_another_reads_that_one(qtbot, tiny, isolated_home):
    """The app opens on the last chat: once the pair is loaded its drafter holds that chat, so the first question
    of the launch reads only itself. A chat opened from the list with the keyboard is read too, and a new
    (empty) chat leaves what the drafter holds."""
    from PySide6.QtCore import Qt

    install_tiny(tiny, isolated_home, max_tokens=8)
    w = open_window(qtbot)
    first = send(qtbot, w, QUESTION)
    qtbot.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    second = send(qtbot, w, NEXT)
    w.close()
    again = open_window(qtbot)
    session = again.controller.worker._session
    # The newest chat is shown at launch: the second one.
    newest = chatml(session, f"<|im_start|>user\n{NEXT}<|im_end|>\n<|im_start|>assistant\n{second.text}<|im_end|>\n"
                             "<|im_start|>user\n")
    qtbot.waitUntil(lambda: list(session.draft_model.kv) == newest, timeout=10_000)
    # The older chat, chosen in the list with the arrow key.
    chats = again.conversations.list
    chats.setFocus()
    qtbot.keyClick(chats, Qt.Key.Key_Down)
    older = chatml(session, f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n{first.text}<|im_end|>\n"
                            "<|im_start|>user\n")
    qtbot.waitUntil(lambda: list(session.draft_model.kv) == older, timeout=10_000)


def test_a_system_prompt_alone_is_read_ahead_with_the_start_of_the_first_question(tiny):
    """A new chat with a custom system prompt (the app's setting) shares only BOS and <|im_start|> with the
    template's opening read at load; the app reads the system turn ahead when the empty chat is shown."""
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        expected = chatml(s, "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n")
        assert s.read_ahead([{"role": "system", "content": "be brief"}]) == len(expected)
        assert list(s.draft_model.kv) == expected
    finally:
        s.close()
