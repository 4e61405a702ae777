"""Read a chat exported as JSON Lines (app.history.export) back into messages the store can import.

Both layouts are read: every branch (records name their `parent` and `shown` stamp) and the older
shown-path-only export (no `parent`: each message follows the one before). The file is a stranger's
until proven otherwise: any line that is not what an export writes stops the import with its line
number and what is wrong, before anything is saved (ChatStore.import_conversation then writes all
of it in one transaction). Records of a type this version does not know are skipped.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.attachments import Attachment, AttachmentKind
from engine.decoding.events import FinishReason

from app.history.records import Message, Role, round_from_dict, stats_from_dict, token

MAX_BYTES = 1 << 30
"""A chat export larger than this is refused unread (a 50k-token chat exports to about 20 MB)."""
_TOKEN_FIELDS = ("index", "text", "token_id", "source", "round", "p", "q")


class ChatImportError(Exception):
    """The file is not a chat export this version can read: one sentence, with the line when there is one."""


@dataclass(frozen=True, slots=True)
class ImportedChat:
    """What a chat export holds."""

    title: str
    """The conversation's title (the file's name when the export has none)."""
    messages: list[tuple[Message, int]]
    """Every message with its shown stamp, parents before children; parent ids name earlier messages."""


def read_chat(path: Path) -> ImportedChat:
    """The chat in an export file; ChatImportError says why it cannot be read."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ChatImportError(f"{path.name} is {size / 2**30:.1f} GB: too large to be a chat export")
        with open(path, encoding="utf-8") as fh:
            return _parse(fh, path.stem)
    except UnicodeDecodeError as exc:
        raise ChatImportError(f"{path.name} is not UTF-8 text (byte {exc.start:,}): it is not a chat export") from None
    except OSError as exc:
        raise ChatImportError(f"{path.name} cannot be read: {exc.strerror or exc}") from None


def _parse(lines, fallback_title: str) -> ImportedChat:
    title = fallback_title
    messages: dict[Any, Message] = {}
    stamps: dict[Any, int] = {}
    order: list[Any] = []
    previous = None  # the older layout: each message follows the one before
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ChatImportError(f"line {n} is not JSON ({exc.msg}): this is not a chat export, or it is damaged")
        if not isinstance(r, dict):
            raise ChatImportError(f"line {n} is not a record (a JSON object): this is not a chat export")
        try:
            kind = r.get("type")
            if kind == "conversation":
                if isinstance(r.get("title"), str) and r["title"].strip():
                    title = r["title"]
            elif kind == "message":
                m, stamp = _message(r, messages, previous)
                if m.id in messages:
                    raise ValueError(f"message {m.id!r} appears twice")
                messages[m.id], stamps[m.id] = m, stamp
                order.append(m.id)
                previous = m.id
            elif kind in ("round", "token", "done", "error"):
                _event(kind, r, _owner(r, messages))
        except (ValueError, TypeError, KeyError) as exc:
            raise ChatImportError(f"line {n}: {_why(exc)}") from None
    if not messages:
        raise ChatImportError("the file holds no messages: it is not a Draftlight chat export")
    return ImportedChat(title, [(messages[k], stamps[k]) for k in order])


def _why(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"a field is missing ({exc.args[0]})"
    return str(exc) or type(exc).__name__


def _message(r: dict, known: dict[Any, Message], previous: Any) -> tuple[Message, int]:
    key = r["id"]
    if not isinstance(key, (int, str)) or isinstance(key, bool):
        raise ValueError("a message's id must be a number or a string")
    role = Role(r["role"])
    content = _text(r, "content")
    parent = r["parent"] if "parent" in r else previous
    if parent is not None and parent not in known:
        raise ValueError(f"message {key!r} follows message {parent!r}, which does not come before it")
    settings = r.get("settings") or {}
    if not isinstance(settings, dict):
        raise ValueError("a message's settings must be a JSON object")
    finish = r.get("finish_reason")
    files = r.get("attachments") or []
    if not isinstance(files, list):
        raise ValueError("a message's attachments must be a list")
    m = Message(key, role, content, _text(r, "target"), _text(r, "drafter"), created=float(r.get("created") or 0.0),
                settings=settings, error=_text(r, "error"), parent_id=parent,
                attachments=tuple(_attachment(a) for a in files), thinking=_text(r, "thinking"))
    m.finish_reason = FinishReason(finish) if finish is not None else None
    shown = r.get("shown", len(known) + 1)
    if not isinstance(shown, int) or isinstance(shown, bool):
        raise ValueError("a message's shown stamp must be a whole number")
    return m, shown


def _attachment(a: Any) -> Attachment:
    if not isinstance(a, dict):
        raise ValueError("an attached file must be a JSON object")
    size = a.get("size", 0)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError("an attached file's size must be a whole number of bytes")
    return Attachment(_text(a, "name", required=True), size, AttachmentKind(a.get("kind", "text")),
                      _text(a, "text", required=True))


def _text(r: dict, key: str, required: bool = False) -> str:
    if required and key not in r:
        raise KeyError(key)
    value = r.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be text")
    return value


def _owner(r: dict, messages: dict[Any, Message]) -> Message:
    key = r.get("message")
    m = messages.get(key) if isinstance(key, (int, str)) else None
    if m is None:
        raise ValueError(f"an event of message {key!r}, which does not come before it")
    if m.role != Role.ASSISTANT:
        raise ValueError(f"an engine event of message {key!r}, which is not a reply")
    return m


def _event(kind: str, r: dict, m: Message) -> None:
    body = {k: v for k, v in r.items() if k not in ("message", "type")}
    if kind == "round":
        event = round_from_dict(body)
        m.rounds[event.round] = event
    elif kind == "token":
        t = token(*(body[f] for f in _TOKEN_FIELDS), body.get("runner_up"), body.get("margin"))
        if t.index != len(m.tokens):
            raise ValueError(f"token {t.index} of message {m.id!r} comes where token {len(m.tokens)} belongs")
        if not isinstance(t.text, str) or not isinstance(t.token_id, int):
            raise ValueError("a token's text must be text and its id a number")
        m.tokens.append(t)
    elif kind == "done":
        m.stats = stats_from_dict(body["stats"])
        if body.get("finish_reason") is not None:
            m.finish_reason = FinishReason(body["finish_reason"])
    else:
        m.error = m.error or _text(body, "error")
