"""What a session's drafter reads: its real decode calls counted, and a template's text as the tiny target's
tokenizer reads it (expected tokens written as text, not derived from the engine's renderer)."""
from __future__ import annotations

from engine.decoding.session import Session


def chatml(s: Session, text: str) -> list[int]:
    """The tiny target's template text (ChatML, no default system turn) as its tokenizer reads it, after BOS."""
    return [s.target.vocab_facts().bos, *s.target.tokenize(text, add_special=False, parse_special=True)]


def counted_reads(s: Session) -> list[int]:
    """The sizes of the drafter's real decode calls from now on."""
    reads: list[int] = []
    decode = s.draft_model.decode

    def counted(tokens, *args, **kwargs):
        reads.append(len(tokens))
        return decode(tokens, *args, **kwargs)

    s.draft_model.decode = counted
    return reads
