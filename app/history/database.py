"""Opening the conversation database, and what happens when it cannot be opened normally.

The database lives in the data folder (WAL journal). History is never moved or hidden for a reason
other than damage: only a file SQLite itself calls corrupt (not a database, malformed, a failed
integrity check) is renamed aside (app.core.files.set_aside). A locked, read-only or unreadable file,
a full disk or a newer schema leave the file as it is; it is then opened read-only, or, when it
cannot be read at all, this window's chats live in memory, and the notice says which and why. A new
file gets the schema, an older one is upgraded in one transaction; a file closed cleanly skips the
full integrity check at the next start. app.history.store.ChatStore reads and writes through the
connection opened here.
"""
from __future__ import annotations

import os
import sqlite3
from enum import StrEnum
from pathlib import Path

from engine import paths

from app.core.files import set_aside

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


class OpenedDatabase:
    """The history file opened as well as it can be: `db`, in `mode`, with a `notice` when not normally."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.mode = StoreMode.WRITABLE
        self.notice: str | None = None
        """Set when the history was not opened normally: what happened and what to do."""
        self.refusal = ""
        """Read-only: why nothing can be saved (for the error of each refused write)."""
        self.db = self._open_any()

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
        self.refusal = f"{refusal}; it is open read-only"
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


def mark_closed_cleanly(db: sqlite3.Connection) -> None:
    """The last write of a window that saw no damage: the next start may skip the full check (see _closed_cleanly)."""
    try:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, '1')", (_CLEAN_KEY,))
    except sqlite3.Error:
        pass  # locked, full or damaged: the next start checks the file, which is all this costs
