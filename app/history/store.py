"""Conversations in SQLite, with every reply token's provenance, written as it arrives.

The database lives in the data folder (WAL journal; one transaction per batch of rounds), so a
crash of the app loses nothing the window already showed. History is never moved or hidden for a
reason other than damage: only a file SQLite itself calls corrupt (not a database, malformed, a
failed integrity check) is renamed aside. A locked, read-only or unreadable file, a full disk or a
newer schema leave the file as it is; the store then opens it read-only, or, when it cannot be
read at all, keeps this window's chats in memory, and `notice` says which and why.

A conversation is a tree: each message names its parent (the message it follows; NULL for the
first), and messages sharing a parent are alternatives (a regenerated reply, an edited question).
Which alternative is shown is remembered per sibling group with `shown`, a per-conversation
counter stamped on a message each time it is written or chosen: in each group the highest stamp
is shown. That is one row written per choice and no invariant spanning rows (a "chosen" flag
must be cleared on every sibling in the same transaction, and a half-written or hand-edited
file could hold none or two); a new alternative is shown because it is stamped last, and
deleting the shown one falls back to the one shown before it. Each group keeps its own choice,
so stepping back to an earlier alternative brings back the branch that was last shown under it.
A conversation-wide leaf pointer would remember only one branch.
"""
from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from pathlib import Path
from typing import NamedTuple

from engine import paths
from engine.attachments import Attachment, AttachmentKind
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent

from app.history.records import Conversation, Message, Role, StoredReply, stats_from_dict
from app.core.settings import set_aside

FILE_NAME = "chats.sqlite3"
SCHEMA_VERSION = 5  # 2: tokens keep the greedy runner-up and margin; 3: messages form a tree (alternatives);
# 4: files attached to questions; 5: a reply's thinking is kept apart from its answer
BUSY_S = 1.0
"""How long a statement waits for another process's lock before it gives up (GUI thread: short)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    target TEXT NOT NULL DEFAULT '',
    drafter TEXT NOT NULL DEFAULT '',
    settings TEXT NOT NULL DEFAULT '{}',
    finish_reason TEXT,
    stats TEXT,
    error TEXT NOT NULL DEFAULT '',
    parent_id INTEGER REFERENCES messages(id),
    shown INTEGER NOT NULL DEFAULT 0,
    thinking TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(parent_id);
CREATE TABLE IF NOT EXISTS rounds (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    round INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (message_id, round)
);
CREATE TABLE IF NOT EXISTS tokens (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    text TEXT NOT NULL,
    token_id INTEGER NOT NULL,
    source TEXT NOT NULL,
    round INTEGER NOT NULL,
    p REAL,
    q REAL,
    runner_up INTEGER,
    margin REAL,
    PRIMARY KEY (message_id, idx)
);
CREATE TABLE IF NOT EXISTS attachments (
    message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    size INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    PRIMARY KEY (message_id, idx)
);
"""


_COLUMNS = {  # what this version reads; a file lacking any is not ours to write into
    "conversations": "id, title, created, updated",
    "messages": "id, conversation_id, role, content, created, target, drafter, settings, finish_reason, stats, error, "
                "parent_id, shown, thinking",
    "rounds": "message_id, round, data",
    "tokens": "message_id, idx, text, token_id, source, round, p, q, runner_up, margin",
    "attachments": "message_id, idx, name, size, kind, text",
}
_MIGRATIONS = {  # from schema N to N+1, run together with the version bump in one transaction
    1: ("ALTER TABLE tokens ADD COLUMN runner_up INTEGER", "ALTER TABLE tokens ADD COLUMN margin REAL"),
    2: ("ALTER TABLE messages ADD COLUMN parent_id INTEGER REFERENCES messages(id)",
        "ALTER TABLE messages ADD COLUMN shown INTEGER NOT NULL DEFAULT 0",
        # Each message follows the one before it in its conversation: the chat was a list.
        "UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages AS p "
        "WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id)",
        "CREATE INDEX IF NOT EXISTS messages_by_parent ON messages(parent_id)"),
    3: ("CREATE TABLE IF NOT EXISTS attachments (message_id INTEGER NOT NULL REFERENCES messages(id) ON DELETE CASCADE, "
        "idx INTEGER NOT NULL, name TEXT NOT NULL, size INTEGER NOT NULL, kind TEXT NOT NULL, text TEXT NOT NULL, "
        "PRIMARY KEY (message_id, idx))",),
    4: ("ALTER TABLE messages ADD COLUMN thinking TEXT NOT NULL DEFAULT ''",),
}


