"""Start the desktop app: `draftlight` or `python -m app`."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="draftlight", description="A local chat that shows speculative decoding at work.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--self-test", action="store_true", help="check this installation offscreen and exit (0 = ok)")
    args, qt_args = parser.parse_known_args(argv)
    if args.self_test:
        from app.selftest import run

        return run()
    if args.version:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"draftlight {version('draftlight')}")
        except PackageNotFoundError:
            print("draftlight (not installed as a package)")
        return 0
    from PySide6.QtWidgets import QApplication

    from app.qt_check import emit_bug, platform_problem

    problem = emit_bug() or platform_problem()
    if problem:
        print(f"draftlight: {problem}", file=sys.stderr)
        return 2
    from app.core.engine_thread.worker import leave_models_at_exit, models_left_at_exit
    from app.window import MainWindow

    leave_models_at_exit()
    app = QApplication.instance() or QApplication([sys.argv[0], *qt_args])
    app.setApplicationName("Draftlight")
    app.setApplicationDisplayName("Draftlight")
    app.setDesktopFileName("draftlight")
    shown = _quit_on_signals()  # before the window: building it starts the saved pair's load
    window = MainWindow()
    window.show()
    shown(window)
    code = app.exec()
    from app.control.controller import engine_threads_running

    if engine_threads_running() or models_left_at_exit():
        # The models were left loaded (freeing a pair takes about half a second), or the engine thread
        # is inside a model load, which llama.cpp cannot interrupt. The chats and settings are saved and
        # closed: exit now, without finalizing, and let the system free the models.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _quit_on_signals() -> Callable[[object], None]:
    """Ctrl+C or a TERM closes the window properly (the reply stops, the chat is saved). Installed before
    the window is built, which starts loading the saved pair: a TERM then (a logout at launch) closes the
    window as soon as it is shown instead of killing the process. Returns what to call with the window
    once it is shown."""
    import signal

    from PySide6.QtCore import QTimer

    held: dict[str, object] = {}

    def close(*_args) -> None:
        window = held.get("window")
        if window is None:
            held["asked"] = True
        else:
            # Not window.close() here: Python runs this between any two bytecodes, maybe inside a paintEvent, and
            # closing the window there freed what its painter drew on (SIGSEGV in QPainter.fillRect beside a busy loop).
            QTimer.singleShot(0, window.close)

    signal.signal(signal.SIGINT, close)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, close)

    def shown(window) -> None:
        held["window"] = window
        # Python runs signal handlers only between bytecodes: wake it now and then from Qt's loop.
        window._signal_timer = QTimer(window, interval=250)
        window._signal_timer.timeout.connect(lambda: None)
        window._signal_timer.start()
        if held.get("asked"):
            QTimer.singleShot(0, window.close)  # in the event loop, so that closing quits it

    return shown


if __name__ == "__main__":
    sys.exit(main())
