"""Read a chat exported as JSON Lines (app.history.export) back into messages the store can import.

Both layouts are read: every branch (records name their `parent` and `shown` stamp) and the older
shown-path-only export (no `parent`: each message follows the one before). The file is a stranger's
until proven otherwise: any line that is not what an export writes stops the import with its line
number and what is wrong, before anything is saved (ChatStore.import_conversation then writes all
of it in one transaction). Records of a type this version does not know are skipped.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.attachments import Attachment, AttachmentKind
from engine.decoding.events import FinishReason

from engine.decoding.reasoning import split_reply

from app.history.records import Message, Role, round_from_dict, stats_from_dict, token

MAX_BYTES = 64 * 2**20
"""A chat export larger than this is refused unread: a 50k-token chat exports to about 20 MB, and a 50 MB file
took 4.4 GB to read and show."""
MAX_TEXT_CHARS = 8 * 2**20
"""A message's text (or thinking) longer than this is not one Draftlight wrote (an attached file is read up to
this many characters; a reply is far shorter)."""
MAX_DEPTH = 8
"""A record nests lists and objects at most this deep (an export's deepest is 3: a message's settings)."""
_TOKEN_FIELDS = ("index", "text", "token_id", "source", "round", "p", "q")
_TAIL_CHARS = 4
"""A reply's text may end with a few characters no token carries (bytes of a character cut at the end)."""
PROGRESS_EVERY = 1 << 20
"""Bytes read between two progress reports."""
PROVENANCE = "provenance"
"""The settings key that marks a reply whose token record did not match its text and was set aside on import."""
UNKNOWN = "unknown"


class ChatImportError(Exception):
    """The file is not a chat export this version can read: one sentence, with the line when there is one."""


class ImportCancelled(Exception):
    """The person cancelled the import while the file was read."""


@dataclass(frozen=True, slots=True)
class ImportedChat:
    """What a chat export holds."""

    title: str
    """The conversation's title (the file's name when the export has none)."""
    messages: list[tuple[Message, int]]
    """Every message with its shown stamp, parents before children; parent ids name earlier messages."""
    unknown_provenance: tuple[Any, ...] = ()
    """Ids (as exported) of replies whose tokens did not spell their text: kept as text, tokens set aside."""


Progress = Callable[[int, int], None]
"""Called now and then with (bytes read, bytes in all)."""