LEAF = object()
"""add_message's default parent: the last message of the shown path."""


class PathStep(NamedTuple):
    """One message of the shown path, before its text is read."""

    id: int
    parent_id: int | None
    """The message it follows (None: the first)."""
    variant: int
    """Its place among its alternatives, from 1 (oldest first)."""
    variants: int
    """How many alternatives share its parent."""


class StoreError(Exception):
    """A read or write failed (locked, disk full, read-only...): one line for the window."""


class StoreMode(StrEnum):
    """What the store could do with the history file at start-up."""

    WRITABLE = "writable"
    """The normal case."""
    READ_ONLY = "read-only"
    """History is shown, nothing is written (newer schema, read-only file)."""
    MEMORY = "memory"
    """The file could not be read: it is left alone and this window's chats live in memory only."""


class _Damaged(Exception):
    """SQLite's integrity check failed."""


class _NewerSchema(Exception):
    def __init__(self, version: int) -> None:
        super().__init__(f"schema {version}")
        self.version = version


class _Foreign(Exception):
    """A sound SQLite file, but not a Draftlight history (or missing tables and columns)."""


def is_corruption(exc: BaseException) -> bool:
    """SQLite itself says the file is damaged (as opposed to locked, read-only, full, ...)."""
    if isinstance(exc, _Damaged):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    return name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB" or "malformed" in text \
        or "not a database" in text


def reason(exc: BaseException) -> str:
    """Why a database call failed, in words a person can act on."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return "it is locked by another program, perhaps another Draftlight window"
    if name.startswith("SQLITE_READONLY") or name == "SQLITE_PERM":
        return "it is read-only (check the permissions of the file and its folder)"
    if name == "SQLITE_FULL" or "disk is full" in str(exc):
        return "the disk is full"
    if name in ("SQLITE_IOERR_WRITE", "SQLITE_IOERR_FSYNC", "SQLITE_IOERR_TRUNCATE"):
        return "the disk refused the write (it may be full, or the file over a size limit)"
    if name.startswith("SQLITE_IOERR"):
        return f"the disk reported an input/output error ({exc})"
    if name.startswith("SQLITE_CANTOPEN"):
        return "the file cannot be opened (check that the data folder exists and is writable)"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc) or type(exc).__name__


def database_path() -> Path:
    return paths.data_dir() / FILE_NAME


def _schema_version(db: sqlite3.Connection) -> int | None:
    """The file's schema version; None for an empty file (or one whose creation was cut short)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" not in tables:
        if tables:
            raise _Foreign(f"it holds other tables ({', '.join(sorted(tables)[:3])})")
        return None
    row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None:
        return None
    try:
        return int(row[0])
    except ValueError:
        raise _Foreign(f"its schema version is {row[0]!r}") from None


_CLEAN_KEY = "closed_cleanly"


def _closed_cleanly(db: sqlite3.Connection) -> bool:
    """Whether the last window to use the file closed it ('1' written on close, '0' on open).

    `PRAGMA quick_check` reads every page: on a long history (a row per token) that is a pause
    at every start on the GUI thread. It runs after a crash or a kill, or when another version
    (which does not write the flag) used the file last. A file damaged later, while closed, is
    still found: SQLite reports a malformed page when it is read, and the store handles that
    as damage found while running."""
    try:
        row = db.execute("SELECT value FROM meta WHERE key=?", (_CLEAN_KEY,)).fetchone()
    except sqlite3.OperationalError as exc:
        if is_corruption(exc):
            raise
        return False  # no meta table yet: a new or foreign file
    return row is not None and row[0] == "1"


def _mark_open(db: sqlite3.Connection) -> None:
    try:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, '0')", (_CLEAN_KEY,))
    except sqlite3.OperationalError as exc:
        if is_corruption(exc):
            raise
        # Another process holds the write lock: the flag stays as that window leaves it, and the
        # store opens as it did without one (its writes wait for the lock like any other).


