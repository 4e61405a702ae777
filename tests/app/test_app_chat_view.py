"""The chat view on its own: Markdown with every shown character's token, messages as units, streaming,
long chats, links, copy, keyboard, find. Replies are fed token events with the text split as a BPE
tokenizer splits it (leading spaces kept on words, newlines and fences as their own tokens); what each
shown character must map to is written out by hand."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QFont, QGuiApplication, QTextCharFormat, QTextCursor, QTextFormat  # noqa: E402

from app.chat.actions import MessageAction  # noqa: E402
from app.chat.app_links import LinkKind, href as app_href  # noqa: E402
from app.chat.chat_pane import ChatPane  # noqa: E402
from app.chat.chat_view import ChatView, ViewOptions  # noqa: E402
from app.core.theme import DARK_COLOURS, LIGHT_COLOURS, Mark, mark_format  # noqa: E402
from app.history.records import Message, Role, round_from_dict, token  # noqa: E402
from engine.decoding.events import FinishReason  # noqa: E402
from tree import TESTS  # noqa: E402

#: A reply with a fence, a list and a table, as a tokenizer splits it.
from chat_view_support import TEXT, SHOWN, CODE, CREATED, stats, reply, user, make_view, merged, block_texts, anchor_position, click_link  # noqa: E402


def test_markdown_reply_shows_every_character_with_its_token(qtbot):
    v = make_view(qtbot)
    v.show_messages([user(), reply()])
    assert merged(v) == SHOWN
    text = v.toPlainText()
    assert "```" not in text and "**" not in text and "|" not in text and "- one" not in text
    blocks = block_texts(v)
    assert "Here is the code:" in blocks
    assert "def add(a, b):" in blocks and "    return a + b" in blocks  # fence lines gone, code lines kept
    # The list is a real list (Qt draws the bullets), the table a real table with a bold header row.
    doc = v.document()
    items = [b for b in (doc.findBlockByNumber(i) for i in range(doc.blockCount())) if b.textList() is not None]
    assert [b.text() for b in items] == ["one", "two"]
    frags = list(v.token_fragments())
    x = next(f for f in frags if f.text == "x")
    table = QTextCursor(doc)
    table.setPosition(x.position)
    t = table.currentTable()
    assert t is not None and (t.rows(), t.columns()) == (2, 2)
    assert [t.cellAt(r, c).firstCursorPosition().block().text() for r in range(2) for c in range(2)] == \
        ["x", "y", "1", "2"]
    assert x.format.fontWeight() == QFont.Weight.Bold and next(f for f in frags if f.text == "1").format.fontWeight() \
        != QFont.Weight.Bold
    # "the" is bold and marked as the correction it is; code is monospace.
    the = next(f for f in frags if f.index == 3)
    assert the.format.fontWeight() == QFont.Weight.Bold and the.format.fontItalic()  # bonus: italic
    assert next(f for f in frags if f.index == 10).format.fontFixedPitch()


def test_token_marks_and_syntax_colours(qtbot):
    v = make_view(qtbot)
    v.show_messages([reply()])
    for f in v.token_fragments():
        if f.text.isspace():  # whitespace-only pieces carry no decoration: no staircase at code's left edge
            assert not f.format.hasProperty(QTextFormat.Property.BackgroundBrush) and not f.format.fontUnderline()
            assert f.format.underlineStyle() == QTextCharFormat.UnderlineStyle.NoUnderline
        elif f.mark == Mark.ACCEPTED:
            assert f.format.background().color().name().upper() == LIGHT_COLOURS.accepted_bg.upper()
        elif f.mark == Mark.CORRECTION:
            assert f.format.underlineStyle() == mark_format(Mark.CORRECTION, LIGHT_COLOURS).underlineStyle()
    keyword = next(f for f in v.token_fragments() if f.text == "def")
    assert keyword.mark == Mark.CORRECTION  # token 10: its mark's colour wins over the keyword's
    assert keyword.format.foreground().color().name().upper() == LIGHT_COLOURS.correction_fg.upper()
    # Highlighting off: the same rendered text, no marks, and the code's own colours (Pygments' xcode / github-dark).
    before = v.toPlainText()
    v.set_options(ViewOptions(LIGHT_COLOURS, highlight=False))
    assert v.toPlainText() == before and merged(v) == SHOWN
    frags = {f.text: f for f in v.token_fragments()}
    assert frags["def"].format.foreground().color().name() == "#a90d91"
    assert not frags["Here"].format.hasProperty(QTextFormat.Property.BackgroundBrush)
    v.set_options(ViewOptions(DARK_COLOURS, highlight=False))
    frags = {f.text: f for f in v.token_fragments()}
    assert frags["def"].format.foreground().color().name() == "#ff7b72"
    assert frags["add"].format.foreground().color().name() == "#d2a8ff"


def test_rejected_drafts_go_before_their_correction_and_copy_stays_clean(qtbot):
    v = make_view(qtbot, ViewOptions(show_rejected=True))
    m = reply()
    v.show_messages([user(), m])
    frags = list(v.token_fragments())
    rejected = [i for i, f in enumerate(frags) if f.mark == Mark.REJECTED]
    # Corrections are tokens 2, 6, 10, ..., 38: each round's rejected "no⏎" goes before the correction's first
    # shown character (token 2's "**" is markup, so before its space); one that shows nothing (22, 30, 34) has
    # it before the next character shown, and the last (38) at the end of the reply.
    assert [frags[i + 1].index for i in rejected[:-1]] == [2, 6, 10, 14, 18, 24, 26, 31, 35]
    assert rejected[-1] == len(frags) - 1 and frags[-1].round == 38 // 4 + 1
    assert all(frags[i].text == "no⏎" and frags[i].format.fontStrikeOut() for i in rejected)
    # Copy gives the message's own text: no rejected drafts, no notes, no ⏎.
    QGuiApplication.clipboard().clear()
    click_link(qtbot, v, app_href(LinkKind.COPY, m.id))
    assert QGuiApplication.clipboard().text() == TEXT
    click_link(qtbot, v, app_href(LinkKind.COPY_CODE, m.id, 0))
    assert QGuiApplication.clipboard().text() == CODE
    click_link(qtbot, v, app_href(LinkKind.COPY, 1))
    assert QGuiApplication.clipboard().text() == "show me *add*"


def test_the_note_goes_on_its_own_line_after_code(qtbot):
    v = make_view(qtbot)
    pieces = ["```", "py", "\n", "x", " =", " 1", "\n"]  # stopped inside the fence
    v.show_messages([reply(pieces, finish=FinishReason.CANCELLED)])
    blocks = block_texts(v)
    i = blocks.index("(stopped)")
    assert blocks[i - 1] == "x = 1"
    v.show_messages([reply(pieces, finish=FinishReason.LENGTH)])
    assert "(stopped at the max tokens limit; raise it under Sampling)" in block_texts(v)


def test_header_and_footer_say_how_the_reply_was_made(qtbot):
    v = make_view(qtbot)
    m = reply(variant=2, variants=3)
    v.show_messages([user(), m])
    blocks = block_texts(v)
    header = next(b for b in blocks if b.startswith("qwen-1.5b"))
    assert header.startswith("qwen-1.5b ← qwen-0.5b  ·  k=4 · T=0.7, top-p 0.95, top-k 40, min-p 0.05 · system prompt")
    assert header.endswith("‹ 2 / 3 ›")
    foot = next(b for b in blocks if "tok/s" in b)
    assert foot.startswith("42.5 tok/s · 67% accepted  ·   helping   ·  ")  # the stats panel's word for 1.42x
    assert time.strftime("%H:%M", time.localtime(m.created)) in foot
    chip = next(f for f in _all_fragments(v) if f[0] == " helping ")
    assert chip[1].background().color().name().upper() == LIGHT_COLOURS.accepted_bg.upper()
    assert "Speculation is helping" in chip[1].toolTip()
    v.show_messages([user(), reply(settings={"draft_max": "auto", "temperature": 0})])
    assert any(b.startswith("qwen-1.5b ← qwen-0.5b  ·  Auto · greedy") for b in block_texts(v))
    v.show_messages([user(), reply(drafter="none", settings={"draft_max": 4, "temperature": 0})])
    assert any(b.startswith("qwen-1.5b alone  ·  greedy") for b in block_texts(v))


def _all_fragments(view: ChatView):
    b = view.document().begin()
    while b.isValid():
        it = b.begin()
        while not it.atEnd():
            yield it.fragment().text(), it.fragment().charFormat()
            it += 1
        b = b.next()


def test_action_links_emit_the_action_and_the_message_id(qtbot):
    v = make_view(qtbot)
    v.show_messages([user(1), reply(mid=2, variant=2, variants=3)])
    got = []
    v.action_requested.connect(lambda name, mid: got.append((name, mid)))
    for name, mid in ((MessageAction.REGENERATE, 2), (MessageAction.REGENERATE_CURRENT, 2), (MessageAction.DELETE, 2),
                      (MessageAction.PREVIOUS, 2), (MessageAction.NEXT, 2), (MessageAction.EDIT, 1),
                      (MessageAction.DELETE, 1)):
        click_link(qtbot, v, app_href(LinkKind.ACTION, name.value, mid))
    assert got == [("regenerate", 2), ("regenerate_current", 2), ("delete", 2), ("previous", 2), ("next", 2),
                   ("edit", 1), ("delete", 1)]
    # At the last alternative there is no "next"; a view without actions (Compare) has no links at all.
    v.show_messages([user(1), reply(mid=2, variant=3, variants=3)])
    with pytest.raises(AssertionError):
        anchor_position(v, app_href(LinkKind.ACTION, "next", 2))
    v.set_options(ViewOptions(actions=False))
    assert not [f for f in _all_fragments(v) if f[1].isAnchor()]


def test_action_links_are_reachable_with_the_keyboard(qtbot):
    v = make_view(qtbot)
    v.show_messages([user(1), reply(mid=2)])
    got = []
    v.action_requested.connect(lambda name, mid: got.append((name, mid)))
    v.setFocus()
    seen = []
    for _ in range(8):
        qtbot.keyClick(v, Qt.Key.Key_Tab)  # from link to link, as in a browser
        seen.append(v.textCursor().selectedText())
    # The 5th: the code block's; the reply was stopped and is the last, so it can be continued.
    assert seen == ["Copy", "Edit", "Fork", "Delete", "Copy", "Copy", "Continue", "Regenerate"]
    qtbot.keyClick(v, Qt.Key.Key_Return)
    assert got == [("regenerate", 2)]


# -- streaming and long chats --------------------------------------------------------------------------------
def test_streaming_shows_the_same_as_the_finished_reply(qtbot):
    v = make_view(qtbot)
    live = reply(finish=None)
    all_tokens, live.tokens = live.tokens, []
    v.show_messages([user(), live])
    for start in range(0, len(all_tokens), 3):
        batch = all_tokens[start:start + 3]
        live.tokens.extend(batch)
        v.reply_changed(live.id, start)
        qtbot.waitUntil(lambda: v.complete, timeout=2000)  # drawn as it is announced
        if start == 18:  # tokens 0-20, mid-fence: the code so far, the fence line hidden already
            assert merged(v) == SHOWN[:SHOWN.index((" b", 20)) + 1] and "```" not in v.toPlainText()
    live.content, live.finish_reason, live.stats = TEXT, FinishReason.STOP, stats(len(all_tokens))
    v.finish_reply(live)
    assert merged(v) == SHOWN
    ref = make_view(qtbot)
    ref.show_messages([user(), live])
    assert v.toPlainText() == ref.toPlainText()
    assert [(f.text, f.index, f.position) for f in v.token_fragments()] == \
        [(f.text, f.index, f.position) for f in ref.token_fragments()]


def test_a_long_open_fence_streams_in_with_the_colours_of_a_whole_render(qtbot):
    v = make_view(qtbot, ViewOptions(highlight=False))
    lines = [f"    total += value_{i}  # step {i}\n" if i % 9 else '    """note\n    more"""\n' for i in range(90)]
    pieces = ["```", "python", "\n", "def", " f", "():\n"] + [p for line in lines for p in (line[:10], line[10:])]
    live = reply(pieces, finish=None)
    all_tokens, live.tokens = live.tokens, []
    v.show_messages([live])
    for start in range(0, len(all_tokens), 7):
        batch = all_tokens[start:start + 7]
        live.tokens.extend(batch)
        v.reply_changed(live.id, start)
        v.finish_rendering()
    ref = make_view(qtbot, ViewOptions(highlight=False))
    ref.show_messages([reply(pieces, finish=None)])
    colours = [(f.text, f.index, f.format.foreground().color().name()) for f in ref.token_fragments()]
    assert [(f.text, f.index, f.format.foreground().color().name()) for f in v.token_fragments()] == colours
    assert v._live is not None and v._live.skip_lines > 40  # it did restart from a late line, not from the top


def test_a_long_chat_shows_the_newest_messages_first_then_the_older_ones_above(qtbot):
    v = make_view(qtbot)
    messages = []
    for i in range(40):
        messages.append(user(2 * i + 1, f"question {i}"))
        pieces = ["Answer", f" {i}", ":\n\n", "-", " item", "\n\n", "```", "py", "\n", f"x = {i}", "\n```", "\n"] * 8
        messages.append(reply(pieces, mid=2 * i + 2))
    v.show_messages(messages)
    assert not v.complete and "question 39" in v.toPlainText() and "question 0\n" not in v.toPlainText()
    sb = v.verticalScrollBar()
    qtbot.waitUntil(lambda: v.complete, timeout=20_000)
    assert sb.value() == sb.maximum()  # kept at the bottom while older messages went in above
    text = v.toPlainText()
    assert [text.index(f"question {i}\n") for i in range(40)] == sorted(text.index(f"question {i}\n") for i in range(40))
    # Positions of every message are right after the insertions above them.
    for m in (messages[1], messages[41], messages[79]):
        f = next(f for f in v.token_fragments() if f.message_id == m.id and f.index == 1)
        assert f.text == f" {(m.id - 2) // 2}" and v.fragment_at(f.position).message_id == m.id


# -- keyboard ---------------------------------------------------------------------------------------------------
def test_ctrl_up_and_down_move_between_messages(qtbot):
    v = make_view(qtbot)
    v.resize(760, 300)
    msgs = [user(1, "first"), reply(mid=2), user(3, "second"), reply(mid=4)]
    v.show_messages(msgs)
    v.setFocus()
    seen = []
    for _ in range(5):
        qtbot.keyClick(v, Qt.Key.Key_Up, Qt.KeyboardModifier.ControlModifier)
        seen.append(v.message_at(v.textCursor().position()).id)
    assert seen == [4, 3, 2, 1, 1]
    assert v.textCursor().position() == v.message_start(1)
    qtbot.keyClick(v, Qt.Key.Key_Down, Qt.KeyboardModifier.ControlModifier)
    assert v.message_at(v.textCursor().position()).id == 2
    assert 0 <= v.cursorRect(v.textCursor()).top() < 40  # the message's header is scrolled to the top
    qtbot.keyClick(v, Qt.Key.Key_Down, Qt.KeyboardModifier.ControlModifier)
    assert v.message_at(v.textCursor().position()).id == 3


def test_token_details_follow_the_text_cursor(qtbot):
    pane = make_view(qtbot, cls=ChatPane)
    v = pane.view
    v.show_messages([user(), reply()])
    pane.act_details.trigger()
    assert pane.details.isVisible()
    the = next(f for f in v.token_fragments() if f.index == 3)  # "the": a bonus token of round 1
    cur = v.textCursor()
    cur.setPosition(the.position)
    v.setTextCursor(cur)
    shown = pane.details.label.text()
    assert "bonus token" in shown and "round 1" in shown and "“the”" in shown and "kept 2 of 3" in shown
    v.setFocus()
    qtbot.keyClick(v, Qt.Key.Key_Right)  # keyboard only: the panel follows
    assert "“the”" in pane.details.label.text()
    cur.setPosition(0)
    v.setTextCursor(cur)
    assert "Put the text cursor on a reply token" in pane.details.label.text()
    pane.act_details.trigger()
    assert not pane.details.isVisible()
    assert pane.details.accessibleName() == "Token details" and v.accessibleName() == "Conversation"


def test_find_bar_finds_next_and_previous_and_esc_closes_it(qtbot):
    pane = make_view(qtbot, cls=ChatPane)
    v = pane.view
    v.show_messages([user(1, "one two"), reply(), user(3, "two again")])
    pane.act_find.trigger()
    assert pane.find_bar.isVisible() and pane.find_bar.field.hasFocus()
    qtbot.keyClicks(pane.find_bar.field, "two")
    hits = [v.textCursor().selectionStart()]
    for _ in range(3):
        qtbot.keyClick(pane.find_bar.field, Qt.Key.Key_Return)
        hits.append(v.textCursor().selectionStart())
    assert v.textCursor().selectedText() == "two"
    plain = v.toPlainText()
    where = [i for i in range(len(plain)) if plain.startswith("two", i)]
    assert len(where) == 3 and hits == where + [where[0]]  # wraps around to the first
    qtbot.keyClick(pane.find_bar.field, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert v.textCursor().selectionStart() == where[2]
    pane.find_bar.field.setText("nowhere")
    assert not pane.find_bar.find() and pane.find_bar.status.text() == "Not found"
    qtbot.keyClick(pane.find_bar.field, Qt.Key.Key_Escape)
    assert not pane.find_bar.isVisible()
    assert pane.find_bar.field.accessibleName() == "Find in chat"
    assert pane.find_bar.next.accessibleName() == "Next match"


def test_user_text_is_shown_as_typed(qtbot):
    v = make_view(qtbot)
    v.show_messages([user(1, "a *star* and\n- not a list")])
    assert "a *star* and\n- not a list" in v.toPlainText()
    assert not list(v.token_fragments())


def test_redrawing_the_same_chat_keeps_the_reader_in_place(qtbot):
    v = make_view(qtbot)
    v.resize(760, 300)
    msgs = [user(1, "first"), reply(mid=2), user(3, "second"), reply(mid=4), user(5, "third"), reply(mid=6)]
    v.show_messages(msgs)
    for _ in range(4):
        v.go_to_message(-1)
    assert v.message_at(v.textCursor().position()).id == 3
    y = v.cursorRect(v.textCursor()).top()
    v.set_options(ViewOptions(highlight=False))  # a view option: the same message stays at the top
    top = QTextCursor(v.document())
    top.setPosition(v.message_start(3))
    assert v.cursorRect(top).top() == y
    msgs[3] = reply(mid=7, variant=2, variants=2)  # another alternative of the reply below it
    v.show_messages(msgs)
    top.setPosition(v.message_start(3))
    assert v.cursorRect(top).top() == y
    v.show_messages([user(8, "another chat")])  # another chat opens at its end
    sb = v.verticalScrollBar()
    assert sb.value() == sb.maximum()


# -- a reply recorded from the real pair ----------------------------------------------------------------------
RECORDED = TESTS / "data" / "real_markdown_reply.jsonl"
RECORD_PROMPT = ("Show a Python function add(a, b) in a code block. After the code block, give two facts about it "
                 "as a bulleted list. Then add a Markdown table of two example calls with columns Call and Result.")


def load_recorded() -> Message:
    """The reply as the real Qwen2.5-Coder 1.5B / 0.5B pair streamed it (greedy, k=4), events as recorded."""
    tokens, rounds, text = [], {}, ""
    for line in RECORDED.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        kind = d.pop("type")
        if kind == "token":
            tokens.append(token(d["index"], d["text"], d["token_id"], d["source"], d["round"], d["p"], d["q"],
                                d.get("runner_up"), d.get("margin")))
        elif kind == "round":
            rounds[d["round"]] = round_from_dict(d)
        elif kind == "done":
            text = d["text"]
    return Message(2, Role.ASSISTANT, text, "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
                   "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", tokens, rounds, FinishReason.STOP, created=CREATED,
                   settings={"draft_max": 4, "temperature": 0.0})


def test_a_reply_recorded_from_the_real_pair_keeps_every_shown_character_on_its_token(qtbot):
    v = make_view(qtbot)
    m = load_recorded()
    v.show_messages([user(1, RECORD_PROMPT), m])
    # Read off the recording by hand: the token each shown piece comes from ('``' + '`\n\n' close the fence, '|'
    # and '------' are table syntax, '-' list markers: none of them is shown).
    assert merged(v) == [
        ("def", 3), (" add", 4), ("(a", 5), (",", 6), (" b", 7), ("):", 8),
        ("   ", 9), (' """', 10),
        ("   ", 11), (" Adds", 12), (" two", 13), (" numbers", 14), (" a", 15), (" and", 16), (" b", 17), (" and", 18),
        (" returns", 19), (" the", 20), (" result", 21), (".", 22),
        ("   ", 23), (' """', 24),
        ("   ", 25), (" return", 26), (" a", 27), (" +", 28), (" b", 29),
        ("The", 34), (" function", 35), (" ", 36), ("add", 37), (" takes", 39), (" two", 40), (" parameters", 41),
        (",", 42), (" ", 43), ("a", 44), (" and", 46), (" ", 47), ("b", 48), (",", 49), (" and", 50), (" returns", 51),
        (" their", 52), (" sum", 53), (".", 54),
        ("It", 56), (" is", 57), (" a", 58), (" simple", 59), (" addition", 60), (" operation", 61), (".", 62),
        ("Call", 64), ("Result", 66),
        ("add", 74), ("(", 75), ("3", 76), (",", 77), (" ", 78), ("5", 79), (")", 80), ("8", 83),
        ("add", 86), ("(", 87), ("1", 88), ("0", 89), (",", 90), (" ", 91), ("2", 92), ("0", 93), (")", 94),
        ("3", 97), ("0", 98)]
    blocks = block_texts(v)
    assert "```" not in v.toPlainText()
    code = blocks.index("def add(a, b):")
    assert blocks[code:code + 5] == ["def add(a, b):", '    """', "    Adds two numbers a and b and returns the result.",
                                     '    """', "    return a + b"]
    doc = v.document()
    items = [b.text() for b in (doc.findBlockByNumber(i) for i in range(doc.blockCount())) if b.textList()]
    assert items == ["The function add takes two parameters, a and b, and returns their sum.",
                     "It is a simple addition operation."]
    cur = QTextCursor(doc)
    cur.setPosition(next(f for f in v.token_fragments() if f.index == 64).position)
    t = cur.currentTable()
    assert [[t.cellAt(r, c).firstCursorPosition().block().text() for c in range(2)] for r in range(3)] == \
        [["Call", "Result"], ["add(3, 5)", "8"], ["add(10, 20)", "30"]]
    # Each correction's rejected draft goes before the next character shown from it on.
    v.set_options(ViewOptions(show_rejected=True))
    frags = list(v.token_fragments())
    after = [(f.text, next(g.index for g in frags[i:] if g.index >= 0)) for i, f in enumerate(frags)
             if f.mark == Mark.REJECTED]
    assert after == [(".⏎", 18), ("⏎⏎# Facts", 34), ("Two facts", 34), (" **Bulleted", 34), (" `a", 42),
                     (" which are", 50), (" The function is defined", 56), ("'s a simple addition", 57),
                     ("- Two facts about", 64), ("----------|⏎", 74), (" `add", 74), (")", 93)]
    click_link(qtbot, v, app_href(LinkKind.COPY, m.id))
    assert QGuiApplication.clipboard().text() == m.content
    click_link(qtbot, v, app_href(LinkKind.COPY_CODE, m.id, 0))
    assert QGuiApplication.clipboard().text() == \
        'def add(a, b):\n    """\n    Adds two numbers a and b and returns the result.\n    """\n    return a + b\n'


