"""Replies are written by a model: whatever Markdown it writes, streamed in any chunks, the live view
survives, finishes the reply (its footer is written) and shows what a fresh render of the finished
reply shows. Hypothesis generates the replies: deep nesting, wide tables, fences, HTML, and blocks
cut off half-written."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402
from chat_view_support import make_view, reply, stats, user  # noqa: E402

from app.chat.markdown_spans import Kind, parse  # noqa: E402
from engine.decoding.events import FinishReason  # noqa: E402

PIECES = st.sampled_from([
    "> ", ">", "- ", "1. ", "* ", "  ", "\n", "\n\n", "```", "```python\n", "~~~", "    ", "|", " | ", "|---", "---|",
    "# ", "**", "*", "_", "`", "[", "](", ")", "<div>", "</div>", "<b>", "&amp;", "\\", "word", " text", "é", "🙂",
    "action:delete:1", "copy:2", "http://x.test", "\r\n", "\t", "=", "-", "+",
])


def chunked(pieces: list[str]) -> list[str]:
    return [p for p in pieces if p]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(PIECES, min_size=1, max_size=120), st.integers(1, 9))
@example(["```", "  "], 1)  # a fence whose info string is only blanks: it raised IndexError
def test_the_live_view_survives_any_reply_and_ends_as_a_fresh_render(qtbot, pieces, step):
    pieces = chunked(pieces)
    v = make_view(qtbot)
    live = reply(pieces, finish=None)
    all_tokens, live.tokens = live.tokens, []
    v.show_messages([user(), live])
    for start in range(0, len(all_tokens), step):
        batch = all_tokens[start:start + step]
        live.tokens.extend(batch)
        v.reply_changed(live.id, start)
        v.finish_rendering()
    live.content, live.finish_reason, live.stats = "".join(pieces), FinishReason.STOP, stats(len(all_tokens))
    v.finish_reply(live)
    ref = make_view(qtbot)
    ref.show_messages([user(), live])
    assert v.toPlainText() == ref.toPlainText()
    assert "tok/s" in v.toPlainText()  # the footer was written


def test_deep_quotes_stream_in_and_the_footer_is_written(qtbot):
    pieces = ["> "] * 30 + ["deep", " words", "\n\n", "after"]
    v = make_view(qtbot)
    live = reply(pieces, finish=None)
    all_tokens, live.tokens = live.tokens, []
    v.show_messages([user(), live])
    for i, t in enumerate(all_tokens):
        live.tokens.append(t)
        v.reply_changed(live.id, i)
        v.finish_rendering()
    live.content, live.finish_reason, live.stats = "".join(pieces), FinishReason.STOP, stats(len(all_tokens))
    v.finish_reply(live)
    text = v.toPlainText()
    assert "deep words" in text and "after" in text and "tok/s" in text


def test_a_table_too_wide_to_pad_reads_as_text_and_a_normal_one_stays_a_table():
    # 300 columns and 300 one-cell rows: markdown-it would pad them to 90,000 cells (1.8 KB of reply).
    header = "|" + "|".join("h" for _ in range(300)) + "|\n|" + "|".join("-" for _ in range(300)) + "|\n"
    wide = parse(header + "|x|\n" * 300)
    assert wide.blocks and all(b.kind is not Kind.TABLE for b in wide.blocks)
    normal = parse("| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 50)
    assert any(b.kind is Kind.TABLE for b in normal.blocks)
