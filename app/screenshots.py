"""Take the README screenshots with real models: `python -m app.screenshots --target T.gguf --draft D.gguf`.

Run it on a real display or under Xvfb (`xvfb-run -a -s "-screen 0 1440x900x24" python -m app.screenshots ...`).
It works in a temporary home (your chats and settings are not touched), sends one coding prompt and
captures: the reply mid-stream with the stats panel, the finished reply with rejected drafts shown
and a token's tooltip, the dark theme; then a prose answer with a list, regenerated with Auto so the
reply shows its two alternatives; the Models dialog (pairs and catalog) and Compare.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROMPT = ("Write a Python function is_palindrome(s) that ignores case and punctuation, "
          "with a docstring and two doctest examples.")
LIST_PROMPT = "Give four short tips for writing readable Python, as a bulleted list with one line each."


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, type=Path)
    ap.add_argument("--draft", required=True, type=Path)
    ap.add_argument("--extra", type=Path, action="append", default=[],
                    help="another GGUF to show in the Models dialog (e.g. one that does not pair)")
    ap.add_argument("--out", type=Path, default=Path("resources/screenshots"))
    ap.add_argument("--k", type=int, default=4, help="fixed draft length (default 4)")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--mid-tokens", type=int, default=70, help="tokens on screen for the mid-stream shot")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    for p in (args.target, args.draft, *args.extra):
        if not p.is_file():
            print(f"screenshots: {p} is not a file", file=sys.stderr)
            return 2
    home = Path(tempfile.mkdtemp(prefix="draftlight-shots-"))
    os.environ["DRAFTLIGHT_HOME"] = str(home)
    models = home / "data" / "models"
    models.mkdir(parents=True)
    names = {args.target: "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", args.draft: "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"}
    links = {}
    for src in (args.target, args.draft, *args.extra):
        dest = models / names.get(src, src.name)
        dest.symlink_to(src.resolve())
        links[src] = dest

    from PySide6.QtCore import QEventLoop, QPoint, QTimer
    from PySide6.QtGui import QCursor
    from PySide6.QtWidgets import QApplication, QToolTip

    from app.core.settings import AppSettings, save_settings
    from app.core.theme import Theme
    from engine.drafting.draft_choice import DraftLength, DraftSpec

    save_settings(AppSettings(target=str(links[args.target]), drafter=DraftSpec(links[args.draft]),
                              draft_max=DraftLength.fixed(args.k),
                              max_tokens=args.max_tokens, theme=Theme.LIGHT, n_threads=args.threads,
                              first_run_done=True))
    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Draftlight")
    from app.window import MainWindow

    args.out.mkdir(parents=True, exist_ok=True)

    heartbeat = QTimer(interval=50)  # wakes the waiting loop below to look at its condition
    heartbeat.start()

    def spin(cond: Callable[[], bool], timeout: float) -> bool:
        # Sleep in the event loop between events: a busy loop here would take a core from llama.cpp.
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
        return cond()

    def settle(seconds: float = 0.4) -> None:
        spin(lambda: False, seconds)

    def shot(widget, name: str) -> None:
        settle()
        path = args.out / name
        widget.grab().save(str(path))
        print(f"  {path}")

    def screen_shot(name: str) -> None:
        settle()
        path = args.out / name
        app.primaryScreen().grabWindow(0).save(str(path))
        print(f"  {path}")

    w = MainWindow()
    w.resize(1400, 860)
    w.move(0, 0)
    w.show()
    c = w.controller
    print("loading the pair…")
    if not spin(lambda: c.loaded is not None, 300):
        print(f"screenshots: the pair did not load: {w.notice.text() or w.status_label.text()}", file=sys.stderr)
        return 1
    w.input.setPlainText(PROMPT)
    w._send(PROMPT)
    if not spin(lambda: len(list(w.chat.token_fragments())) >= args.mid_tokens or not c.busy, 600):
        return 1
    shot(w, "chat-streaming.png")
    gaps: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    probe = QTimer(interval=10)
    probe.timeout.connect(tick)
    probe.start()
    spin(lambda: not c.busy, 900)
    probe.stop()
    if gaps:
        print(f"  event loop while streaming: longest gap {max(gaps) * 1000:.0f} ms over {len(gaps)} ticks of 10 ms")
    w.act_rejected.trigger()
    # A token's tooltip: find a correction on screen and hover it.
    frag = next((f for f in w.chat.token_fragments() if f.mark.value == "correction"), None)
    if frag is not None:
        cur = w.chat.textCursor()
        cur.setPosition(frag.position + 1)
        w.chat.setTextCursor(cur)
        w.chat.ensureCursorVisible()
        settle()
        rect = w.chat.cursorRect(cur)
        local = QPoint(rect.left() - 2, rect.center().y())
        QCursor.setPos(w.chat.viewport().mapToGlobal(local))
        QToolTip.showText(w.chat.viewport().mapToGlobal(local), w.chat.tooltip_for(frag), w.chat)
        screen_shot("chat-rejected-tooltip.png")
        QToolTip.hideText()
    shot(w, "chat-finished-rejected.png")
    w.act_rejected.trigger()

    c.update_settings(theme=Theme.DARK)
    shot(w, "chat-dark.png")
    c.update_settings(theme=Theme.LIGHT)

    # A prose answer with a list, then the same question answered again with Auto: two alternatives.
    w._send(LIST_PROMPT)
    spin(lambda: c.busy, 30)
    spin(lambda: not c.busy, 900)
    shot(w, "chat-list.png")
    c.update_settings(draft_max=DraftLength.AUTO)
    last = c.messages[-1]
    w.chat.action_requested.emit("regenerate_current", last.id)
    spin(lambda: c.busy, 30)
    spin(lambda: not c.busy, 900)
    shot(w, "chat-alternatives.png")

    from app.models.models_dialog import ModelsDialog

    dlg = ModelsDialog(c, w)
    dlg.resize(980, 700)
    dlg.show()
    spin(lambda: dlg.installed.pairs.topLevelItemCount() > 0, 30)
    spin(lambda: "RAM" in dlg.hardware.report.text(), 30)
    shot(dlg, "models-installed.png")
    dlg.tabs.setCurrentWidget(dlg.catalog)
    shot(dlg, "models-catalog.png")
    dlg.tabs.setCurrentWidget(dlg.hardware)
    spin(lambda: "needs" in dlg.hardware.estimate.text(), 30)
    shot(dlg, "models-hardware.png")
    dlg.close()

    w.open_compare()
    from app.stats.compare_dialog import CompareDialog

    cmp = next((x for x in app.topLevelWidgets() if isinstance(x, CompareDialog)), None)
    if cmp is not None:
        cmp.resize(1200, 700)
        spin(lambda: cmp.complete, 900)  # both runs, speculative then plain, have finished
        shot(cmp, "compare.png")
        cmp.close()
    w.close()
    print(f"temporary home left at {home}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
