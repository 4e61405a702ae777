"""Screenshots of the window under careless and hostile use, on a real display (Xvfb) with tiny real models:
a big chat export being read (progress and Cancel), a file that is not an export refused, twenty attached files
in rows, several refused files listed in one notice.

    Xvfb :73 -screen 0 1280x800x24 &  DISPLAY=:73 .venv/bin/python scripts/careless_shots.py

Works in a temporary home (nothing of yours is touched); writes PNGs to resources/screenshots/.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
HOME = Path(tempfile.mkdtemp(prefix="draftlight-careless-shots-"))
os.environ["DRAFTLIGHT_HOME"] = str(HOME / "home")
os.environ.setdefault("DRAFTLIGHT_THREADS", "1")

from PySide6.QtCore import QEventLoop, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QFileDialog  # noqa: E402

import tiny_models  # noqa: E402
from app.core.settings import AppSettings, Theme, save_settings  # noqa: E402

OUT = ROOT / "resources" / "screenshots"


def spin(ms: int) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def until(check, ms: int = 30_000) -> None:
    waited = 0
    while not check():
        spin(20)
        waited += 20
        if waited > ms:
            raise TimeoutError("the window did not get there")


def shot(w, name: str, whole_screen: bool = False) -> None:
    spin(150)
    screen = w.screen()
    if whole_screen:  # a dialog of its own is a window of its own: take the screen around the main window
        g = w.frameGeometry().adjusted(-4, -4, 4, 4)
        pix = screen.grabWindow(0, g.x(), g.y(), g.width(), g.height())
    else:
        pix = w.grab()
    path = OUT / name
    pix.save(str(path))
    print(f"wrote {path} ({pix.width()}x{pix.height()})")


def main() -> int:
    app = QApplication.instance() or QApplication(sys.argv)
    models = tiny_models.write_standard_set(HOME / "models")
    folder = HOME / "home" / "data" / "models"
    folder.mkdir(parents=True, exist_ok=True)
    target, drafter = (Path(models[k]).rename(folder / Path(models[k]).name) for k in ("target", "drafter"))
    save_settings(AppSettings(target=str(target), drafter=str(drafter), draft_max=4, max_tokens=40,
                              theme=Theme.LIGHT, n_threads=1))
    from app.window import MainWindow

    w = MainWindow()
    w.resize(800, 600)
    w.move(40, 40)
    w.show()
    until(lambda: w.controller.loaded is not None, 60_000)
    files = HOME / "files"
    files.mkdir()

    # A big export, read off the GUI thread: the progress dialog with Cancel.
    big = files / "exported-chat.jsonl"
    with open(big, "w") as fh:
        fh.write(json.dumps({"type": "conversation", "title": "Big chat"}) + "\n")
        for n in range(6000):
            fh.write(json.dumps({"type": "message", "id": 2 * n + 1, "role": "user", "content": f"question {n}"}) + "\n")
            words = [f" w{n}-{i}" for i in range(20)]
            fh.write(json.dumps({"type": "message", "id": 2 * n + 2, "role": "assistant", "content": "".join(words),
                                 "finish_reason": "stop"}) + "\n")
            for i, t in enumerate(words):
                fh.write(json.dumps({"message": 2 * n + 2, "type": "token", "text": t, "token_id": 100 + i,
                                     "source": "target", "round": i + 1, "p": 0.9, "q": None, "index": i}) + "\n")
    QFileDialog.getOpenFileName = staticmethod(lambda *a, **k: (str(big), ""))
    w.import_chat()
    job = w.import_job
    until(lambda: job.dialog.isVisible() and job.dialog.value() > 50)
    shot(w, "import-big-file-progress-cancel.png", whole_screen=True)
    job.cancel()
    job.worker.wait(60)
    spin(100)

    # A file nested thousands deep: refused with its reason.
    deep = files / "deep.jsonl"
    deep.write_text("[" * 10_000 + "]" * 10_000 + "\n")
    QFileDialog.getOpenFileName = staticmethod(lambda *a, **k: (str(deep), ""))
    w.import_chat()
    until(lambda: "deep.jsonl" in w.notice.text())
    shot(w, "import-refused-deeply-nested.png")
    w.notice.hide()

    # Twenty attached files wrap into rows; the window stays 800 px wide.
    twenty = []
    for i in range(20):
        f = files / f"module_{i:02}_helpers.py"
        f.write_text(f"def helper_{i}():\n    return {i}\n")
        twenty.append(str(f))
    w.attachments.add_paths([Path(p) for p in twenty])
    until(lambda: len(w.attachments.chips) == 20 and not w.attachments.reading)
    w.input.setPlainText("What do these helpers have in common?")
    shot(w, "attachments-twenty-files-wrap.png")
    print("window width with twenty files:", w.width())
    w.attachments.clear()
    w.input.clear()

    # Several refused in one pick: one notice lists each with its reason.
    png = files / "screenshot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    blob = files / "model.bin"
    blob.write_bytes(bytes(range(256)) * 4)
    notes = files / "notes.md"
    notes.write_text("# Notes\n")
    w.attachments.add_paths([png, notes, blob, files / "moved-away.txt"])
    until(lambda: "files were not attached" in w.notice.text())
    shot(w, "attachments-refused-files-listed.png")
    w.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
