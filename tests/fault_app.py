"""A real Draftlight process for the fault tests, with a hook per mode (run by the tests; not a test).

    python tests/fault_app.py hold-load   the engine thread is held inside the model load
    python tests/fault_app.py term-while-built   a TERM arrives while the window is built, before it is shown
    python tests/fault_app.py term-in-paint   a TERM arrives while the window paints
    python tests/fault_app.py jobs-past-exit  closes the window while a short job and a long task run on,
                                          and lets them end after Qt's exit has deleted their QObjects
    python tests/fault_app.py chat        starts a new chat and sends a message, the next when each reply ends
    python tests/fault_app.py zygote      imports the app once, then per stdin line `MODE FIFO`
                                          forks a fresh app process whose stdout is FIFO, prints
                                          `pid N`, and `exit STATUS` once it has ended

The zygote makes many short-lived app processes cheap (the imports take most of a start): each
child is a real process that builds its own QApplication, window, engine thread and database
connection; the zygote itself never starts Qt or a thread, so forking it is safe.

It runs app.main.main() unchanged and reports on stdout, one line per fact, flushed at once:
`loading`, `added ID ROLE JSON-TEXT`, `shown ID N` (the reply on screen has N tokens, so they are
already committed), `finished ID REASON JSON-TEXT`.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
from pathlib import Path

#: Run after PySide's own exit hook, which deletes the QObjects Python still holds (atexit runs the last
#: registered first, and PySide registers its hook when QtCore is imported, below).
AFTER_QT_EXIT: list = []
atexit.register(lambda: [hook() for hook in AFTER_QT_EXIT])

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt, QTimer  # noqa: E402

PROMPTS = ("the model is fast", "write code", "speculative decoding is fast", "tell me about the draft model")


def say(*parts) -> None:
    print(*parts, flush=True)


def hold_load(controller) -> None:
    forever = threading.Event()

    def stuck(_which, _fraction) -> None:  # on the engine thread, inside llama.cpp's load
        say("loading")
        forever.wait(600)

    controller.worker.sig_load_progress.connect(stuck, Qt.ConnectionType.DirectConnection)


def term_while_built(window) -> None:
    """A TERM while the window is built (it has started loading the saved pair) and not yet shown."""
    say("built")
    os.kill(os.getpid(), signal.SIGTERM)


def chat(window) -> None:
    c = window.controller
    sent = [0]

    def send_next() -> None:
        text = f"{PROMPTS[sent[0] % len(PROMPTS)]} ({os.getpid()}-{sent[0]})"
        sent[0] += 1
        window._send(text)  # what Enter does

    def loaded(_info) -> None:
        if not c.busy and sent[0] == 0:
            c.new_conversation()  # a run's own chat: the prompt stays short however many runs came before
            send_next()

    c.sig_loaded.connect(loaded)
    c.sig_message_added.connect(lambda m: say("added", m.id, m.role.value, json.dumps(m.content)))
    c.sig_reply_started.connect(
        lambda r: r.changed.connect(lambda mid, _start: say("shown", mid, len(r.message.tokens))))

    def finished(m) -> None:
        say("finished", m.id, m.finish_reason.value, json.dumps(m.text))
        QTimer.singleShot(0, send_next)

    c.sig_reply_finished.connect(finished)


#: Hooks on the controller run as soon as it exists: the window's constructor starts the saved pair's load.
def term_in_paint(window) -> None:
    """A TERM that lands while the window paints: a child whose paintEvent sends it and paints on after Python has
    run the handler (between two bytecodes, as a signal can land inside any of the app's paintEvents)."""
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QColor, QPainter
    from PySide6.QtWidgets import QWidget

    class Painted(QWidget):
        sent = False

        def paintEvent(self, _event) -> None:
            p = QPainter(self)
            if not Painted.sent:
                Painted.sent = True
                os.kill(os.getpid(), signal.SIGTERM)
                say("term sent in paint")
            for i in range(200):  # bytecodes: the handler runs here
                p.fillRect(QRectF(i % 50, i % 30, 40, 20), QColor(200, i % 255, 90))
            p.end()

    child = Painted(window)
    child.setGeometry(0, 0, 300, 200)
    child.show()
    QTimer.singleShot(300, child.update)


def jobs_past_exit(window) -> None:
    """A short background job and a long task with progress still run when the app exits; they end once Qt's exit
    has deleted their Workers (as a header read or a download can outlive the window on its daemon thread)."""
    from app.control.tasks import Task
    from app.core.background import run_in_background

    release = threading.Event()

    def long_job(report, cancel) -> str:
        say("task running")
        release.wait(60)
        for step in range(1000):
            if cancel.is_set():
                raise InterruptedError(f"stopped at {step}")  # as the app's jobs do
            report("model.gguf", step / 1000, "")
        return "ran to its end"

    short = run_in_background(lambda: release.wait(60), lambda _v: say("short job heard"))
    task = Task("download:x", "Downloading", long_job)
    task.start()

    def end_them() -> None:
        release.set()
        for worker in (short, task):
            worker.wait(30)
        say("after exit:", task.state.value, task.error)

    AFTER_QT_EXIT.append(end_them)
    QTimer.singleShot(200, window.close)


CONTROLLER_MODES = {"hold-load": hold_load}
WINDOW_MODES = {"chat": chat, "term-while-built": term_while_built, "term-in-paint": term_in_paint,
                "jobs-past-exit": jobs_past_exit}


def run(mode: str) -> int:
    import app.window as window_module
    from app.control.controller import ChatController
    from app.main import main

    def after(cls, hook) -> None:
        build = cls.__init__

        def init(self, *args, **kwargs) -> None:
            build(self, *args, **kwargs)
            hook(self)

        cls.__init__ = init

    if mode in CONTROLLER_MODES:
        after(ChatController, CONTROLLER_MODES[mode])
    else:
        after(window_module.MainWindow, WINDOW_MODES[mode])
    return main([])


def zygote() -> None:
    import app.main  # noqa: F401 - everything a start imports, paid once
    import app.window  # noqa: F401
    import engine.decoding.session  # noqa: F401

    for command in sys.stdin:
        mode, fifo = command.split()
        pid = os.fork()
        if pid == 0:  # the child never returns into this loop, whatever happens
            code = 1
            try:
                os.dup2(os.open(fifo, os.O_WRONLY), 1)
                os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
                sys.stdout = os.fdopen(1, "w", buffering=1)
                code = run(mode)
                sys.stdout.flush()
            finally:
                os._exit(code)
        say("pid", pid)
        _, status = os.waitpid(pid, 0)
        say("exit", status)


if __name__ == "__main__":
    if sys.argv[1] == "zygote":
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # no BLAS threads in the process that forks
        zygote()
    else:
        sys.exit(run(sys.argv[1]))
