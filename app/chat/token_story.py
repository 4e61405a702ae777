"""A token's story in words: what it is, its probabilities, and its round's draft (tooltip and details panel)."""
from __future__ import annotations

import html

from app.core.theme import EXPLANATIONS, LABELS, Mark
from app.history.records import Message


def token_story(m: Message, mark: Mark, index: int, round_: int) -> str:
    """HTML; index -1 is a rejected draft shown before its correction in round `round_`."""
    r = m.rounds.get(round_)
    lines = [f"<b>{LABELS[mark]}</b> · round {round_}", f"<i>{html.escape(EXPLANATIONS[mark])}</i>"]
    if 0 <= index < len(m.tokens):
        t = m.tokens[index]
        lines.append(f"token {quote(t.text)} (id {t.token_id}), position {t.index + 1} in the reply")
        probs = [f"target p = {t.p:.3f}" if t.p is not None else "target p = –"]
        probs.append(f"drafter q = {t.q:.3f}" if t.q is not None else "drafter q = – (not drafted)")
        lines.append(" · ".join(probs))
        if t.margin is not None:
            near = " (a near tie)" if t.margin < 0.25 else ""
            lines.append(f"the target's runner-up was {t.margin:.2f} logits behind{near}")
    if r is not None:
        if r.drafted_text:
            parts = []
            for i, text in enumerate(r.drafted_text):
                q = quote(text)
                parts.append(f"✓{q}" if i < r.accepted else f"<s>✗{q}</s>")
            lines.append(f"round {round_} draft ({r.drafter}, k={r.k}): " + " ".join(parts))
            lines.append(f"kept {r.accepted} of {len(r.drafted_text)} · emitted {r.emitted}")
        elif r.looked:
            n, right = r.looked
            lines.append(f"round {round_}: no draft: the drafter caught up and guessed {right} of the reply's "
                         f"last {n} tokens as the target wrote them (Auto looks before it drafts)")
        else:
            lines.append(f"round {round_}: no draft (plain decoding)")
        doing = "reading" if r.looked else "drafting"  # a look drafts nothing
        lines.append(f"{doing} {r.draft_s * 1000:.1f} ms · verifying {r.verify_s * 1000:.1f} ms")
    return "<br>".join(lines)


def quote(text: str) -> str:
    shown = text.replace("\n", "⏎").replace("\t", "⇥")
    return f"“{html.escape(shown)}”"
