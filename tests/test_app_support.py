"""Shared pieces of the app tests (no tests here): a home with the tiny models installed, and a window on it."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

from app.records import Role  # noqa: E402
from app.settings import AppSettings, save_settings  # noqa: E402
from app.theme import Theme  # noqa: E402

PROMPT = "the model is fast"  # the tiny pair drafts, accepts, corrects and adds bonus tokens on this one
LOAD_TIMEOUT_MS = 30_000
REPLY_TIMEOUT_MS = 30_000


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