def _check_columns(db: sqlite3.Connection) -> None:
    for table, columns in _COLUMNS.items():
        try:
            db.execute(f"SELECT {columns} FROM {table} LIMIT 0")
        except sqlite3.OperationalError as exc:
            if is_corruption(exc):
                raise
            raise _Foreign(str(exc)) from None


class ChatStore:
    """All reads and writes of conversations; used from the GUI thread only."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or database_path()
        self.mode = StoreMode.WRITABLE
        self.notice: str | None = None
        """Set when the history was not opened normally: what happened and what to do."""
        self._refusal = ""
        self._damage_seen = False  # then the next start must check the file: close() leaves the flag at '0'
        self.db = self._open_any()

    # -- opening -----------------------------------------------------------------------
    def _open_any(self) -> sqlite3.Connection:
        name = self.path.name
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return self._open_writable()
        except _NewerSchema as exc:
            why = (f"Your conversations were saved by a newer version of Draftlight (database schema "
                   f"{exc.version}; this version knows {SCHEMA_VERSION}). They are shown read-only and the "
                   "file was not changed; update Draftlight to continue them or start new chats.")
            return self._fall_back(why, "the conversation history was saved by a newer Draftlight")
        except Exception as exc:  # noqa: BLE001 - every failure leads to a usable store and a message
            if not is_corruption(exc):
                if isinstance(exc, _Foreign):
                    why = (f"{self.path} is not a Draftlight conversation database ({exc}). It was left as it "
                           "is; move it elsewhere and restart Draftlight to start a new history.")
                else:
                    why = (f"The conversation history ({self.path}) could not be opened for writing: "
                           f"{reason(exc)}. Nothing in it was changed.")
                return self._fall_back(why, f"{name} could not be opened for writing: {reason(exc)}")
            damage = exc
        try:
            moved = self._set_aside()
        except OSError as exc:
            return self._memory(f"The conversation database is damaged ({damage}) and could not be moved aside "
                                f"({exc.strerror or exc}). Chats in this window will not be saved.")
        self.notice = (f"The conversation database was damaged ({damage}); it was kept as {moved.name} "
                       "and a new, empty one was started.")
        try:
            return self._open_writable()
        except Exception as exc:  # noqa: BLE001
            return self._memory(f"{self.notice} The new one could not be created either ({reason(exc)}); chats "
                                "in this window will not be saved.")

    def _open_writable(self) -> sqlite3.Connection:
        if self.path.exists() and not os.access(self.path, os.W_OK):
            # SQLite opens a file it may not write read-only without a word, and a current schema
            # writes nothing at open: without this, the first failure would be the first save.
            err = sqlite3.OperationalError("attempt to write a readonly database")
            err.sqlite_errorname = "SQLITE_READONLY"
            raise err
        db = sqlite3.connect(self.path, isolation_level=None, timeout=BUSY_S, check_same_thread=True)
        try:
            db.execute("PRAGMA foreign_keys=ON")
            if not _closed_cleanly(db):
                ok = db.execute("PRAGMA quick_check").fetchone()
                if not ok or ok[0] != "ok":
                    raise _Damaged(f"integrity check: {ok[0] if ok else 'no answer'}")
            version = _schema_version(db)
            if version is not None and version > SCHEMA_VERSION:
                raise _NewerSchema(version)  # before anything is written, the journal mode included
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable across an app crash
            if version != SCHEMA_VERSION:
                self._create_or_upgrade(db)
            _check_columns(db)
            _mark_open(db)
        except BaseException:
            db.close()
            raise
        return db

    @staticmethod
    def _create_or_upgrade(db: sqlite3.Connection) -> None:
        """One transaction: a crash part-way leaves the file as it was before."""
        db.execute("BEGIN IMMEDIATE")
        try:
            version = _schema_version(db)  # again, under the lock: another window may have done it
            if version is None:
                for statement in filter(str.strip, _SCHEMA.split(";")):
                    db.execute(statement)
                db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif version < SCHEMA_VERSION:
                for step in range(version, SCHEMA_VERSION):
                    for statement in _MIGRATIONS[step]:
                        db.execute(statement)
                db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
            elif version > SCHEMA_VERSION:
                raise _NewerSchema(version)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _fall_back(self, why: str, refusal: str) -> sqlite3.Connection:
        """Read-only when the file can be read, else memory; the file itself is never touched."""
        try:
            db = self._open_read_only()
        except Exception:  # noqa: BLE001
            return self._memory(f"{why} It cannot be read now either, so chats in this window will not be saved.")
        self.mode = StoreMode.READ_ONLY
        self._refusal = f"{refusal}; it is open read-only"
        self.notice = why if "shown read-only" in why else f"{why} Your chats are shown read-only; new ones cannot be saved."
        return db

    def _open_read_only(self) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri() + "?mode=ro"
        try:
            return self._checked_read_only(uri)
        except sqlite3.Error:
            # A WAL file opened read-only needs its -shm beside it, which a folder we may not write
            # cannot hold. With no -wal file the main file holds every committed row, so reading it
            # as immutable (no locks, no -shm) shows exactly what is there.
            if Path(f"{self.path}-wal").exists():
                raise
            return self._checked_read_only(uri + "&immutable=1")

    @staticmethod
    def _checked_read_only(uri: str) -> sqlite3.Connection:
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_S, check_same_thread=True)
        try:
            db.execute("PRAGMA query_only=ON")
            version = _schema_version(db)
            if version is None or version < SCHEMA_VERSION:
                raise _Foreign("an older or empty file, which this version reads only after upgrading it")
            _check_columns(db)
        except BaseException:
            db.close()
            raise
        return db

    def _memory(self, notice: str) -> sqlite3.Connection:
        self.mode = StoreMode.MEMORY
        self.notice = notice
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=True)
        db.execute("PRAGMA foreign_keys=ON")
        self._create_or_upgrade(db)
        return db

    def _set_aside(self) -> Path:
        moved = set_aside(self.path)
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.rename(moved.with_name(moved.name + suffix))
        return moved

    def close(self) -> None:
        if self.mode == StoreMode.WRITABLE and not self._damage_seen:
            try:  # the next start may skip the full check (see _closed_cleanly)
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, '1')", (_CLEAN_KEY,))
            except sqlite3.Error:
                pass  # locked, full or damaged: the next start checks the file, which is all this costs
        self.db.close()

    @property
    def writable(self) -> bool:
        return self.mode != StoreMode.READ_ONLY

    # -- reading and writing -----------------------------------------------------------------
    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction: everything in it is written, or nothing (StoreError says why)."""
        if not self.writable:
            raise StoreError(f"could not save: {self._refusal}")
        try:
            self.db.execute("BEGIN IMMEDIATE")
            yield self.db
            self.db.execute("COMMIT")
        except BaseException as exc:
            if isinstance(exc, sqlite3.Error):
                self._damage_seen = self._damage_seen or is_corruption(exc)
            try:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite rolls back on its own when the disk refuses even that
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"could not save to {self.path.name}: {reason(exc)}") from None
            raise

    def _write(self, sql_batches: Sequence[tuple[str, Sequence]]) -> list[int]:
        """Run statements in one transaction; returns lastrowid of each."""
        with self._transaction() as db:
            return [db.execute(sql, args).lastrowid for sql, args in sql_batches]

    def _read(self, sql: str, args: Sequence = ()) -> list[tuple]:
        try:
            return self.db.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            self._damage_seen = self._damage_seen or is_corruption(exc)
            hint = " Restart Draftlight to check the file." if is_corruption(exc) else ""
            raise StoreError(f"could not read the conversation history: {reason(exc)}.{hint}") from None

    # -- conversations -----------------------------------------------------------
    def conversations(self, search: str = "") -> list[Conversation]:
        if search:
            escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
            rows = self._read(
                "SELECT id, title, updated FROM conversations c WHERE title LIKE ? ESCAPE '\\' OR EXISTS "
                "(SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ? ESCAPE '\\') OR EXISTS "
                "(SELECT 1 FROM attachments a JOIN messages m ON m.id = a.message_id WHERE m.conversation_id = c.id "
                "AND a.name LIKE ? ESCAPE '\\') ORDER BY updated DESC, id DESC",
                (like, like, like),
            )
        else:
            rows = self._read("SELECT id, title, updated FROM conversations ORDER BY updated DESC, id DESC")
        return [Conversation(*r) for r in rows]

    def conversation(self, conv_id: int) -> Conversation | None:
        rows = self._read("SELECT id, title, updated FROM conversations WHERE id=?", (conv_id,))
        return Conversation(*rows[0]) if rows else None

    def new_conversation(self, title: str = "New chat") -> Conversation:
        now = time.time()
        (cid,) = self._write([("INSERT INTO conversations(title, created, updated) VALUES (?,?,?)", (title, now, now))])
        return Conversation(cid, title, now)

    def rename(self, conv_id: int, title: str) -> None:
        self._write([("UPDATE conversations SET title=? WHERE id=?", (title, conv_id))])

    def delete(self, conv_id: int) -> None:
        self._write([("DELETE FROM conversations WHERE id=?", (conv_id,))])

    # -- messages ----------------------------------------------------------------
    def add_message(self, conv_id: int, role: Role, content: str, target: str = "", drafter: str = "",
                    settings: dict | None = None, parent_id: int | None | object = LEAF,
                    attachments: Sequence[Attachment] = (), finish_reason: FinishReason | None = None) -> Message:
        """A new message after `parent_id` (None: a first message; LEAF: the shown path's last one), with
        its attached files, in one transaction. It becomes the shown alternative among its siblings.
        `finish_reason`: a reply written whole (an edit), not streamed."""
        if parent_id is LEAF:
            path = self.shown_path(conv_id)
            parent_id = path[-1].id if path else None
        now = time.time()
        with self._transaction() as db:
            mid = db.execute(
                "INSERT INTO messages(conversation_id, role, content, created, target, drafter, settings, parent_id, "
                "shown, finish_reason) VALUES (?,?,?,?,?,?,?,?,(SELECT COALESCE(MAX(shown), 0) + 1 FROM messages "
                "WHERE conversation_id=?),?)",
                (conv_id, role.value, content, now, target, drafter, json.dumps(settings or {}), parent_id, conv_id,
                 finish_reason.value if finish_reason else None)).lastrowid
            _insert_attachments(db, mid, attachments)
            db.execute("UPDATE conversations SET updated=? WHERE id=?", (now, conv_id))
        m = Message(mid, role, content, target, drafter, created=now, settings=dict(settings or {}),
                    parent_id=parent_id, attachments=tuple(attachments))  # type: ignore[arg-type]
        m.finish_reason = finish_reason
        return m

    def delete_message(self, message_id: int) -> None:
        """Delete one message; its children move up to its parent, keeping their own branches.

        Only the message itself is lost: a question's replies, or the turns after a reply, are
        not collateral damage. When the deleted message was the shown one of its group, the child
        it showed takes its place on the shown path."""
        rows = self._read("SELECT conversation_id, parent_id FROM messages WHERE id=?", (message_id,))
        if not rows:
            return
        conv_id, parent_id = rows[0]
        groups = self._groups(conv_id)
        siblings = groups.get(parent_id if parent_id in _ids(groups) else None, [])
        children = groups.get(message_id, [])
        keep = None  # who is shown once the children join the group: restamped so that it stays so
        if children:
            shown = _shown_of(siblings)
            keep = _shown_of(children) if shown == message_id else shown
        batch: list[tuple[str, Sequence]] = [
            ("UPDATE messages SET parent_id=? WHERE parent_id=?", (parent_id, message_id)),
            ("DELETE FROM tokens WHERE message_id=?", (message_id,)),  # schema-1 files have no cascade
            ("DELETE FROM rounds WHERE message_id=?", (message_id,)),
            ("DELETE FROM attachments WHERE message_id=?", (message_id,)),
            ("DELETE FROM messages WHERE id=?", (message_id,)),
        ]
        if keep is not None:
            batch.append(_stamp(keep, conv_id))
        self._write(batch)

    def choose(self, message_id: int) -> None:
        """Show this alternative among its siblings (its own chosen descendants follow it)."""
        rows = self._read("SELECT conversation_id FROM messages WHERE id=?", (message_id,))
        if rows:
            self._write([_stamp(message_id, rows[0][0])])

    def siblings(self, message_id: int) -> list[int]:
        """The alternatives `message_id` is one of (itself included), oldest first."""
        rows = self._read("SELECT conversation_id, parent_id FROM messages WHERE id=?", (message_id,))
        if not rows:
            return []
        groups = self._groups(rows[0][0])
        parent = rows[0][1] if rows[0][1] in _ids(groups) else None
        return [mid for mid, _ in groups.get(parent, [])]

    def append(self, message_id: int, rounds: Sequence[RoundEvent], tokens: Sequence[TokenEvent]) -> None:
        """One transaction for a batch of rounds and tokens, as they arrive."""
        batch: list[tuple[str, Sequence]] = [
            ("INSERT OR REPLACE INTO rounds VALUES (?,?,?)", (message_id, r.round, json.dumps(r.to_dict())))
            for r in rounds
        ]
        batch += [
            ("INSERT OR REPLACE INTO tokens VALUES (?,?,?,?,?,?,?,?,?,?)",
             (message_id, t.index, t.text, t.token_id, t.source.value, t.round, t.p, t.q, t.runner_up, t.margin))
            for t in tokens
        ]
        if batch:
            self._write(batch)

    def finish(self, message_id: int, done: DoneEvent | None, text: str, error: str = "", thinking: str = "",
               reason: FinishReason | None = None) -> None:
        """A reply's end: its answer (`text`), its thinking apart, why it ended and its totals (with no
        `done`, why it ended is `reason`, else an error)."""
        self._write([(
            "UPDATE messages SET content=?, finish_reason=?, stats=?, error=?, thinking=? WHERE id=?",
            (text, done.finish_reason.value if done else (reason.value if reason else "error"),
             json.dumps(done.stats.to_dict()) if done else None, error, thinking, message_id),
        )])

    def set_title_if_default(self, conv_id: int, title: str) -> bool:
        cur = self.conversation(conv_id)
        if cur is None or cur.title != "New chat":
            return False
        self.rename(conv_id, title)
        return True

    def reopen(self, message_id: int) -> None:
        """A reply is being continued: until it finishes again it reads back as interrupted, its text
        made of its tokens (old and new), should the app stop before then."""
        self._write([("UPDATE messages SET content='', finish_reason=NULL, stats=NULL, error='' WHERE id=?",
                      (message_id,))])

    # -- whole conversations: fork, export, import ---------------------------------------------------
    def fork(self, conv_id: int, message_id: int, title: str) -> Conversation:
        """A new conversation holding the shown path up to `message_id`, every message copied whole
        (tokens, rounds, attached files); the original is not changed."""
        path = [step.id for step in self.shown_path(conv_id)]
        if message_id not in path:
            raise StoreError("the message to fork from is not shown in its chat any more")
        now = time.time()
        with self._transaction() as db:
            new_conv = db.execute("INSERT INTO conversations(title, created, updated) VALUES (?,?,?)",
                                  (title, now, now)).lastrowid
            parent = None
            for stamp, old in enumerate(path[: path.index(message_id) + 1], 1):
                parent = db.execute(
                    "INSERT INTO messages(conversation_id, role, content, created, target, drafter, settings, "
                    "finish_reason, stats, error, parent_id, shown, thinking) SELECT ?, role, content, created, target, "
                    "drafter, settings, finish_reason, stats, error, ?, ?, thinking FROM messages WHERE id=?",
                    (new_conv, parent, stamp, old)).lastrowid
                for table, columns in (("tokens", "idx, text, token_id, source, round, p, q, runner_up, margin"),
                                       ("rounds", "round, data"), ("attachments", "idx, name, size, kind, text")):
                    db.execute(f"INSERT INTO {table}(message_id, {columns}) SELECT ?, {columns} FROM {table} "
                               "WHERE message_id=?", (parent, old))
        return Conversation(new_conv, title, now)

    def tree(self, conv_id: int) -> list[tuple[Message, int]]:
        """Every message of a conversation, every branch, parents before children, each with its shown
        stamp (within each group of alternatives the highest is shown). A parent id naming no message
        of the conversation reads as None, as everywhere else."""
        groups = self._groups(conv_id)
        parent_of = {mid: parent for parent, group in groups.items() for mid, _ in group}
        stamps = {mid: stamp for group in groups.values() for mid, stamp in group}
        loaded = self.load(sorted(parent_of))
        out, placed = [], set()
        pending = sorted(parent_of)
        while pending:  # parents first (an id order can differ: a message moved up by a deletion)
            later = []
            for mid in pending:
                parent = parent_of[mid]
                if parent is None or parent in placed or parent not in parent_of:
                    m = loaded.get(mid)
                    if m is not None:
                        m.parent_id = parent
                        out.append((m, stamps[mid]))
                    placed.add(mid)
                else:
                    later.append(mid)
            if len(later) == len(pending):  # a loop only a hand-edited file can hold: break it at the oldest
                parent_of[later[0]] = None
            pending = later
        return out

    def import_conversation(self, title: str, messages: Sequence[tuple[Message, int]]) -> Conversation:
        """A new conversation made of `messages` (each with its shown stamp; parent ids name earlier
        messages of the list), in one transaction: all of it is saved, or nothing."""
        now = time.time()
        ids: dict[int, int] = {}
        with self._transaction() as db:
            conv = db.execute("INSERT INTO conversations(title, created, updated) VALUES (?,?,?)",
                              (title, now, now)).lastrowid
            for m, stamp in messages:
                mid = db.execute(
                    "INSERT INTO messages(conversation_id, role, content, created, target, drafter, settings, "
                    "finish_reason, stats, error, parent_id, shown, thinking) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (conv, m.role.value, m.content, m.created or now, m.target, m.drafter, json.dumps(m.settings),
                     m.finish_reason.value if m.finish_reason else ("error" if m.role == Role.ASSISTANT else None),
                     json.dumps(m.stats.to_dict()) if m.stats else None, m.error, ids.get(m.parent_id), stamp,
                     m.thinking),
                ).lastrowid
                ids[m.id] = mid
                db.executemany("INSERT INTO tokens VALUES (?,?,?,?,?,?,?,?,?,?)", [
                    (mid, t.index, t.text, t.token_id, t.source.value, t.round, t.p, t.q, t.runner_up, t.margin)
                    for t in m.tokens])
                db.executemany("INSERT INTO rounds VALUES (?,?,?)",
                               [(mid, n, json.dumps(r.to_dict())) for n, r in m.rounds.items()])
                _insert_attachments(db, mid, m.attachments)
        return Conversation(conv, title, now)

    def reply_settings(self, message_id: int) -> dict:
        """The settings a reply was made with (the app's settings JSON at the time); {} if unknown."""
        rows = self._read("SELECT settings FROM messages WHERE id=?", (message_id,))
        return _settings_dict(rows[0][0]) if rows else {}

    def _groups(self, conv_id: int) -> dict[int | None, list[tuple[int, int]]]:
        """Sibling groups by parent id (None: first messages), each [(id, shown stamp)] oldest first.

        A parent id naming no message of this conversation counts as None, and a conversation with
        no first message (a loop, only a hand-edited file can hold one) starts at its oldest."""
        rows = self._read("SELECT id, parent_id, shown FROM messages WHERE conversation_id=? ORDER BY id", (conv_id,))
        ids = {r[0] for r in rows}
        if rows and all(parent in ids for _, parent, _ in rows):
            rows[0] = (rows[0][0], None, rows[0][2])
        groups: dict[int | None, list[tuple[int, int]]] = {}
        for mid, parent, shown in rows:
            groups.setdefault(parent if parent in ids else None, []).append((mid, shown))
        return groups

    def shown_path(self, conv_id: int) -> list[PathStep]:
        """The shown conversation, first message to last, without reading any text or token."""
        groups = self._groups(conv_id)
        path: list[PathStep] = []
        seen: set[int] = set()
        parent: int | None = None
        while parent in groups:
            group = groups[parent]
            mid = _shown_of(group)
            if mid in seen:
                break  # a loop only a hand-edited file can hold
            seen.add(mid)
            path.append(PathStep(mid, parent, [g[0] for g in group].index(mid) + 1, len(group)))
            parent = mid
        return path

    def messages(self, conv_id: int) -> list[Message]:
        """The shown path: first message to last, following the shown alternative of each group,
        each with its place among its alternatives (`variant` of `variants`)."""
        path = self.shown_path(conv_id)
        loaded = self.load([step.id for step in path])
        out = []
        for step in path:
            m = loaded.get(step.id)
            if m is not None:  # None: a role this version does not know (a newer Draftlight's)
                m.parent_id, m.variant, m.variants = step.parent_id, step.variant, step.variants
                out.append(m)
        return out

    def load(self, ids: Sequence[int]) -> dict[int, Message]:
        """These messages by id (ids not found are left out); replies read their tokens and rounds when asked."""
        out: dict[int, Message] = {}
        for start in range(0, len(ids), 500):  # SQLite's limit on bound parameters
            chunk = list(ids[start:start + 500])
            marks = ",".join("?" * len(chunk))
            rows = self._read(
                "SELECT id, role, content, target, drafter, finish_reason, stats, error, created, settings, parent_id, "
                f"thinking FROM messages WHERE id IN ({marks})", chunk)
            for mid, role, content, target, drafter, finish, stats, error, created, settings, parent, thinking in rows:
                try:
                    kind = Role(role)
                except ValueError:
                    continue  # a role this version does not know (a newer Draftlight's)
                fields = dict(error=error, created=created, settings=_settings_dict(settings), parent_id=parent,
                              thinking=thinking or "")
                if kind == Role.USER:
                    out[mid] = Message(mid, kind, content, target, drafter, **fields)
                else:
                    out[mid] = self._reply(mid, content, target, drafter, finish, stats, fields)
            files: dict[int, list[Attachment]] = {}
            for mid, name, size, kind, text in self._read(
                    f"SELECT message_id, name, size, kind, text FROM attachments WHERE message_id IN ({marks}) "
                    "ORDER BY message_id, idx", chunk):
                try:
                    files.setdefault(mid, []).append(Attachment(name, size, AttachmentKind(kind), text))
                except ValueError:
                    continue  # a kind this version does not know (a newer Draftlight's)
            for mid, attached in files.items():
                if mid in out:
                    out[mid].attachments = tuple(attached)
        return out

    def _rows(self, sql: str, message_id: int) -> Callable[[], list[tuple] | None]:
        """Reads one message's rows when called; None when the history cannot be read then."""
        def read() -> list[tuple] | None:
            try:
                return self._read(sql, (message_id,))
            except StoreError:
                return None
        return read

    def _reply(self, mid: int, content: str, target: str, drafter: str, finish: str | None, stats: str | None,
               fields: dict) -> StoredReply:
        """A reply whose tokens and rounds are read when first asked for (see StoredReply)."""
        m = StoredReply(mid, Role.ASSISTANT, content, target, drafter, **fields,
                        token_rows=self._rows("SELECT idx, text, token_id, source, round, p, q, runner_up, margin "
                                              "FROM tokens WHERE message_id=? ORDER BY idx", mid),
                        round_rows=self._rows("SELECT round, data FROM rounds WHERE message_id=? ORDER BY round", mid))
        known = None
        if finish and finish != "error":
            try:
                known = FinishReason(finish)
            except ValueError:
                known = None  # a reason this version does not know: read as cut short
        if known is not None and stats:
            try:
                m.stats = stats_from_dict(json.loads(stats))
            except (ValueError, TypeError, KeyError):
                m.stats = None
        if known is not None:
            m.finish_reason = known
        else:
            # A failed reply, or one a crash cut short ('finish' still NULL), keeps what it
            # showed; it reads as cancelled from here on.
            m.finish_reason = FinishReason.CANCELLED
            m.content = m.content or "".join(t.text for t in m.tokens)
            m.error = m.error or ("" if finish else "interrupted: the app closed before the reply finished")
        return m


def _insert_attachments(db: sqlite3.Connection, message_id: int, attachments: Sequence[Attachment]) -> None:
    db.executemany("INSERT INTO attachments VALUES (?,?,?,?,?,?)",
                   [(message_id, i, a.name, a.size, a.kind.value, a.text) for i, a in enumerate(attachments)])


def _shown_of(group: Sequence[tuple[int, int]]) -> int:
    """The shown one of a sibling group: highest stamp, the newest on a tie (a migrated file's zeros)."""
    return max(group, key=lambda g: (g[1], g[0]))[0]


def _ids(groups: dict[int | None, list[tuple[int, int]]]) -> set[int]:
    return {mid for group in groups.values() for mid, _ in group}


def _stamp(message_id: int, conv_id: int) -> tuple[str, Sequence]:
    """The statement that makes `message_id` the shown one of its group."""
    return ("UPDATE messages SET shown = (SELECT COALESCE(MAX(shown), 0) + 1 FROM messages WHERE conversation_id=?) "
            "WHERE id=?", (conv_id, message_id))


def _settings_dict(text: str | None) -> dict:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
