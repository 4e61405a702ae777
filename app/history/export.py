"""A chat as Markdown (to read or share: the shown path), and as JSON Lines (every branch, to analyse or import).

The JSON Lines trace is one record a line: the conversation, then each message followed by its reply's
engine events (round, token, done) as the engine emitted them. Every branch is written, parents before
children: each message record names its `parent` (the exported id of the message it follows, None for
a first one) and its `shown` stamp (among alternatives sharing a parent, the highest is the one shown).
Records written before branches were exported (no `parent`) read as a list, each message following the
one before (app.history.chat_import reads both).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from engine.attachments import fenced, human_size

from app.core.drafter_names import recorded_drafter
from app.history.records import Conversation, Message, Role

FORMAT = "draftlight-chat"
VERSION = 2
"""1: the shown path only (no version field); 2: every branch, with parent, shown stamp and attached files."""


def to_markdown(conv: Conversation, messages: Sequence[Message]) -> str:
    out = [f"# {conv.title}", ""]
    for m in messages:
        if m.role == Role.USER:
            out += ["**You:**", ""]
            for a in m.attachments:
                out += [f"*Attached: {a.name} ({human_size(a.size)})*", "", fenced(a), ""]
            out += [m.text, ""]
            continue
        if m.edited:
            out += ["**Draftlight** (edited by you):", "", m.text, ""]
            continue
        who = m.target + (f" with drafter {m.drafter}" if recorded_drafter(m.drafter).drafts else "")
        out += [f"**Draftlight** ({who}):" if who else "**Draftlight:**", "", m.text, ""]
        if m.stats is not None:
            s = m.stats
            speed = f"{s.tokens_per_s:.1f} tokens/s"
            accept = f", {s.acceptance_rate:.0%} of drafted tokens accepted" if s.drafted else ""
            out += [f"*{s.tokens} tokens, {speed}{accept}.*", ""]
    return "\n".join(out).rstrip() + "\n"


def trace_records(conv: Conversation, tree: Sequence[tuple[Message, int]]) -> list[dict]:
    """The engine's own event stream per reply (round, tokens, done), framed by message records, for every
    message of `tree` (each with its shown stamp, parents first: ChatStore.tree)."""
    records: list[dict] = [{"type": "conversation", "id": conv.id, "title": conv.title, "format": FORMAT,
                            "version": VERSION}]
    for m, shown in tree:
        records.append({"type": "message", "id": m.id, "role": m.role.value, "content": m.text, "thinking": m.thinking,
                        "target": m.target, "drafter": m.drafter, "parent": m.parent_id, "shown": shown,
                        "created": m.created, "settings": m.settings,
                        "finish_reason": m.finish_reason.value if m.finish_reason else None, "error": m.error,
                        "attachments": [{"name": a.name, "size": a.size, "kind": a.kind.value, "text": a.text}
                                        for a in m.attachments]})
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


def write_trace(path: Path, conv: Conversation, tree: Sequence[tuple[Message, int]]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in trace_records(conv, tree):
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