def record(target: Path, draft: Path) -> None:
    """Writes RECORDED from a real run: `python tests/app/test_app_chat_view.py TARGET.gguf DRAFT.gguf`."""
    from engine.decoding.events import DoneEvent
    from engine.decoding.session import GenerationSettings, Session
    from engine.llama.types import LoadSettings

    s = Session(target, str(draft), target_load=LoadSettings(n_threads=2))
    try:
        events = list(s.chat([{"role": "user", "content": RECORD_PROMPT}], GenerationSettings(draft_max=4, max_tokens=300)))
    finally:
        s.close()
    RECORDED.parent.mkdir(exist_ok=True)
    with open(RECORDED, "w", encoding="utf-8") as fh:
        for e in events:
            d = {"type": "done", "text": e.text} if isinstance(e, DoneEvent) else {**e.to_dict(), "type": e.type}
            fh.write(json.dumps(d, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    record(Path(sys.argv[1]), Path(sys.argv[2]))


def test_links_a_reply_writes_with_the_apps_own_schemes_are_only_content(qtbot):
    """A model wrote the reply: its `action:delete:41` and `copy:2` links must do nothing the app's
    own links do; a real mouse click on each."""
    pieces = ["See ", "[Details](action:delete:1)", " and ", "[copy](copy:1)", " or ", "[run](javascript:alert(1))", "."]
    m = reply(pieces, mid=2, finish=FinishReason.STOP)
    v = make_view(qtbot)
    v.show_messages([user(), m])
    actions, refused = [], []
    v.action_requested.connect(lambda name, mid: actions.append((name, mid)))
    v.link_refused.connect(refused.append)
    QGuiApplication.clipboard().setText("untouched")
    for target in ("action:delete:1", "copy:1"):
        click_link(qtbot, v, target)
    assert actions == [] and QGuiApplication.clipboard().text() == "untouched"
    assert refused == ["action:delete:1", "copy:1"]
    # The app's own Delete link on the same message still works, on its own channel.
    click_link(qtbot, v, app_href(LinkKind.ACTION, MessageAction.DELETE.value, m.id))
    assert actions == [(MessageAction.DELETE.value, m.id)]
