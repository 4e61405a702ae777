"""How long Stop and Close take in the real window, with the real pair, under a busy loop on one core.

    python scripts/stop_close.py [--repeats 10] [--after 24] [--no-busy] [--out DIR]

Each repeat is a fresh app process (the real `draftlight` entry point, `app.main.main`, offscreen unless
QT_QPA_PLATFORM says otherwise) in a temporary home that points at the installed pair. In it a driver
types a prompt and presses Enter; once `--after` reply tokens are on screen it clicks Stop, and times:

- stop_click: how long the click itself held the GUI thread (Stop must never wait for the engine);
- stop_engine: from the click to the engine thread's DoneEvent (the round in flight finishing);
- stop_shown: from the click to "(stopped)" in the chat document;
- round_s: the reply's median round (drafting + verifying) before the click, and last_round_s, the
  round the stop fell in: "within one round" reads stop_engine against these.

Then it sends a second prompt and, once `--after` tokens are shown, closes the window, and the parent
times close: from the close call to the process's exit (the app saves the chat and frees the models).
The busy loop is a spinning process pinned to core 0 (as another program would be), started before
the first repeat and stopped after the last. The home is kept between runs (--home), so only the first
load ever measures the pair's speed; loading is not timed.

This is a measurement, not a test: on a shared 2-core machine timings move with whatever else runs.
Output: one JSON line per repeat on stdout, and with --out, runs.jsonl and summary.md there.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPTS = (
    "Write a long, detailed explanation of how a hash map works, with a Python implementation and tests.",
    "Explain step by step how to write a small HTTP server in Python, with the complete code.",
)
SPIN = """
import os, sys, time
os.sched_setaffinity(0, {0})
parent = os.getppid()
n = 0
while True:
    n += 1
    if n % 5_000_000 == 0 and os.getppid() != parent:
        sys.exit(0)  # the measuring process is gone: never outlive it
