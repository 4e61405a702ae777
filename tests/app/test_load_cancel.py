"""Model loads that can be cancelled (issue 12): llama.cpp stops at its next tensor, frees what it
had loaded and closes the file; the next load works. Tiny models cancel at a fraction; the real
1.5B target is cancelled from another thread, as the window does."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import threading  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import QObject, Qt, QThread, Signal  # noqa: E402
from app_support import install_tiny  # noqa: E402

from app.core.engine_thread.worker import EngineWorker, LoadRequest  # noqa: E402
from engine.llama.backend import LlamaModel  # noqa: E402
from engine.llama.types import LoadSettings, Logits
from engine.drafting.draft_choice import DraftSpec  # noqa: E402
from engine.decoding.session import Session  # noqa: E402
from engine.errors import LoadCancelled  # noqa: E402
from process_memory import rss_mb  # noqa: E402


def open_fds() -> set[str]:
    """What this process has open, by target (a number alone would not say which file stayed)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass  # the directory's own descriptor, closed by now
    return out


def mapped(path: Path) -> bool:
    return str(path.resolve()) in Path("/proc/self/maps").read_text()


def cancel_at(fraction: float, cancel: threading.Event, seen: list[float]):
    def progress(value: float) -> None:
        seen.append(value)
        if value >= fraction:
            cancel.set()
    return progress


def test_a_load_cancelled_at_a_fraction_raises_and_leaves_nothing_open(tiny):
    path = tiny["target"]
    LlamaModel(path, LoadSettings(n_ctx=256)).close()  # llama.cpp's own one-time set-up is not a leak
    fds_before = open_fds()
    cancel, seen = threading.Event(), []
    with pytest.raises(LoadCancelled, match=f"loading {path.name} was cancelled"):
        LlamaModel(path, LoadSettings(n_ctx=256), progress=cancel_at(0.3, cancel, seen), cancel=cancel)
    assert seen and 0.3 <= seen[-1] < 1.0  # it stopped at the tensor after the cancel, not at the end
    assert open_fds() == fds_before
    assert not mapped(path)
    m = LlamaModel(path, LoadSettings(n_ctx=256))  # the next load works
    try:
        assert m.decode([1, 2, 3], Logits.LAST).shape == (1, m.n_vocab)
    finally:
        m.close()


def test_a_load_cancelled_before_it_starts_never_opens_the_file(tiny):
    cancel = threading.Event()
    cancel.set()
    fds_before = open_fds()
    with pytest.raises(LoadCancelled):
        LlamaModel(tiny["target"], LoadSettings(n_ctx=256), cancel=cancel)
    assert open_fds() == fds_before and not mapped(tiny["target"])


def test_an_error_in_the_progress_callback_ends_the_load_and_is_raised(tiny):
    class Boom(Exception):
        pass

    def progress(value: float) -> None:
        if value > 0.2:
            raise Boom("the listener failed")

    with pytest.raises(Boom):
        LlamaModel(tiny["target"], LoadSettings(n_ctx=256), progress=progress)
    assert not mapped(tiny["target"])


def test_cancelling_a_drafter_switch_keeps_the_drafter_in_use(tiny):
    session = Session(tiny["target"], "lookup", target_load=LoadSettings(n_ctx=256))
    try:
        costs = (session.costs.draft_per_token, session.costs.catchup)
        cancel, seen = threading.Event(), []
        session._progress = lambda which, v: cancel_at(0.5, cancel, seen)(v)
        with pytest.raises(LoadCancelled):
            session.set_drafter(str(tiny["drafter"]), cancel=cancel)
        assert session.spec.label == "lookup" and session.draft_model is None
        assert (session.costs.draft_per_token, session.costs.catchup) == costs
        assert not mapped(tiny["drafter"])
        session.set_drafter(str(tiny["drafter"]))  # and a later switch works
        assert session.draft_model is not None and session.spec.label == tiny["drafter"].name
    finally:
        session.close()


