"""A reasoning model in the window (issue 22, item 2): its thinking shows as one line that a click or a key
press opens and closes, marked token by token like the answer; it is stored apart and given back to the
template as the template wants.

The target is a scripted tiny model with a Qwen3-style chat template (tests/tiny_models.py): its reply
thinks "The **draft** is fast and the target can be slow", with both tags split across tokens, and then
answers "hello world code". The drafter writes the same script but "python" where the target says
"fast", so the reply has accepted drafts and corrections in its thinking.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import threading  # noqa: E402

import pytest  # noqa: E402
import tiny_models  # noqa: E402
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QFont, QTextCursor, QTextFormat  # noqa: E402
from app_support import REPLY_TIMEOUT_MS, install_tiny, open_window, send  # noqa: E402

from app.core.theme import LIGHT_COLOURS, Mark  # noqa: E402
from engine.decoding.events import FinishReason, TokenEvent  # noqa: E402
from engine.decoding.reasoning import split_reply  # noqa: E402
from engine.decoding.session import Session  # noqa: E402

SPACE = "\u2581"
EXTRA = ("<thi", "nk>\n", "The", SPACE + "**", "draft", "**", "\n</th", "ink>\n\n", "hello")
THINKING_PIECES = ("<thi", "nk>\n", "The", SPACE + "**", "draft", "**", SPACE + "is", SPACE + "fast", SPACE + "and",
                   SPACE + "the", SPACE + "target", SPACE + "can", SPACE + "be", SPACE + "slow")
ANSWER_PIECES = ("\n</th", "ink>\n\n", "hello", SPACE + "world", SPACE + "code")
THINKING = "The **draft** is fast and the target can be slow"
THINKING_SHOWN = "The draft is fast and the target can be slow"  # as the view renders the Markdown
ANSWER = "hello world code"


@pytest.fixture(scope="module")
def thinker(tmp_path_factory):
    folder = tmp_path_factory.mktemp("thinker")
    script = ("\n", *THINKING_PIECES, *ANSWER_PIECES)
    drafter_script = tuple(SPACE + "python" if p == SPACE + "fast" else p for p in script)
    return {
        "target": tiny_models.write_tiny_model(folder / "thinker.gguf", tiny_models.scripted(
            "thinker", script, chat_template=tiny_models.QWEN3_STYLE, extra_pieces=EXTRA)),
        "drafter": tiny_models.write_tiny_model(folder / "thinker-drafter.gguf", tiny_models.scripted(
            "thinker-drafter", drafter_script, chat_template=tiny_models.QWEN3_STYLE, extra_pieces=EXTRA)),
    }


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two #rrggbb colours."""
    def lum(c: str) -> float:
        rgb = [int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def link_position(w, text: str) -> int:
    found = w.chat.document().find(text)
    assert not found.isNull(), f"{text!r} is not in the chat"
    return found.selectionStart()


def click_at(qtbot, w, position: int) -> None:
    """A real mouse click on the character at a document position (scrolled into view first)."""
    chat = w.chat
    cur = QTextCursor(chat.document())
    cur.setPosition(position + 1)
    chat.setTextCursor(cur)
    chat.ensureCursorVisible()
    qtbot.mouseClick(chat.viewport(), Qt.MouseButton.LeftButton, pos=chat.cursorRect(cur).center())


def test_thinking_is_one_line_until_opened_by_a_click_and_closed_by_a_key(qtbot, thinker, isolated_home):
    install_tiny(thinker, isolated_home, draft_max=4)
    w = open_window(qtbot)
    reply = send(qtbot, w, "why")
    assert (reply.thinking, reply.content) == (THINKING, ANSWER)
    text = w.chat.toPlainText()
    assert "▸ Thought for " in text and f"· {len(THINKING_PIECES) + 2} tokens" in text
    assert ANSWER in text and "draft is" not in text and "<" not in text  # collapsed: only its line
    answer_tokens = [t.index for t in reply.tokens if t.index >= len(THINKING_PIECES) + 2 and t.text.strip()]
    assert sorted({f.index for f in w.chat.token_fragments()}) == answer_tokens

    click_at(qtbot, w, link_position(w, "Thought for"))
    text = w.chat.toPlainText()
    assert "▾ Thought for " in text and THINKING_SHOWN in text and text.index(THINKING_SHOWN) < text.index(ANSWER)
    assert "<" not in text.replace("‹", "")  # no piece of a tag is shown
    frags = list(w.chat.token_fragments())
    thought = [f for f in frags if f.index < len(THINKING_PIECES)]
    # Every visible thinking token is in the document with its own provenance, marked by its source...
    assert sorted({f.index for f in thought}) == [i for i in range(2, len(THINKING_PIECES))
                                                  if reply.tokens[i].text.replace("**", "")]
    for f in thought:
        assert f.mark.value == reply.tokens[f.index].source.value and f.text in reply.tokens[f.index].text
    assert {Mark.ACCEPTED, Mark.CORRECTION} <= {f.mark for f in thought}
    # ...in the thinking's muted colour where no mark sets its own, and its Markdown renders like the answer's.
    draft = next(f for f in thought if f.text == "draft")
    assert draft.format.fontWeight() == QFont.Weight.Bold
    for f in thought:  # where no mark sets a colour: muted, and on a draft's shading still 4.5:1
        colour = f.format.foreground().color().name()
        if f.mark in (Mark.TARGET, Mark.ACCEPTED):
            shaded = f.format.hasProperty(QTextFormat.Property.BackgroundBrush)
            assert colour == LIGHT_COLOURS.muted_fg.lower() or shaded
            assert colour != LIGHT_COLOURS.text_fg.lower()
            assert contrast(colour, LIGHT_COLOURS.accepted_bg if shaded else LIGHT_COLOURS.page_bg) >= 4.5

    # By keyboard: with nothing selected, Tab goes from link to link (the question's Copy, Edit, Delete, then
    # this line's); Enter on it closes the thinking, and the line stays selected, so Enter opens it again.
    w.chat.setFocus()
    w.chat.setTextCursor(QTextCursor(w.chat.document()))
    for _ in range(10):
        qtbot.keyClick(w.chat, Qt.Key.Key_Tab)
        if w.chat.textCursor().selectedText().startswith("▾ Thought"):
            break
    assert w.chat.textCursor().selectedText().startswith("▾ Thought")
    qtbot.keyClick(w.chat, Qt.Key.Key_Return)
    text = w.chat.toPlainText()
    assert "▸ Thought for " in text and "draft is" not in text and ANSWER in text
    assert w.chat.textCursor().selectedText().startswith("▸ Thought")
    qtbot.keyClick(w.chat, Qt.Key.Key_Return)
    assert THINKING_SHOWN in w.chat.toPlainText()


def test_thinking_streams_hidden_then_opened_and_is_kept_apart_for_the_next_turn(qtbot, thinker, isolated_home):
    install_tiny(thinker, isolated_home, draft_max=2)
    w = open_window(qtbot)
    gate, at = threading.Event(), threading.Event()

    def hold(_rid, event):  # the engine thread waits inside the thinking, after "target"
        if isinstance(event, TokenEvent) and event.index == THINKING_PIECES.index(SPACE + "target") and not at.is_set():
            at.set()
            gate.wait(20)

    w.controller.worker.sig_event.connect(hold, Qt.ConnectionType.DirectConnection)
    sent = []
    w.controller.replies.sig_request.connect(sent.append)
    try:
        w.input.setPlainText("why")
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: "▸ Thinking…" in w.chat.toPlainText(), timeout=REPLY_TIMEOUT_MS)
        qtbot.waitUntil(at.is_set, timeout=REPLY_TIMEOUT_MS)
        assert "draft is" not in w.chat.toPlainText()
        click_at(qtbot, w, link_position(w, "Thinking…"))  # opened while it streams
        qtbot.waitUntil(lambda: "The draft is fast and the" in w.chat.toPlainText(), timeout=REPLY_TIMEOUT_MS)
        assert "▾ Thinking…" in w.chat.toPlainText()
        with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
            gate.set()
    finally:
        gate.set()
        w.controller.worker.sig_event.disconnect(hold)
    reply = done.args[0]
    text = w.chat.toPlainText()
    assert "▾ Thought for " in text and THINKING_SHOWN in text and ANSWER in text  # it stays open once finished
    assert reply.stats.thinking_s is not None

    # The next question sends the reply as its answer with the thinking apart...
    send(qtbot, w, "and then")
    history = sent[-1].messages
    assert history[1] == {"role": "assistant", "content": ANSWER, "reasoning_content": THINKING}
    # ...and the template leaves an earlier turn's thinking out of the context.
    s = Session(thinker["target"], None, calibrate=False)
    try:
        prompt = s.render_text(list(history))
    finally:
        s.close()
    assert prompt == ("<|im_start|>user\nwhy<|im_end|>\n<|im_start|>assistant\nhello world code<|im_end|>\n"
                      "<|im_start|>user\nand then<|im_end|>\n<|im_start|>assistant\n")


