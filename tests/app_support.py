"""Shared pieces of the app tests (no tests here): a home with the tiny models installed, and a window on it."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import shutil  # noqa: E402
import signal  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

from app.history.records import Role  # noqa: E402
from app.core.settings import AppSettings, save_settings  # noqa: E402
from app.core.theme import Theme  # noqa: E402
from tree import TESTS  # noqa: E402

PROMPT = "the model is fast"  # the tiny pair drafts, accepts, corrects and adds bonus tokens on this one
LOAD_TIMEOUT_MS = 30_000
REPLY_TIMEOUT_MS = 30_000
#: A history file as Draftlight schema 1 wrote it: one chat, a stopped reply with one token.
SCHEMA_1 = """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO meta VALUES ('schema', '1');
    CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL);
    CREATE TABLE messages (id INTEGER PRIMARY KEY, conversation_id INTEGER NOT NULL, role TEXT NOT NULL,
        content TEXT NOT NULL DEFAULT '', created REAL NOT NULL, target TEXT NOT NULL DEFAULT '',
        drafter TEXT NOT NULL DEFAULT '', settings TEXT NOT NULL DEFAULT '{}', finish_reason TEXT, stats TEXT,
        error TEXT NOT NULL DEFAULT '');
    CREATE TABLE rounds (message_id INTEGER NOT NULL, round INTEGER NOT NULL, data TEXT NOT NULL,
        PRIMARY KEY (message_id, round));
    CREATE TABLE tokens (message_id INTEGER NOT NULL, idx INTEGER NOT NULL, text TEXT NOT NULL,
        token_id INTEGER NOT NULL, source TEXT NOT NULL, round INTEGER NOT NULL, p REAL, q REAL,
        PRIMARY KEY (message_id, idx));
    INSERT INTO conversations VALUES (1, 'old chat', 0, 0);
    INSERT INTO messages (id, conversation_id, role, content, created) VALUES (1, 1, 'user', 'hi', 0);
    INSERT INTO messages (id, conversation_id, role, content, created, finish_reason) VALUES (2, 1, 'assistant', 'yo', 0, 'cancelled');
    INSERT INTO tokens VALUES (2, 0, 'yo', 42, 'accepted', 1, 0.9, 0.8);
"""


def write_old_history(schema_sql: str) -> Path:
    """The history file as an older Draftlight left it (its schema and rows as SQL); returns its path."""
    from app.history.store import database_path

    path = database_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(path)
    old.executescript(schema_sql)
    old.commit()
    old.close()
    return path


def install_tiny(tiny: dict[str, Path], home: Path, **settings) -> dict[str, Path]:
    """Copy the tiny models into the home's model folder and point the settings at target + drafter."""
    folder = home / "data" / "models"
    folder.mkdir(parents=True, exist_ok=True)
    installed = {k: Path(shutil.copy(v, folder / v.name)) for k, v in tiny.items()}
    base = dict(target=str(installed["target"]), drafter=str(installed["drafter"]), draft_max=4, max_tokens=120,
                theme=Theme.LIGHT, n_threads=1)  # one thread: tiny models, and a busy 2-core machine
    base.update(settings)
    save_settings(AppSettings(**base))
    return installed


def open_window(qtbot):
    from app.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)  # closed at teardown: the controller stops its thread and closes the database
    w.show()
    qtbot.waitUntil(lambda: w.controller.loaded is not None, timeout=LOAD_TIMEOUT_MS)
    return w


def send(qtbot, w, text: str = PROMPT):
    """Type `text`, press Enter, wait for the reply to finish; return the reply Message."""
    from PySide6.QtCore import Qt

    w.input.setPlainText(text)
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    reply = blocker.args[0]
    assert reply.role == Role.ASSISTANT
    return reply


def marks(w) -> list[tuple[str, str]]:
    return [(f.text, f.mark.value) for f in w.chat.token_fragments()]


def hold_after_first_token(w):
    """Keep the engine thread inside the reply after its first token until the returned gate is
    set; also returns the slot, to disconnect it."""
    import threading

    from PySide6.QtCore import Qt

    from engine.decoding.events import TokenEvent

    gate = threading.Event()

    def hold(_rid, event):
        if isinstance(event, TokenEvent) and event.index == 0:
            gate.wait(20)

    w.controller.worker.sig_event.connect(hold, Qt.ConnectionType.DirectConnection)
    return gate, hold


def activate(qtbot, w) -> None:
    """Make `w` the active window: window shortcuts and the menu bar's Alt keys work only there."""
    with qtbot.waitActive(w):
        w.activateWindow()


def menu_keys(qtbot, w, *letters: str):
    """Alt+letters[0] opens a menu of the menu bar; each next letter picks an item (or submenu) by its
    underlined letter, as a person does. Returns the menu left open, if any."""
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    qtbot.keyClick(w, letters[0], Qt.KeyboardModifier.AltModifier)
    for letter in letters[1:]:
        qtbot.waitUntil(lambda: QApplication.activePopupWidget() is not None)
        qtbot.keyClick(QApplication.activePopupWidget(), letter)
    return QApplication.activePopupWidget()


@contextmanager
def fault_app(home: Path, mode: str) -> Iterator[subprocess.Popen]:
    """A real app process (tests/fault_app.py MODE) on `home`, offscreen; killed if still running at the end."""
    here = TESTS
    env = dict(os.environ, DRAFTLIGHT_HOME=str(home), QT_QPA_PLATFORM="offscreen")
    proc = subprocess.Popen([sys.executable, str(here / "fault_app.py"), mode], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=here.parent)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def terminated_cleanly(proc: subprocess.Popen) -> str:
    """TERM to a fault_app process (it closes the window); it must exit 0 within a minute with no traceback.
    Returns what it printed after the TERM."""
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, f"exit {proc.returncode}: {err}"
    assert "Traceback" not in err and "QThread: Destroyed" not in err
    return rest
