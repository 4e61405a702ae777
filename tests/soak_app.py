"""Soak the app in one process and report resident memory: send/stop cycles, then model switches.

    python tests/soak_app.py [--cycles 100] [--switches 20] [--target T.gguf --draft D.gguf --other O.gguf]

Offscreen, in a temporary home. Each cycle sends a message and presses Stop once the first tokens
are on screen (or lets a short reply finish); each switch changes the target between two models
(a full unload and load, the drafter following). Prints RSS after warm-up, after the cycles and
after the switches. Without model paths it uses the tiny test models (tests/tiny_models.py). Not a
CI test: it measures, it does not judge (the goal in issue 12 is under 50 MB of growth).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from process_memory import rss_mb  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--switches", type=int, default=20)
    ap.add_argument("--target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--other", type=Path, help="a second target to switch to (another vocabulary is fine)")
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="draftlight-soak-"))
    os.environ["DRAFTLIGHT_HOME"] = str(home)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if args.target is None:
        import tiny_models

        tiny = tiny_models.write_standard_set(home / "tiny")
        args.target, args.draft, args.other = tiny["target"], tiny["drafter"], tiny["other-vocab"]
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.core.settings import AppSettings, save_settings
    from app.window import MainWindow

    save_settings(AppSettings(target=str(args.target), drafter=str(args.draft), draft_max=4, max_tokens=64,
                              first_run_done=True))
    app = QApplication.instance() or QApplication(sys.argv[:1])

    def wait(cond, timeout_s: float = 300) -> None:
        end = time.monotonic() + timeout_s
        while not cond():
            if time.monotonic() > end:
                raise SystemExit("soak: timed out")
            loop = QEventLoop()
            QTimer.singleShot(5, loop.quit)
            loop.exec()

    w = MainWindow()
    w.show()
    c = w.controller
    wait(lambda: c.loaded is not None)
    for _ in range(5):  # warm-up: caches, fonts, first allocations
        c.send("the model is fast")
        wait(lambda: not c.busy)
    base = rss_mb()
    print(f"  warm-up done: {base:.1f} MB", flush=True)
    t0 = time.monotonic()
    stopped = 0
    for i in range(args.cycles):
        c.send(f"the model is fast, cycle {i}")
        wait(lambda: not c.busy or (c.chat_reply is not None and len(c.chat_reply.message.tokens) > 0))
        if c.busy:
            c.stop()
            stopped += 1
        wait(lambda: not c.busy)
        if i % 25 == 24:
            c.new_conversation()  # keep prompts short: this measures the app, not the context
        if i % 10 == 9:
            print(f"  cycle {i + 1}: {rss_mb():.1f} MB ({time.monotonic() - t0:.0f} s)", flush=True)
    after_cycles = rss_mb()
    t1 = time.monotonic()
    targets = [str(args.other), str(args.target)]
    for i in range(args.switches):
        before = c.loaded
        c.update_settings(target=targets[i % 2])
        wait(lambda: c.loaded is not before and c.loading is None and c.loaded is not None
             and str(c.loaded.request.target) == targets[i % 2])
        print(f"  switch {i + 1}: {rss_mb():.1f} MB ({time.monotonic() - t1:.0f} s)", flush=True)
    after_switches = rss_mb()
    t2 = time.monotonic()
    w.close()
    print(f"RSS after warm-up: {base:.1f} MB")
    print(f"after {args.cycles} send/stop cycles ({stopped} stopped mid-reply, {t1 - t0:.1f} s): "
          f"{after_cycles:.1f} MB ({after_cycles - base:+.1f} MB)")
    print(f"after {args.switches} model switches ({t2 - t1:.1f} s): {after_switches:.1f} MB "
          f"({after_switches - base:+.1f} MB from warm-up)")
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