def read_chat(path: Path, progress: Progress | None = None, cancel: threading.Event | None = None) -> ImportedChat:
    """The chat in an export file; ChatImportError says why it cannot be read, ImportCancelled that `cancel`
    was set meanwhile. Safe to call off the GUI thread (it touches nothing but the file)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ChatImportError(f"{path.name} is {size / 2**20:,.0f} MB: a chat export is at most "
                                  f"{MAX_BYTES // 2**20} MB, so this is not one")
        with open(path, "rb") as fh:
            return parse_lines(_counted(fh, size, progress, cancel), path.stem)
    except OSError as exc:
        raise ChatImportError(f"{path.name} cannot be read: {exc.strerror or exc}") from None


def _counted(fh, size: int, progress: Progress | None, cancel: threading.Event | None) -> Iterable[bytes]:
    done, told = 0, 0
    for line in fh:
        done += len(line)
        if done - told >= PROGRESS_EVERY:
            told = done
            if cancel is not None and cancel.is_set():
                raise ImportCancelled()
            if progress is not None:
                progress(done, size)
        yield line
    if progress is not None:
        progress(done, size)


def parse_lines(lines: Iterable[bytes | str], fallback_title: str = "Imported chat") -> ImportedChat:
    """The chat in an export's lines (bytes or text); ChatImportError names the first line that is wrong."""
    title = fallback_title
    messages: dict[Any, Message] = {}
    stamps: dict[Any, int] = {}
    lines_of: dict[Any, int] = {}
    order: list[Any] = []
    previous = None  # the older layout: each message follows the one before
    for n, line in enumerate(lines, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ChatImportError(f"line {n} is not UTF-8 text (its byte {exc.start + 1:,}): this is not a "
                                      "chat export") from None
        if not line.strip():
            continue
        r = _record(line, n)
        try:
            kind = r.get("type")
            if kind == "conversation":
                if isinstance(r.get("title"), str) and r["title"].strip():
                    title = r["title"][:200]
            elif kind == "message":
                m, stamp = _message(r, messages, previous)
                if m.id in messages:
                    raise ValueError(f"message {m.id!r} appears twice")
                messages[m.id], stamps[m.id], lines_of[m.id] = m, stamp, n
                order.append(m.id)
                previous = m.id
            elif kind in ("round", "token", "done", "error"):
                _event(kind, r, _owner(r, messages))
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
            raise ChatImportError(f"line {n}: {_why(exc)}") from None
    if not messages:
        raise ChatImportError("the file holds no messages: it is not a Draftlight chat export")
    unknown = tuple(k for k in order if _set_aside_if_untrue(messages[k]))
    return ImportedChat(title, [(messages[k], stamps[k]) for k in order], unknown)


def _record(line: str, n: int) -> dict:
    """Line `n` as a JSON object no deeper than an export's records."""
    try:
        r = json.loads(line)
    except json.JSONDecodeError as exc:
        what = exc.msg.removesuffix(" at")  # json's "Invalid control character at" names no place itself
        raise ChatImportError(f"line {n} is not JSON ({what} at column {exc.colno:,}): this is not a chat "
                              "export, or it is damaged") from None
    except RecursionError:
        raise ChatImportError(f"line {n} nests lists or objects thousands deep: this is not a chat export") from None
    if not isinstance(r, dict):
        raise ChatImportError(f"line {n} is not a record (a JSON object): this is not a chat export")
    if _depth(r) > MAX_DEPTH:
        raise ChatImportError(f"line {n} nests lists or objects more than {MAX_DEPTH} deep: this is not a chat "
                              "export")
    return r


def _depth(value: Any) -> int:
    """How deep lists and objects nest in `value` (a walk of its own, not recursion: it may be deep)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        v, d = todo.pop()
        if d > deepest:
            deepest = d
            if d > MAX_DEPTH:
                return d
        items = v.values() if isinstance(v, dict) else v
        todo.extend((x, d + 1) for x in items if isinstance(x, (dict, list)))
    return deepest


def _set_aside_if_untrue(m: Message) -> bool:
    """A reply whose tokens do not spell its text (a hand-edited export: the list cut short, or the text
    replaced) would show one thing while the model reads another: its text is kept, its tokens, rounds and
    totals are set aside and its provenance is marked unknown. True when that was done."""
    if m.role != Role.ASSISTANT or not m.tokens:
        return False
    spelled = "".join(t.text if isinstance(t.text, str) else "" for t in m.tokens)
    if _spells(spelled, m.content, m.thinking):
        return False
    m.tokens, m.rounds, m.stats = [], {}, None
    m.settings = {**m.settings, PROVENANCE: UNKNOWN}
    return True


def _spells(spelled: str, content: str, thinking: str) -> bool:
    if spelled == content or _ends_alike(spelled, content):
        return True
    for opened in (False, True):
        think, answer = split_reply(spelled, opened).split(spelled)
        if _ends_alike(answer, content) and _ends_alike(think, thinking):
            return True
    return False


def _ends_alike(spelled: str, text: str) -> bool:
    """`text` is `spelled` and at most a few characters more (a character cut at the reply's end)."""
    return text.startswith(spelled) and len(text) - len(spelled) <= _TAIL_CHARS


def _why(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"a field is missing ({exc.args[0]})"
    return str(exc) or type(exc).__name__


def _message(r: dict, known: dict[Any, Message], previous: Any) -> tuple[Message, int]:
    key = r["id"]
    if not isinstance(key, (int, str)) or isinstance(key, bool):
        raise ValueError("a message's id must be a number or a string")
    role = Role(r["role"])
    content = _text(r, "content", limit=True)
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
                attachments=tuple(_attachment(a) for a in files), thinking=_text(r, "thinking", limit=True))
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
                      _text(a, "text", required=True, limit=True))


def _text(r: dict, key: str, required: bool = False, limit: bool = False) -> str:
    if required and key not in r:
        raise KeyError(key)
    value = r.get(key, "")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be text")
    if limit and len(value) > MAX_TEXT_CHARS:
        raise ValueError(f"its {key} is {len(value):,} characters long, more than any message Draftlight writes "
                         f"({MAX_TEXT_CHARS:,})")
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
    try:
        _read_event(kind, {k: v for k, v in r.items() if k not in ("message", "type")}, m)
    except (TypeError, AttributeError) as exc:  # a field of the wrong kind deep inside the engine's record
        raise ValueError(f"this {kind} record is not as an export writes it ({exc})") from None


def _whole(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} must be a whole number")
    return value


def _read_event(kind: str, body: dict, m: Message) -> None:
    if kind == "round":
        _whole(body.get("round"), "a round's number")
        event = round_from_dict(body)
        m.rounds[event.round] = event
    elif kind == "token":
        t = token(*(body[f] for f in _TOKEN_FIELDS), body.get("runner_up"), body.get("margin"))
        _whole(t.round, "a token's round")
        if t.index != len(m.tokens):
            raise ValueError(f"token {t.index} of message {m.id!r} comes where token {len(m.tokens)} belongs")
        if not isinstance(t.text, str) or not isinstance(t.token_id, int):
            raise ValueError("a token's text must be text and its id a number")
        m.tokens.append(t)
    elif kind == "done":
        if not isinstance(body["stats"], dict):
            raise ValueError("a reply's totals must be an object")
        m.stats = stats_from_dict(body["stats"])
        if body.get("finish_reason") is not None:
            m.finish_reason = FinishReason(body["finish_reason"])
    else:
        m.error = m.error or _text(body, "error")