"""


# -- the child: the real app, driven from inside -----------------------------------------------------
def child(after: int) -> int:
    from PySide6.QtCore import QTimer, Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from engine.decoding.events import DoneEvent, RoundEvent
    from app import main as app_main

    app = QApplication([sys.argv[0]])
    state: dict = {"phase": "load", "shown": 0, "rounds": [], "t": {}}

    def say(**kw) -> None:
        print(json.dumps(kw), flush=True)

    def window():
        from app.window import MainWindow

        return next((w for w in QApplication.topLevelWidgets() if isinstance(w, MainWindow)), None)

    def on_engine_event(_rid, ev) -> None:  # engine thread (direct connection)
        if isinstance(ev, RoundEvent):
            state["rounds"].append((time.monotonic(), ev.draft_s + ev.verify_s))
        elif isinstance(ev, DoneEvent) and state["phase"] == "stopping":
            state["t"]["engine_done"] = time.monotonic()
            state["t"]["finish"] = ev.finish_reason.value

    def send(w, text: str) -> None:
        state["shown"] = 0
        w.input.setPlainText(text)
        QTest.keyClick(w.input, Qt.Key.Key_Return)

    def on_tokens(_message_id, _from_token) -> None:
        state["shown"] = len(window().controller.chat_reply.message.tokens)
        w = window()
        if state["shown"] < after:
            return
        if state["phase"] == "first":
            state["phase"] = "stopping"
            rounds = [dt for _, dt in state["rounds"]]
            t0 = time.monotonic()
            state["t"]["click"] = t0
            QTest.mouseClick(w.stop_button, Qt.MouseButton.LeftButton)
            state["t"]["click_returned"] = time.monotonic()
            state["before"] = rounds
        elif state["phase"] == "second":
            state["phase"] = "closing"
            say(close_at=time.monotonic())
            t0 = time.monotonic()
            w.close()
            say(close_call_s=time.monotonic() - t0)

    def on_document_changed() -> None:
        if state["phase"] != "stopping" or "shown" in state["t"]:
            return
        text = window().chat.toPlainText()
        if "(stopped)" not in text and state["phase"] == "stopping" and "engine_done" in state["t"]:
            say(waiting=text[-200:])
        if "(stopped)" in text:
            t = state["t"]
            t["shown"] = time.monotonic()
            after_click = [dt for at, dt in state["rounds"] if at >= t["click"]]
            say(stop_click=t["click_returned"] - t["click"], stop_engine=t.get("engine_done", t["shown"]) - t["click"],
                stop_shown=t["shown"] - t["click"], finish=t.get("finish"),
                round_s=statistics.median(state["before"]) if state["before"] else None,
                last_round_s=(after_click[0] if after_click else (state["before"] or [None])[-1]),
                rounds_before=len(state["before"]))
            state["phase"] = "second"
            state["rounds"] = []
            QTimer.singleShot(300, lambda: send(window(), PROMPTS[1]))

    def start() -> None:
        w = window()
        if w is None or w.controller.loaded is None:
            QTimer.singleShot(50, start)
            return
        if os.environ.get("STOP_CLOSE_PROFILE"):
            _time_steps(w, say)
        w.controller.worker.sig_event.connect(on_engine_event, Qt.ConnectionType.DirectConnection)
        w.controller.sig_reply_started.connect(lambda r: r.changed.connect(on_tokens))
        w.chat.document().contentsChanged.connect(on_document_changed)
        w.controller.sig_reply_finished.connect(lambda _m: on_document_changed())
        say(loaded=True)
        state["phase"] = "first"
        send(w, PROMPTS[0])

    app.aboutToQuit.connect(lambda: say(quit_at=time.monotonic()))
    QTimer.singleShot(0, start)
    code = app_main.main([])
    say(exec_returned=time.monotonic())
    return code


def _time_steps(w, say) -> None:
    """STOP_CLOSE_PROFILE=1: how long each step of closing takes (wrapped on these instances only)."""
    c = w.controller
    steps = [(c.worker, "release"), (c.thread, "wait"), (c.store, "close"), (c.prefs, "close"),
             (c.replies, "close"), (c.replies, "flush"), (c.pairing, "close"), (c, "update_settings"),
             (c.worker, "close_soon"), (c.replies, "stop")]
    for obj, name in steps:
        real = getattr(obj, name)

        def timed(*a, _real=real, _name=f"{type(obj).__name__}.{name}", **k):
            t = time.monotonic()
            try:
                return _real(*a, **k)
            finally:
                say(step=_name, s=round(time.monotonic() - t, 4))

        setattr(obj, name, timed)


# -- the parent: busy loop, repeats, summary ---------------------------------------------------------------
def prepare_home(home: Path, models: Path, threads: int | None) -> None:
    os.environ["DRAFTLIGHT_HOME"] = str(home)
    from app.core.settings import AppSettings, save_settings

    target = models / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    draft = models / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if not (target.is_file() and draft.is_file()):
        sys.exit(f"the real pair is not installed in {models} (python -m engine models install-default)")
    save_settings(AppSettings(target=str(target), drafter=f"lookup+{draft}", first_run_done=True, max_tokens=600,
                              n_threads=threads))


def one_repeat(env: dict, after: int, timeout: float) -> dict:
    proc = subprocess.Popen([sys.executable, __file__, "--child", "--after", str(after)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    result: dict = {}
    exit_at: list[float] = []
    waiter = threading.Thread(target=lambda: (proc.wait(), exit_at.append(time.monotonic())), daemon=True)
    waiter.start()
    try:
        for line in proc.stdout:
            print("  child:", line.rstrip()[:300], file=sys.stderr, flush=True)
            try:
                result.update(json.loads(line))
            except ValueError:
                continue
        waiter.join(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            result["killed"] = True
    if exit_at and "close_at" in result:
        result["close_exit"] = exit_at[0] - result["close_at"]
        if "quit_at" in result:
            result["close_loop"] = result["quit_at"] - result["close_at"]
    result["returncode"] = proc.returncode
    if proc.returncode:
        result["stderr"] = proc.stderr.read()[-2000:]
    return result


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    v = sorted(values)
    q = statistics.quantiles(v, n=10, method="inclusive") if len(v) >= 2 else [v[0]] * 9
    return f"{statistics.median(v):.3f} | {q[8] if len(v) >= 2 else v[0]:.3f} | {v[-1]:.3f}"


def summary(runs: list[dict], busy: bool) -> str:
    ok = [r for r in runs if "stop_shown" in r]
    rows = [("Stop click (GUI thread held)", "stop_click"), ("Stop to engine DoneEvent", "stop_engine"),
            ("Stop to \"(stopped)\" shown", "stop_shown"), ("median round before the stop", "round_s"),
            ("the round the stop fell in", "last_round_s"), ("Close call (GUI thread held)", "close_call_s"),
            ("Close to the event loop's end", "close_loop"),
            ("Close to process exit", "close_exit")]
    lines = [f"Repeats: {len(runs)} ({len(ok)} complete); busy loop on core 0: {'yes' if busy else 'no'}; "
             f"machine: {os.cpu_count()} cores", "", "| seconds | median | p90 | max |", "|---|---|---|---|"]
    for label, key in rows:
        lines.append(f"| {label} | {spread([r[key] for r in ok if r.get(key) is not None])} |")
    within = [r for r in ok if r.get("last_round_s")]
    if within:
        n = sum(r["stop_engine"] <= 1.05 * r["last_round_s"] + 0.05 for r in within)
        lines.append("")
        lines.append(f"Stops that ended within the round in flight (engine DoneEvent no later than that round's "
                     f"drafting + verifying, +50 ms): {n} of {len(within)}.")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--after", type=int, default=24, help="reply tokens on screen before Stop / Close")
    ap.add_argument("--no-busy", action="store_true", help="no busy loop")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the app's, all cores)")
    ap.add_argument("--models", type=Path, default=None, help="folder of the installed pair")
    ap.add_argument("--home", type=Path, default=Path(tempfile.gettempdir()) / "draftlight-stop-close",
                    help="the app's home for the runs (kept: the pair's measured speed is reused next time)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.after)

    from engine import paths

    models = args.models or paths.models_dir()
    home = args.home
    home.mkdir(parents=True, exist_ok=True)
    prepare_home(home, models, args.threads)
    env = dict(os.environ, DRAFTLIGHT_HOME=str(home), DRAFTLIGHT_MODELS=str(models), PYTHONPATH=str(ROOT))
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    spinner = None if args.no_busy else subprocess.Popen([sys.executable, "-c", SPIN])
    runs: list[dict] = []
    try:
        for i in range(args.repeats):
            for f in (home / "data").glob("chats.sqlite3*"):
                f.unlink()  # each repeat opens on an empty history: "(stopped)" is the new reply's
            r = one_repeat(env, args.after, args.timeout)
            r["repeat"] = i
            runs.append(r)
            print(json.dumps(r), flush=True)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    text = summary(runs, spinner is not None)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
        (args.out / "summary.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