def test_a_stored_reply_opens_collapsed_with_its_thinking_kept(qtbot, thinker, isolated_home):
    install_tiny(thinker, isolated_home, draft_max=4)
    w = open_window(qtbot)
    first = send(qtbot, w, "why")
    seconds = first.stats.thinking_s
    w.close()
    w2 = open_window(qtbot)
    reply = w2.controller.messages[-1]
    assert (reply.thinking, reply.content) == (THINKING, ANSWER)
    assert reply.stats.thinking_s == pytest.approx(seconds)
    text = w2.chat.toPlainText()
    assert "▸ Thought for " in text and "draft is" not in text and ANSWER in text
    click_at(qtbot, w2, link_position(w2, "Thought for"))
    assert THINKING_SHOWN in w2.chat.toPlainText()
    assert any(f.text == "draft" for f in w2.chat.token_fragments())



def test_a_fork_and_an_export_imported_again_keep_a_replys_thinking_apart(qtbot, thinker, isolated_home, tmp_path):
    from app.history.chat_import import read_chat
    from app.history.export import write_trace

    install_tiny(thinker, isolated_home, draft_max=4)
    w = open_window(qtbot)
    reply = send(qtbot, w, "why")
    store = w.controller.conversations.store
    conv = next(c for c in store.conversations() if c.id == w.controller.current_id)
    forked = store.fork(conv.id, reply.id, "forked")
    out = tmp_path / "chat.jsonl"
    write_trace(out, conv, store.tree(conv.id))
    imported = store.import_conversation("imported", read_chat(out).messages)
    for c in (forked, imported):
        copy = [m for m, _ in store.tree(c.id) if m.role.value == "assistant"]
        assert [(m.thinking, m.content) for m in copy] == [(THINKING, ANSWER)]
    # A reply stopped inside its thinking has no answer to continue from (Regenerate makes it again).
    reply.finish_reason = FinishReason.CANCELLED
    assert reply.continuable
    reply.content = ""
    assert not reply.continuable