def test_a_real_load_cancelled_from_another_thread_frees_the_weights(real_pair):
    """The 1.5B target (1.1 GB): cancelled by another thread once three quarters are loaded, as the GUI does."""
    target, _ = real_pair
    rss_before, fds_before = rss_mb(), open_fds()
    cancel, reached, cancelled = threading.Event(), threading.Event(), threading.Event()
    seen: list[float] = []

    def progress(_which: str, value: float) -> None:
        seen.append(value)
        if value >= 0.75 and not reached.is_set():
            reached.set()
            cancelled.wait(60)  # hold this tensor until the other thread has cancelled

    def canceller() -> None:
        reached.wait(120)
        cancel.set()
        cancelled.set()

    t = threading.Thread(target=canceller)
    t.start()
    try:
        with pytest.raises(LoadCancelled, match=target.name):
            Session(target, None, target_load=LoadSettings(n_ctx=512), progress=progress, calibrate=False,
                    cancel=cancel)
    finally:
        reached.set()
        t.join()
    assert 0.75 <= seen[-1] < 1.0  # it stopped at the tensor it was held at
    assert open_fds() == fds_before and not mapped(target)
    assert rss_mb() - rss_before < 100  # three quarters of the weights were 1.2 GB resident: none is held
    session = Session(target, None, target_load=LoadSettings(n_ctx=512), calibrate=False)
    try:
        assert mapped(target)
        assert session.target.tokenize("def", add_special=False)
    finally:
        session.close()



# -- the engine thread (app/core/engine_thread/worker.py) ---------------------------------------------------------

LOAD_TIMEOUT_MS = 120_000


class Requests(QObject):
    """The GUI side: queued calls into the worker, as the controller makes them."""

    load = Signal(object)


@pytest.fixture
def engine(qtbot):
    thread, worker, requests = QThread(), EngineWorker(), Requests()
    worker.moveToThread(thread)
    requests.load.connect(worker.load)
    thread.start()
    yield worker, requests
    worker.close_soon()
    thread.quit()
    assert thread.wait(LOAD_TIMEOUT_MS)
    worker.release()


class Heard(QObject):
    """A signal's arguments, once it is emitted, received on the GUI thread.

    Not pytest-qt's waitSignal for the worker's signals: it connects a plain callable, which runs
    on the emitting engine thread, and can quit its event loop before the GUI thread has entered it.
    A fresh-clone run under load then sat in that loop with the signal already received."""

    def __init__(self, signal) -> None:
        super().__init__()
        self.args: list | None = None
        self.on: int | None = None  # the thread it was received on
        signal.connect(self._heard)  # a method of a QObject on the GUI thread: queued from the engine thread

    def _heard(self, *args) -> None:
        if self.args is None:
            self.args, self.on = list(args), threading.get_ident()


@contextmanager
def heard(qtbot, signal, timeout: int = LOAD_TIMEOUT_MS):
    """Like `qtbot.waitSignal`: waits at the end of the block for `signal`; `.args` holds what it carried."""
    h = Heard(signal)
    try:
        yield h
        qtbot.waitUntil(lambda: h.args is not None, timeout=timeout)
        assert h.on == threading.get_ident()
    finally:
        signal.disconnect(h._heard)


def hold_at(worker: EngineWorker, stage: str, fraction: float) -> tuple[threading.Event, threading.Event, list]:
    """Hold the engine thread inside llama.cpp's progress callback once `stage` reaches `fraction`,
    until the returned gate is set. Returns (reached, gate, fractions seen)."""
    reached, gate, seen = threading.Event(), threading.Event(), []

    def progress(which: str, value: float) -> None:
        seen.append((which, value))
        if which == stage and value >= fraction and not reached.is_set():
            reached.set()
            gate.wait(60)

    worker.sig_load_progress.connect(progress, Qt.ConnectionType.DirectConnection)
    return reached, gate, seen


def test_the_gui_cancels_a_running_real_load_and_the_next_one_works(qtbot, engine, real_pair):
    worker, requests = engine
    target, drafter = real_pair
    reached, gate, seen = hold_at(worker, "target", 0.5)
    req = LoadRequest(target, str(drafter), LoadSettings(n_ctx=512))
    with heard(qtbot, worker.sig_load_failed) as failed:
        requests.load.emit(req)
        qtbot.waitUntil(reached.is_set, timeout=LOAD_TIMEOUT_MS)
        worker.cancel_load()  # what a Cancel button or a model switch calls, from the GUI thread
        gate.set()
    got_req, exc, still = failed.args
    assert got_req is req and isinstance(exc, LoadCancelled) and still is None
    assert max(v for w, v in seen if w == "target") < 1.0 and not any(w == "drafter" for w, _ in seen)
    assert not worker.holds_models and not mapped(target) and not mapped(drafter)
    with heard(qtbot, worker.sig_loaded) as loaded:
        requests.load.emit(LoadRequest(target, "lookup", LoadSettings(n_ctx=512)))
    assert loaded.args[0].drafter_label == "lookup" and worker.holds_models


