"""A reasoning model's reply in two parts: its thinking, then its answer.

Qwen3-style models open a reply with `<think>`, reason, close with `</think>` and then answer.
Templates that always think open the block in the generation prompt itself, so the reply starts
inside it and only `</think>` comes. The split is made on the reply's text, not on tokens: a tag
may be one token (Qwen3's), several, or share a token with the text around it, and it may arrive
in the middle of a speculative round. A reply that never closes its thinking (stopped, cut at the
length limit) is all thinking.

The thinking is stored apart from the answer and given back to the chat template as the message's
`reasoning_content` (what Qwen3's template reads): the template decides whether earlier turns'
thinking goes back into the context (Qwen3's keeps only the turns after the last question).
"""
from __future__ import annotations

from dataclasses import dataclass

OPEN = "<think>"
CLOSE = "</think>"


@dataclass(frozen=True, slots=True)
class ReplyParts:
    """Where a reply's thinking and answer lie in its text (offsets into it)."""

    thinking: tuple[int, int] | None
    """The thinking's text (tags and the white space next to them left out); None: the reply did not think."""
    answer: int
    """Where the answer begins (after the close tag and the blank line after it). While the reply
    thinks, or may yet open a thinking block, this is the text's end: no answer yet."""
    closed: bool
    """The thinking ended with its close tag (False also when there is no thinking)."""

    def split(self, text: str) -> tuple[str, str]:
        """(thinking, answer) of `text`, the text these parts were found in."""
        thinking = text[self.thinking[0]:self.thinking[1]] if self.thinking else ""
        return thinking, text[self.answer:]


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is the start of `tag` (a tag still arriving)."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


def split_reply(text: str, opened: bool = False, final: bool = True) -> ReplyParts:
    """Find the parts of a reply's `text`. `opened`: the prompt opened the thinking block, so the reply
    starts inside it. `final`: the reply is over; while it streams (False) a tag that may still be
    arriving (a reply that so far reads "<thi", thinking that ends in "</th") is held back from both parts."""
    n = len(text)
    if opened:
        start = 0
    else:
        lead = n - len(text.lstrip())
        if text.startswith(OPEN, lead):
            start = lead + len(OPEN)
        elif not final and OPEN.startswith(text[lead:]):  # nothing yet, or the open tag still arriving
            return ReplyParts(None, n, False)
        else:
            return ReplyParts(None, 0, False)
    close = text.find(CLOSE, start)
    if close < 0:
        end = n - (0 if final else _partial_suffix(text, CLOSE))
        return ReplyParts(_trimmed(text, start, end), n, False)
    answer = close + len(CLOSE)
    while answer < n and text[answer] in " \t\r\n":
        answer += 1
    return ReplyParts(_trimmed(text, start, close), answer, True)


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    """The range less the white space at either end (the template writes "<think>\\n...\\n</think>")."""
    while start < end and text[start] in " \t\r\n":
        start += 1
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return start, end


def opens_thinking(prompt: str) -> bool:
    """The rendered prompt leaves a thinking block open: the reply starts inside it."""
    return prompt.rfind(OPEN) > prompt.rfind(CLOSE)
