"""Conversations in SQLite, with every reply token's provenance, written as it arrives.

The database lives in the data folder (WAL journal; one transaction per batch of rounds), so a
crash of the app loses nothing the window already showed. A database that SQLite cannot read,
or that fails its integrity check, is renamed aside with a timestamp and a fresh one is made.
"""
from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from engine import paths
from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent

from .records import Conversation, Message, Role, round_from_dict, stats_from_dict, token
from .settings import set_aside

FILE_NAME = "chats.sqlite3"
SCHEMA_VERSION = 2  # 2: tokens keep the greedy runner-up and margin
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
    error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
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
"""


class StoreError(Exception):
    """The database could not be written (disk full, read-only folder...): one line for the window."""


def database_path() -> Path:
    return paths.data_dir() / FILE_NAME


class ChatStore:
    """All reads and writes of conversations; used from the GUI thread only."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or database_path()
        self.notice: str | None = None
        """Set when a damaged database was moved aside at open."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = self._open()
        except sqlite3.DatabaseError as exc:
            moved = self._set_aside()
            self.notice = (
                f"The conversation database was damaged ({exc}); it was kept as {moved.name} "
                "and a new, empty one was started."
            )
            self.db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # with WAL: durable across an app crash
            db.execute("PRAGMA foreign_keys=ON")
            ok = db.execute("PRAGMA quick_check").fetchone()
            if not ok or ok[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check: {ok[0] if ok else 'no answer'}")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(f"written by a newer Draftlight (schema {row[0]})")
            elif int(row[0]) < 2:  # schema 1 had no runner-up columns: add them, keep every chat
                db.execute("ALTER TABLE tokens ADD COLUMN runner_up INTEGER")
                db.execute("ALTER TABLE tokens ADD COLUMN margin REAL")
                db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
            # Tables a damaged or foreign file may lack show up here, not mid-reply.
            for table in ("conversations", "messages", "rounds", "tokens"):
                db.execute(f"SELECT * FROM {table} LIMIT 1").fetchall()
        except BaseException:
            db.close()
            raise
        return db

    def _set_aside(self) -> Path:
        moved = set_aside(self.path)
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                side.rename(moved.with_name(moved.name + suffix))
        return moved

    def close(self) -> None:
        self.db.close()

    def _write(self, sql_batches: Sequence[tuple[str, Sequence]]) -> list[int]:
        """Run statements in one transaction; returns lastrowid of each."""
        ids = []
        try:
            self.db.execute("BEGIN IMMEDIATE")
            for sql, args in sql_batches:
                ids.append(self.db.execute(sql, args).lastrowid)
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise StoreError(f"could not save to {self.path.name}: {exc}") from None
        return ids

    # -- conversations -----------------------------------------------------------
    def conversations(self, search: str = "") -> list[Conversation]:
        if search:
            escaped = search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            like = f"%{escaped}%"
            rows = self.db.execute(
                "SELECT id, title, updated FROM conversations c WHERE title LIKE ? ESCAPE '\\' OR EXISTS "
                "(SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ? ESCAPE '\\') "
                "ORDER BY updated DESC, id DESC",
                (like, like),
            ).fetchall()
        else:
            rows = self.db.execute("SELECT id, title, updated FROM conversations ORDER BY updated DESC, id DESC").fetchall()
        return [Conversation(*r) for r in rows]

    def conversation(self, conv_id: int) -> Conversation | None:
        r = self.db.execute("SELECT id, title, updated FROM conversations WHERE id=?", (conv_id,)).fetchone()
        return Conversation(*r) if r else None

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
                    settings: dict | None = None) -> Message:
        now = time.time()
        (mid, _) = self._write([
            ("INSERT INTO messages(conversation_id, role, content, created, target, drafter, settings) "
             "VALUES (?,?,?,?,?,?,?)", (conv_id, role.value, content, now, target, drafter, json.dumps(settings or {}))),
            ("UPDATE conversations SET updated=? WHERE id=?", (now, conv_id)),
        ])
        return Message(mid, role, content, target, drafter)

    def delete_message(self, message_id: int) -> None:
        self._write([("DELETE FROM messages WHERE id=?", (message_id,))])

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

    def finish(self, message_id: int, done: DoneEvent | None, text: str, error: str = "") -> None:
        self._write([(
            "UPDATE messages SET content=?, finish_reason=?, stats=?, error=? WHERE id=?",
            (text, done.finish_reason.value if done else "error",
             json.dumps(done.stats.to_dict()) if done else None, error, message_id),
        )])

    def set_title_if_default(self, conv_id: int, title: str) -> bool:
        cur = self.conversation(conv_id)
        if cur is None or cur.title != "New chat":
            return False
        self.rename(conv_id, title)
        return True

    def messages(self, conv_id: int) -> list[Message]:
        from engine.decoding.events import FinishReason

        out: list[Message] = []
        rows = self.db.execute(
            "SELECT id, role, content, target, drafter, finish_reason, stats, error FROM messages "
            "WHERE conversation_id=? ORDER BY id", (conv_id,)
        ).fetchall()
        for mid, role, content, target, drafter, finish, stats, error in rows:
            m = Message(mid, Role(role), content, target, drafter, error=error)
            if m.role == Role.ASSISTANT:
                m.rounds = {
                    n: round_from_dict(json.loads(d))
                    for n, d in self.db.execute("SELECT round, data FROM rounds WHERE message_id=? ORDER BY round", (mid,))
                }
                m.tokens = [
                    token(*r) for r in self.db.execute(
                        "SELECT idx, text, token_id, source, round, p, q, runner_up, margin FROM tokens WHERE message_id=? ORDER BY idx", (mid,))
                ]
                if finish and finish != "error":
                    m.finish_reason = FinishReason(finish)
                    m.stats = stats_from_dict(json.loads(stats)) if stats else None
                else:
                    # A failed reply, or one a crash cut short ('finish' still NULL), keeps what it
                    # showed; it reads as cancelled from here on.
                    m.finish_reason = FinishReason.CANCELLED
                    m.content = m.content or "".join(t.text for t in m.tokens)
                    m.error = m.error or ("" if finish else "interrupted: the app closed before the reply finished")
            out.append(m)
        return out
