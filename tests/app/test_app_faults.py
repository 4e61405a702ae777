"""The history under faults, with real processes: locks, a newer schema, a crash mid-upgrade, a full disk.

Only a file SQLite itself calls corrupt is set aside; everything else leaves the file untouched
and says what happened.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import hashlib  # noqa: E402
import json  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from app_support import REPLY_TIMEOUT_MS, SCHEMA_1, install_tiny, open_window, send, write_old_history  # noqa: E402

from app.history.database import SCHEMA_VERSION, StoreMode, database_path  # noqa: E402
from app.history.records import Role  # noqa: E402
from app.history.store import ChatStore, StoreError  # noqa: E402
from tree import TESTS  # noqa: E402



def make_history() -> list[tuple[str, str]]:
    """Two chats written by the store itself; returns (title, user text) of each."""
    store = ChatStore()
    chats = [("first chat", "hello there"), ("second chat", "write code")]
    for title, text in chats:
        conv = store.new_conversation(title)
        store.add_message(conv.id, Role.USER, text)
        store.add_message(conv.id, Role.ASSISTANT, f"answer to {text}")
    store.close()  # the last connection: the WAL is checkpointed into the file
    return chats


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def set_aside_files() -> list[Path]:
    return [p for p in database_path().parent.iterdir() if ".damaged" in p.name]


def damage_tables(path: Path, names: tuple[str, ...]) -> None:
    """Flip every byte of the named tables' root pages, as a failing disk would."""
    probe = sqlite3.connect(path)
    page = probe.execute("PRAGMA page_size").fetchone()[0]
    marks = ",".join("?" * len(names))
    roots = [r for (r,) in probe.execute(f"SELECT rootpage FROM sqlite_master WHERE name IN ({marks})", names)]
    probe.close()
    data = bytearray(path.read_bytes())
    for root in roots:
        for i in range((root - 1) * page, root * page):
            data[i] ^= 0x5A
    with open(path, "r+b") as fh:
        fh.write(data)


def titles(store: ChatStore) -> set[str]:
    return {c.title for c in store.conversations()}


class Holder:
    """A second process holding the database (fault_store.py hold-*) until released."""

    def __init__(self, mode: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(TESTS / "fault_store.py"), mode, str(database_path())],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=TESTS.parent)
        line = self.proc.stdout.readline()
        assert line.strip() == "held", line

    def release(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


@pytest.fixture
def holders():
    made: list[Holder] = []
    yield lambda mode: made.append(Holder(mode)) or made[-1]
    for h in made:
        if h.proc.poll() is None:
            h.proc.kill()
            h.proc.wait()


def test_another_process_writing_leaves_the_history_in_place_and_a_write_says_why(holders):
    chats = make_history()
    holder = holders("hold-write")
    store = ChatStore()
    assert store.mode == StoreMode.WRITABLE and store.notice is None
    assert titles(store) == {t for t, _ in chats}  # reads go on beside the other writer
    conv = store.conversations()[0]
    with pytest.raises(StoreError, match="locked by another program"):
        store.add_message(conv.id, Role.USER, "while locked")
    holder.release()
    store.add_message(conv.id, Role.USER, "after the lock")  # the same store writes again
    assert [m.content for m in store.messages(conv.id)][-1] == "after the lock"
    store.close()
    assert set_aside_files() == []


def test_a_database_held_exclusively_is_left_alone_and_the_window_works_in_memory(qtbot, tiny, isolated_home, holders):
    chats = make_history()
    before = digest(database_path())
    install_tiny(tiny, isolated_home, max_tokens=20)
    holder = holders("hold-exclusive")
    from app.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    assert w.controller.store.mode == StoreMode.MEMORY
    text = w.notice.text()
    assert "locked by another program" in text and "Nothing in it was changed" in text and "not be saved" in text
    assert w.conversations.list.count() == 0
    qtbot.waitUntil(lambda: w.controller.loaded is not None, timeout=REPLY_TIMEOUT_MS)
    reply = send(qtbot, w, "hello in memory")  # chatting still works, unsaved
    assert reply.finished and reply.tokens
    w.close()
    holder.release()
    assert digest(database_path()) == before and set_aside_files() == []
    store = ChatStore()
    assert store.mode == StoreMode.WRITABLE and titles(store) == {t for t, _ in chats}
    store.close()


def test_a_newer_schema_is_opened_read_only_and_never_changed(qtbot, tiny, isolated_home):
    chats = make_history()
    db = sqlite3.connect(database_path(), isolation_level=None)
    db.execute("PRAGMA journal_mode=DELETE")  # so that any write by this version would show in the file
    db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION + 1),))
    db.execute("CREATE TABLE pictures (id INTEGER PRIMARY KEY, message_id INTEGER, data BLOB)")
    db.close()
    before = digest(database_path())
    install_tiny(tiny, isolated_home, max_tokens=20)
    w = open_window(qtbot)
    assert w.controller.store.mode == StoreMode.READ_ONLY
    assert "newer version of Draftlight" in w.notice.text() and "read-only" in w.notice.text()
    lst = w.conversations.list
    assert sorted(lst.item(i).text() for i in range(lst.count())) == sorted(t for t, _ in chats)
    assert w.controller.messages and w.controller.messages[0].content in {u for _, u in chats}
    w.input.setPlainText("a new message")
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    assert "read-only" in w.notice.text() and w.input.toPlainText() == "a new message"
    assert not w.controller.busy
    w.close()
    assert digest(database_path()) == before and set_aside_files() == []
    assert not database_path().with_name(database_path().name + "-wal").exists()