# -- the live view, fuzzed: any Markdown in the thinking, the tags cut anywhere, opened at any time --------------
THOUGHT_PIECES = st.sampled_from(["- ", "1. ", "> ", "\n", "\n\n", "```", "```python\n", "    ", "|", " | ", "|---",
                                  "# ", "**", "*", "`", "word", " text", "é", "=", "x = 1", "[a](b)"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(THOUGHT_PIECES, max_size=40), st.lists(THOUGHT_PIECES, max_size=20), st.lists(st.integers(1, 7)),
       st.integers(-1, 30), st.booleans())
def test_a_streaming_reply_that_thinks_ends_as_a_fresh_render_whatever_its_chunks(qtbot, thinking, answer, cuts,
                                                                                   open_at, opened_by_template):
    from chat_view_support import make_view, reply, stats, user

    head = "" if opened_by_template else "<think>\n"
    text = head + "".join(thinking) + "\n</think>\n\n" + "".join(answer)
    pieces, at = [], 0
    for n in cuts:  # the text in chunks of the drawn sizes, then of two characters: tags cut anywhere
        if at < len(text):
            pieces.append(text[at:at + n])
            at += n
    pieces += [text[i:i + 2] for i in range(at, len(text), 2)]
    v = make_view(qtbot)
    live = reply(pieces, finish=None, thinking_open=opened_by_template)
    all_tokens, live.tokens = live.tokens, []
    v.show_messages([user(), live])
    for i, t in enumerate(all_tokens):
        live.tokens.append(t)
        v.reply_changed(live.id, i)
        if i == open_at:
            v.toggle_thinking(live.id)
        v.finish_rendering()
        shown = v.toPlainText()
        assert "<th" not in shown and "</" not in shown.replace("</div>", "")  # never a piece of a tag
    live.thinking, live.content = split_reply(text, opened_by_template).split(text)
    live.finish_reason, live.stats = FinishReason.STOP, stats(len(all_tokens))
    v.finish_reply(live)
    ref = make_view(qtbot)
    if live.id in v._expanded:
        ref._expanded.add(live.id)
    ref.show_messages([user(), live])
    assert v.toPlainText() == ref.toPlainText()
    assert "Thought" in v.toPlainText() and "tok/s" in v.toPlainText()
