"""A second process for the store fault tests (run by the tests; not a test).

    python tests/fault_store.py hold-write DB        holds a write lock (another Draftlight writing)
    python tests/fault_store.py hold-exclusive DB    holds the file exclusively: even reads are refused
    python tests/fault_store.py crash-migration DB   opens the store and is killed (SIGKILL) between
                                                     the schema upgrade's first and second statement
    python tests/fault_store.py fill-disk DB         opens the store, lowers RLIMIT_FSIZE just above the
                                                     files' size, then writes replies until refused

The hold modes print `held` and keep the lock until stdin closes. fill-disk prints one JSON line.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def hold(db_path: str, exclusive: bool) -> None:
    db = sqlite3.connect(db_path, isolation_level=None, timeout=10)
    if exclusive:
        db.execute("PRAGMA locking_mode=EXCLUSIVE")
    db.execute("BEGIN EXCLUSIVE")
    db.execute("UPDATE meta SET value=value WHERE key='schema'")
    print("held", flush=True)
    sys.stdin.read()
    db.execute("ROLLBACK")
    db.close()


def crash_migration(db_path: str) -> None:
    import app.history.store as store

    connect = sqlite3.connect

    def traced(*args, **kwargs):
        db = connect(*args, **kwargs)

        def trace(sql: str) -> None:  # called as each statement starts, so the first ALTER has run
            if "ADD COLUMN margin" in sql:
                print("killing", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)

        db.set_trace_callback(trace)
        return db

    store.sqlite3.connect = traced
    store.ChatStore(Path(db_path))
    print("the upgrade ran to the end", flush=True)


def fill_disk(db_path: str) -> None:
    from app.history.records import Role
    from app.history.store import ChatStore, StoreError

    store = ChatStore(Path(db_path))
    conv = store.conversations()[0]
    files = [Path(db_path + s) for s in ("", "-wal", "-shm")]
    biggest = max(f.stat().st_size for f in files if f.exists())
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (biggest + 256 * 1024, resource.RLIM_INFINITY))
    saved, error = [], None
    for i in range(10_000):
        text = f"reply {i} " + "x" * 20_000
        try:
            m = store.add_message(conv.id, Role.USER, text)
        except StoreError as exc:
            error = str(exc)
            break
        saved.append((m.id, text))
    try:
        readable = len(store.messages(conv.id))
    except StoreError as exc:
        readable = str(exc)
    store.close()
    print(json.dumps({"saved": saved, "error": error, "readable": readable}), flush=True)


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    if mode in ("hold-write", "hold-exclusive"):
        hold(path, mode == "hold-exclusive")
    elif mode == "crash-migration":
        crash_migration(path)
    elif mode == "fill-disk":
        fill_disk(path)
    else:
        sys.exit(f"unknown mode {mode}")