def test_a_crash_between_the_upgrades_steps_leaves_the_old_file_which_upgrades_next_time():
    path = write_old_history(SCHEMA_1)
    crash = subprocess.run([sys.executable, str(TESTS / "fault_store.py"), "crash-migration", str(path)],
                           capture_output=True, text=True, cwd=TESTS.parent, timeout=120)
    assert crash.returncode == -9 and "killing" in crash.stdout, crash.stderr
    # The first ALTER ran, then the process died: the transaction never committed.
    db = sqlite3.connect(path)
    columns = [r[1] for r in db.execute("PRAGMA table_info(tokens)")]
    assert "runner_up" not in columns and db.execute("SELECT value FROM meta").fetchone() == ("1",)
    db.close()
    store = ChatStore()
    assert store.notice is None and store.mode == StoreMode.WRITABLE
    reply = store.messages(1)[1]
    assert [t.text for t in reply.tokens] == ["yo"] and reply.text == "yo"
    store.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == str(SCHEMA_VERSION)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert set_aside_files() == []


def test_a_full_disk_refuses_the_write_with_a_message_and_keeps_everything_before():
    chats = make_history()
    run = subprocess.run([sys.executable, str(TESTS / "fault_store.py"), "fill-disk", str(database_path())],
                         capture_output=True, text=True, cwd=TESTS.parent, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["error"] and "refused the write" in result["error"], result["error"]
    assert result["saved"], "the limit left no room for a single message: nothing was tested"
    db = sqlite3.connect(database_path())
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    got = dict(db.execute("SELECT id, content FROM messages"))
    for mid, text in result["saved"]:  # every write that was reported saved is there
        assert got.get(mid) == text
    assert len(got) == 2 * len(chats) + len(result["saved"])  # and the refused one left nothing behind
    assert {r[0] for r in db.execute("SELECT title FROM conversations")} == {t for t, _ in chats}
    db.close()
    assert set_aside_files() == []


def test_damage_found_after_start_up_becomes_a_message_not_a_traceback(qtbot, tiny, isolated_home):
    make_history()
    install_tiny(tiny, isolated_home, max_tokens=20)
    w = open_window(qtbot)
    first = w.controller.current_id
    other = next(c.id for c in w.controller.store.conversations() if c.id != first)
    # The disk damages the pages of the chat list and the messages under the running app; another
    # writer's commit makes the app read the file again instead of its cache.
    path = database_path()
    damage_tables(path, ("conversations", "messages"))
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("INSERT OR REPLACE INTO meta VALUES ('touched', '1')")
    writer.close()
    w.conversations.search.setText("chat")  # reads the list: pytest-qt fails the test on any exception in a slot
    qtbot.waitUntil(lambda: "Could not read the conversation history" in w.notice.text(), timeout=REPLY_TIMEOUT_MS)
    assert "malformed" in w.notice.text() and "Restart Draftlight" in w.notice.text()
    w.notice.hide()
    w.controller.open_conversation(other)
    assert "Could not read" in w.notice.text() and w.controller.current_id == first
    w.notice.hide()
    w.input.setPlainText("after the damage")
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    assert "Could not save" in w.notice.text() and w.input.toPlainText() == "after the damage"
    assert not w.controller.busy
    w.close()
    w2 = open_window(qtbot)  # the next start finds the damage and sets the file aside, with a message
    assert "damaged" in w2.notice.text() and len(set_aside_files()) == 1


def test_only_a_file_sqlite_calls_damaged_is_set_aside():
    make_history()
    path = database_path()
    data = bytearray(path.read_bytes())
    page = 4096
    for i in range(page + 16, min(len(data), 3 * page)):  # scramble the second and third pages
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    store = ChatStore()
    assert store.mode == StoreMode.WRITABLE and "damaged" in store.notice
    assert store.conversations() == []
    kept = set_aside_files()
    assert len(kept) == 1 and kept[0].read_bytes() == bytes(data)
    store.close()


def test_the_full_check_runs_after_a_window_that_did_not_close_and_not_after_one_that_did():
    """quick_check reads every page (a row per token): a start after a clean close skips it."""
    make_history()
    path = database_path()
    damage_tables(path, ("tokens",))  # nothing a start reads: only the full check can see it
    store = ChatStore()
    assert store.mode == StoreMode.WRITABLE and store.notice is None
    assert titles(store) == {"first chat", "second chat"}
    store.close()
    # A window that opened the file and never closed it (killed, crashed) leaves the flag at 0.
    writer = sqlite3.connect(path, isolation_level=None)
    assert writer.execute("SELECT value FROM meta WHERE key='closed_cleanly'").fetchone() == ("1",)
    writer.execute("UPDATE meta SET value='0' WHERE key='closed_cleanly'")
    writer.close()
    store = ChatStore()
    assert "damaged" in (store.notice or "") and len(set_aside_files()) == 1
    assert store.mode == StoreMode.WRITABLE and titles(store) == set()
    store.close()


def as_another_user(fn) -> dict:
    """Run fn() in a forked child that holds no privileges (root drops to nobody; another user
    already has none) and return the dict it returned. A fork, not a new interpreter: the
    interpreter may live where nobody can read it (/root/.pyenv here)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        try:
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            out = fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = {"raised": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data)


@pytest.mark.parametrize("folder_mode", [0o755, 0o777], ids=["folder-read-only", "folder-writable"])
def test_a_history_file_without_write_permission_is_shown_read_only_and_left_untouched(folder_mode):
    # Outside pytest's tmp folder, which only root may enter.
    with tempfile.TemporaryDirectory(prefix="draftlight-ro-") as tmp:
        folder = Path(tmp)
        path = folder / "conversations.sqlite3"
        store = ChatStore(path)
        conv = store.new_conversation("kept chat")
        store.add_message(conv.id, Role.USER, "hello")
        store.close()
        path.chmod(0o444)
        folder.chmod(folder_mode)
        before = digest(path)

        def open_it() -> dict:
            s = ChatStore(path)
            got = {"mode": s.mode.value, "notice": s.notice or "",
                   "titles": [c.title for c in s.conversations()]}
            got["messages"] = [m.content for m in s.messages(s.conversations()[0].id)] if got["titles"] else []
            try:
                s.new_conversation("new")
                got["write"] = "saved"
            except StoreError as exc:
                got["write"] = str(exc)
            s.close()
            return got

        got = as_another_user(open_it)
        folder.chmod(0o700)
        assert "raised" not in got, got
        assert got["mode"] == StoreMode.READ_ONLY.value, got
        assert "read-only" in got["notice"] and "Nothing in it was changed" in got["notice"]
        assert got["titles"] == ["kept chat"] and got["messages"] == ["hello"]
        assert "read-only" in got["write"]
        assert digest(path) == before


def test_a_batch_refused_while_another_program_writes_is_saved_with_the_next_one(qtbot, tiny, isolated_home, holders):
    """A second process holds the database mid-reply: the reply's batches then fail for a while; the
    stored reply must still be whole (it once had a hole there), and the notice must tell the truth."""
    from app_support import hold_after_first_token

    install_tiny(tiny, isolated_home, max_tokens=60)
    from app.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.controller.loaded is not None, timeout=REPLY_TIMEOUT_MS)
    gate, hold = hold_after_first_token(w)
    notices = []

    def on_notice(notice) -> None:  # the other program lets go as soon as the window has said it
        notices.append(notice.text)
        if "could not be saved yet" in notice.text:
            holder.release()

    w.controller.sig_notice.connect(on_notice)
    w.input.setPlainText("the model is fast")
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as finished:
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: w.controller.chat_reply is not None and bool(w.controller.chat_reply.message.tokens),
                        timeout=REPLY_TIMEOUT_MS)
        holder = holders("hold-write")  # from here the store's writes wait 1 s, then fail
        gate.set()  # the reply goes on: its next batch meets the lock
    reply = finished.args[0]
    qtbot.waitUntil(lambda: any("saved again" in n for n in notices), timeout=REPLY_TIMEOUT_MS)
    assert any("could not be saved yet" in n for n in notices)
    w.close()
    store = ChatStore()
    conv = store.conversations()[0]
    stored = store.messages(conv.id)[-1]
    assert [t.text for t in stored.tokens] == [t.text for t in reply.tokens]  # no hole
    assert [t.index for t in stored.tokens] == list(range(len(reply.tokens)))
    assert stored.content == reply.content and stored.error == ""
    store.close()
