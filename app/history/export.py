"""A chat as Markdown (to read or share), and its full trace as JSON Lines (to analyse)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from app.history.records import Conversation, Message, Role


def to_markdown(conv: Conversation, messages: Sequence[Message]) -> str:
    out = [f"# {conv.title}", ""]
    for m in messages:
        if m.role == Role.USER:
            out += ["**You:**", "", m.text, ""]
            continue
        who = m.target + (f" with drafter {m.drafter}" if m.drafter and m.drafter != "none" else "")
        out += [f"**Draftlight** ({who}):" if who else "**Draftlight:**", "", m.text, ""]
        if m.stats is not None:
            s = m.stats
            speed = f"{s.tokens_per_s:.1f} tokens/s"
            accept = f", {s.acceptance_rate:.0%} of drafted tokens accepted" if s.drafted else ""
            out += [f"*{s.tokens} tokens, {speed}{accept}.*", ""]
    return "\n".join(out).rstrip() + "\n"


def trace_records(conv: Conversation, messages: Sequence[Message]) -> list[dict]:
    """The engine's own event stream per reply (round, tokens, done), framed by message records."""
    records: list[dict] = [{"type": "conversation", "id": conv.id, "title": conv.title}]
    for m in messages:
        records.append({"type": "message", "id": m.id, "role": m.role.value, "content": m.text,
                        "target": m.target, "drafter": m.drafter})
        if m.role != Role.ASSISTANT:
            continue
        by_round: dict[int, list] = {}
        for t in m.tokens:
            by_round.setdefault(t.round, []).append(t)
        for n in sorted(set(m.rounds) | set(by_round)):
            if n in m.rounds:
                records.append({"message": m.id, **m.rounds[n].to_dict()})
            records += [{"message": m.id, **t.to_dict()} for t in by_round.get(n, [])]
        if m.stats is not None:
            records.append({"message": m.id, "type": "done", "finish_reason": m.finish_reason.value
                            if m.finish_reason else None, "text": m.text, "stats": m.stats.to_dict()})
        elif m.error:
            records.append({"message": m.id, "type": "error", "error": m.error})
    return records


def write_markdown(path: Path, conv: Conversation, messages: Sequence[Message]) -> None:
    Path(path).write_text(to_markdown(conv, messages), encoding="utf-8")


def write_trace(path: Path, conv: Conversation, messages: Sequence[Message]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in trace_records(conv, messages):
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
