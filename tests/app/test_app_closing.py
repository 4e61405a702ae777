"""Closing is always quick: mid-reply, during a model load llama.cpp cannot interrupt, and as a real process."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import threading  # noqa: E402

from PySide6.QtCore import Qt  # noqa: E402
from app_support import (LOAD_TIMEOUT_MS, PROMPT, REPLY_TIMEOUT_MS, fault_app, install_tiny,  # noqa: E402
                              marks, open_window, terminated_cleanly)

from app.control.controller import engine_threads_running  # noqa: E402
from engine.decoding.events import FinishReason, TokenEvent  # noqa: E402


def test_closing_mid_reply_saves_it_as_stopped(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=3000)
    w = open_window(qtbot)
    session = w.controller.worker._session

    def slow_round(_rid, event):  # a round that ends only when Stop is asked for
        if isinstance(event, TokenEvent) and event.index == 0:
            session.stop_event.wait(20)

    w.controller.worker.sig_event.connect(slow_round, Qt.ConnectionType.DirectConnection)
    w.input.setPlainText(PROMPT)
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(marks(w)) > 0, timeout=REPLY_TIMEOUT_MS)
    shown = [t for t, _ in marks(w)]
    w.close()

    w2 = open_window(qtbot)
    reply = w2.controller.messages[-1]
    assert reply.finish_reason == FinishReason.CANCELLED and "interrupted" not in reply.error
    assert [t for t, _ in marks(w2)][: len(shown)] == shown
    assert "(stopped" in w2.chat.toPlainText()


def test_closing_during_a_load_does_not_wait_for_it_and_the_models_are_freed_after(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    from app.control.controller import ChatController
    from app.window import MainWindow

    controller = ChatController()
    worker, thread = controller.worker, controller.thread
    inside, gate = threading.Event(), threading.Event()

    def stuck(_which, _fraction):  # llama.cpp's load progress callback: the engine thread is inside the load
        inside.set()
        gate.wait(120)

    # Before the window: its constructor starts the saved pair's load, which could pass a later hold.
    worker.sig_load_progress.connect(stuck, Qt.ConnectionType.DirectConnection)
    w = MainWindow(controller)
    qtbot.addWidget(w)
    try:
        w.show()
        qtbot.waitUntil(inside.is_set, timeout=LOAD_TIMEOUT_MS)
        w.close()
        # close() returned while the load is still held: it did not wait for it.
        assert not gate.is_set() and not w.isVisible()
        assert thread.isRunning() and engine_threads_running()
    finally:
        gate.set()
    qtbot.waitUntil(thread.isFinished, timeout=LOAD_TIMEOUT_MS)
    assert not worker.holds_models  # the load finished after the window closed, and freed its models
    assert not engine_threads_running()
    w2 = open_window(qtbot)  # the history and settings were closed properly
    assert w2.controller.store.notice is None


def test_closing_while_the_engine_is_stuck_mid_reply_keeps_what_was_shown(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=3000)
    w = open_window(qtbot)
    worker, thread = w.controller.worker, w.controller.thread
    gate = threading.Event()

    def stuck(_rid, event):  # a prompt read (or a round) that Stop cannot cut short
        if isinstance(event, TokenEvent) and event.index == 3:
            gate.wait(120)

    worker.sig_event.connect(stuck, Qt.ConnectionType.DirectConnection)
    try:
        w.input.setPlainText(PROMPT)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(marks(w)) >= 3, timeout=REPLY_TIMEOUT_MS)
        shown = [t for t, _ in marks(w)]
        w.close()
        assert not gate.is_set() and thread.isRunning()
        w2 = open_window(qtbot)
        reply = w2.controller.messages[-1]
        assert reply.finish_reason == FinishReason.CANCELLED and "app was closed" in reply.error
        assert [t for t, _ in marks(w2)][: len(shown)] == shown
    finally:
        gate.set()
    qtbot.waitUntil(thread.isFinished, timeout=REPLY_TIMEOUT_MS)
    assert not worker.holds_models


def test_the_app_process_exits_when_closed_during_a_load(tiny, isolated_home):
    """TERM to a real app process whose engine thread is stuck in a load: it saves, closes and exits."""
    install_tiny(tiny, isolated_home)
    with fault_app(isolated_home, "hold-load") as proc:
        for line in proc.stdout:
            if line.startswith("loading"):
                break
        else:
            raise AssertionError(f"the app ended before loading: {proc.wait()} {proc.stderr.read()}")
        terminated_cleanly(proc)  # the held load would last 10 minutes


def test_a_term_while_the_window_is_built_closes_it_once_shown(tiny, isolated_home):
    """A TERM after the window's constructor has started loading the saved pair, before the window is shown (a
    logout during a launch): the window closes properly and the process exits 0. It once died of the TERM (-15):
    the handler was installed after the window was built."""
    install_tiny(tiny, isolated_home)
    with fault_app(isolated_home, "term-while-built") as proc:
        out, err = proc.communicate(timeout=60)
    assert out.splitlines()[:1] == ["built"]
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_a_term_that_lands_while_the_window_paints_closes_it_after_the_paint(tiny, isolated_home):
    """Python runs a signal handler between any two bytecodes, so a TERM can land inside one of the app's paintEvents.
    The handler once closed the window right there: the window's surface went while its painter still drew (beside a
    busy loop, a SIGSEGV in the acceptance chart's fillRect, about one close in ten; here Qt says the flush had no
    window). Now the close waits for the event loop: the paint ends, then the window closes and the process exits 0."""
    install_tiny(tiny, isolated_home)
    with fault_app(isolated_home, "term-in-paint") as proc:
        out, err = proc.communicate(timeout=60)
    assert "term sent in paint" in out.splitlines()
    assert proc.returncode == 0, err
    assert "does not have a handle" not in err and "Traceback" not in err


def test_jobs_that_end_after_the_apps_exit_end_quietly_and_a_task_stops(isolated_home):
    """A short job and a long task outlive the window on their daemon threads; at the interpreter's exit PySide
    deletes the QObjects Python still holds, their Workers among them, and only then do the jobs end. Their answers
    are dropped without a word (once: "Exception in thread background ... Signal source has been deleted", which
    failed a CI run), and the task, whose progress nobody can hear any more, is asked to stop."""
    with fault_app(isolated_home, "jobs-past-exit") as proc:
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "deleted" not in err, err
    lines = out.splitlines()
    assert "task running" in lines and "short job heard" not in lines
    assert lines[-1] == "after exit: cancelled stopped at 1", out
