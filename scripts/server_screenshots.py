"""Screenshots of Models ▸ Local server with a served request live: `python scripts/server_screenshots.py --target T
--draft D` on a display (or Xvfb). A temporary home; the window loads the pair, the server is turned on, and the
`openai` client streams one coding question through it, as another program would.
Writes resources/screenshots/server-streaming.png (mid-stream), server-finished.png and server-screen.png."""
from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's app and engine, not an installed copy
PROMPT = "Write a Python function that returns the n-th Fibonacci number, iteratively, with a docstring."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", required=True, type=Path)
    ap.add_argument("--draft", required=True, type=Path)
    ap.add_argument("--out", type=Path, default=Path("resources/screenshots"))
    ap.add_argument("--k", default="4")
    ap.add_argument("--mid-tokens", type=int, default=50)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="draftlight-server-shots-"))
    os.environ["DRAFTLIGHT_HOME"] = str(home)
    models = home / "data" / "models"
    models.mkdir(parents=True)
    target, draft = models / args.target.name, models / args.draft.name
    target.symlink_to(args.target.resolve())
    draft.symlink_to(args.draft.resolve())

    import openai
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.core.settings import AppSettings, save_settings
    from app.core.theme import Theme
    from engine.drafting.draft_choice import DraftLength, DraftSpec

    save_settings(AppSettings(target=str(target), drafter=DraftSpec(draft), draft_max=DraftLength.parse(args.k),
                              max_tokens=200, theme=Theme.LIGHT, first_run_done=True))
    app = QApplication.instance() or QApplication(sys.argv[:1])
    from app.window import MainWindow

    heartbeat = QTimer(interval=50)
    heartbeat.start()

    def spin(cond, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
        return cond()

    w = MainWindow()
    w.resize(1100, 760)
    w.move(0, 0)
    w.show()
    if not spin(lambda: w.controller.loaded is not None, 600):
        print("the pair did not load", file=sys.stderr)
        return 1
    w.open_local_server()
    dlg = w.server_dialog
    dlg.resize(1150, 700)
    dlg.move(120, 90)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dlg.port.setValue(port)
    dlg.switch.setChecked(True)
    spin(lambda: bool(dlg.address.text()), 30)
    result: dict = {}

    def client() -> None:
        c = openai.OpenAI(base_url=dlg.address.text(), api_key="none", max_retries=0, timeout=600)
        stream = c.chat.completions.create(model=target.name.removesuffix(".gguf"), stream=True, temperature=0,
                                           messages=[{"role": "user", "content": PROMPT}], max_tokens=200,
                                           stream_options={"include_usage": True})
        result["chunks"] = list(stream)

    t = threading.Thread(target=client)
    t.start()
    spin(lambda: dlg.shown is not None and len(dlg.shown.message.tokens) >= args.mid_tokens or not t.is_alive(), 600)
    args.out.mkdir(parents=True, exist_ok=True)
    spin(lambda: False, 0.3)
    dlg.grab().save(str(args.out / "server-streaming.png"))
    spin(lambda: not t.is_alive() and dlg.shown is not None and dlg.shown.finished, 900)
    spin(lambda: False, 0.5)
    dlg.grab().save(str(args.out / "server-finished.png"))
    app.primaryScreen().grabWindow(0).save(str(args.out / "server-screen.png"))
    usage = result["chunks"][-1].usage if result.get("chunks") else None
    print("usage:", usage)
    dlg.switch.setChecked(False)
    w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