def test_a_cancelled_switch_keeps_the_pair_in_use(qtbot, engine, tiny):
    worker, requests = engine
    first = LoadRequest(tiny["target"], "lookup", LoadSettings(n_ctx=256, n_threads=1))
    with heard(qtbot, worker.sig_loaded) as loaded:
        requests.load.emit(first)
    info = loaded.args[0]

    queued = LoadRequest(tiny["other-vocab"], "none", LoadSettings(n_ctx=256, n_threads=1))
    worker.cancel_load(queued)  # cancelled before the engine thread reached it
    with heard(qtbot, worker.sig_load_failed) as failed:
        requests.load.emit(queued)
    assert isinstance(failed.args[1], LoadCancelled) and failed.args[2] is info
    assert not mapped(tiny["other-vocab"])

    reached, gate, _ = hold_at(worker, "drafter", 0.3)  # same target: only the drafter loads
    switch = LoadRequest(tiny["target"], str(tiny["drafter"]), LoadSettings(n_ctx=256, n_threads=1))
    with heard(qtbot, worker.sig_load_failed) as failed:
        requests.load.emit(switch)
        qtbot.waitUntil(reached.is_set, timeout=LOAD_TIMEOUT_MS)
        worker.cancel_load(switch)
        gate.set()
    assert isinstance(failed.args[1], LoadCancelled) and failed.args[2] is info
    assert worker.holds_models and worker._session.spec.label == "lookup" and not mapped(tiny["drafter"])


def test_closing_the_window_cancels_the_load_instead_of_waiting_for_it(qtbot, tiny, isolated_home):
    from app.control.controller import ChatController
    from app.window import MainWindow

    installed = install_tiny(tiny, isolated_home)
    controller = ChatController()
    worker, thread = controller.worker, controller.thread
    reached, gate, seen = hold_at(worker, "target", 0.0)  # before the window starts the saved pair's load
    w = MainWindow(controller)
    qtbot.addWidget(w)
    failures = []
    worker.sig_load_failed.connect(lambda _req, exc, _still: failures.append(exc), Qt.ConnectionType.DirectConnection)
    try:
        w.show()
        qtbot.waitUntil(reached.is_set, timeout=LOAD_TIMEOUT_MS)
        w.close()  # returns at once (tests/app/test_app_closing.py); the load is told to stop
    finally:
        gate.set()
    qtbot.waitUntil(thread.isFinished, timeout=LOAD_TIMEOUT_MS)
    assert [type(e) for e in failures] == [LoadCancelled]
    assert max(v for _, v in seen) < 1.0  # it stopped at the next tensor, it did not run to the end
    assert not worker.holds_models and not mapped(installed["target"])


def test_picking_another_pair_mid_load_cancels_the_old_load_quietly(qtbot, tiny, isolated_home):
    from app.control.controller import ChatController
    from app.window import MainWindow

    install_tiny(tiny, isolated_home)
    controller = ChatController()
    worker = controller.worker
    reached, gate, _ = hold_at(worker, "target", 0.3)  # before the window starts the saved pair's load
    w = MainWindow(controller)
    qtbot.addWidget(w)
    failures = []
    worker.sig_load_failed.connect(lambda req, exc, _still: failures.append((req.drafter, type(exc))),
                                   Qt.ConnectionType.DirectConnection)
    try:
        w.show()
        qtbot.waitUntil(reached.is_set, timeout=LOAD_TIMEOUT_MS)
        first = w.controller.pairing.loading
        w.controller.update_settings(drafter="lookup", drafter_chosen=True)  # the person picks prompt lookup meanwhile (as the picker does)
    finally:
        gate.set()
    qtbot.waitUntil(lambda: w.controller.loaded is not None, timeout=LOAD_TIMEOUT_MS)
    assert failures == [(first.drafter, LoadCancelled)]
    assert w.controller.loaded.request.drafter == DraftSpec.LOOKUP
    assert not w.notice.isVisible()  # a cancel that was asked for is not an error
