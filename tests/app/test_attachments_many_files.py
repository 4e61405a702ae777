"""Many attached files, and several refused at once, in the real window: the Attach action and Ctrl+V with real
files on disk, a real settings.json.

Twenty files once put twenty chips in one row that never wrapped: the window grew to 3,589 px, Send, Stop and
the context meter went off screen, and that width was saved. Several refused files in one pick or paste showed
only the last reason.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402

from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtWidgets import QFileDialog  # noqa: E402
from test_app_attachments import chips_read, paste, urls_mime  # noqa: E402
from app_support import install_tiny, open_window  # noqa: E402

from app.core.settings import settings_path  # noqa: E402


def inside(w, widget) -> bool:
    """`widget` lies wholly within the window's width."""
    left = widget.mapTo(w, QPoint(0, 0)).x()
    return widget.isVisible() and left >= 0 and left + widget.width() <= w.width()


def test_twenty_files_wrap_into_rows_and_the_window_stays_on_its_screen(qtbot, tiny, isolated_home, tmp_path,
                                                                         monkeypatch):
    install_tiny(tiny, isolated_home)
    files = []
    for i in range(20):
        f = tmp_path / f"a-rather-long-file-name-number-{i:02}.py"
        f.write_text(f"x = {i}\n")
        files.append(str(f))
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: (files, "All files (*)"))
    w = open_window(qtbot)
    w.resize(800, 600)
    screen = w.screen().availableGeometry()
    qtbot.mouseClick(w.attach_button, Qt.MouseButton.LeftButton)
    chips = chips_read(qtbot, w, 20)
    qtbot.wait(10)  # one turn of the event loop: layouts settle
    assert w.width() <= screen.width() and w.width() == 800
    assert len({c.mapTo(w, QPoint(0, 0)).y() for c in chips}) >= 3  # rows, not one row
    assert all(c.mapTo(w, QPoint(0, 0)).x() + c.width() <= w.width() for c in chips if c.isVisible())
    for widget in (w.send_button, w.stop_button, w.attach_button, w.input):
        assert inside(w, widget), widget.accessibleName()
    w.close()
    saved = json.loads(settings_path().read_text())
    from PySide6.QtCore import QByteArray
    from PySide6.QtWidgets import QWidget
    probe = QWidget()
    probe.restoreGeometry(QByteArray.fromBase64(saved["window_geometry"].encode("ascii")))
    assert probe.width() <= screen.width()


def test_every_refused_file_of_one_pick_is_listed_with_its_reason_in_one_notice(qtbot, tiny, isolated_home,
                                                                                 tmp_path, monkeypatch):
    install_tiny(tiny, isolated_home)
    good, png, binary = tmp_path / "notes.txt", tmp_path / "shot.png", tmp_path / "blob.bin"
    good.write_text("hello")
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    binary.write_bytes(bytes(range(256)))
    gone = tmp_path / "gone.txt"
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        lambda *a, **k: ([str(png), str(good), str(binary), str(gone)], "All files (*)"))
    w = open_window(qtbot)
    qtbot.mouseClick(w.attach_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.notice.isVisible() and "files were not attached" in w.notice.text(), timeout=10_000)
    lines = w.notice.text().split("\n")
    assert lines[0] == "3 of the 4 files were not attached:"
    assert sorted(lines[1:]) == sorted([
        "• shot.png is an image: the models here read text only, so they cannot see it. Describe it in words, or "
        "attach text, code or PDF files.",
        "• blob.bin is not a text file (it holds binary data): attach text, code or PDF files.",
        "• gone.txt was not found: it was moved or deleted. Attach it again from where it is now.",
    ])
    assert [c.name for c in w.attachments.chips] == ["notes.txt"]


def test_pasting_four_files_lists_each_refused_one(qtbot, tiny, isolated_home, tmp_path):
    install_tiny(tiny, isolated_home)
    pngs = []
    for i in range(4):
        p = tmp_path / f"shot{i}.png"
        p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
        pngs.append(p)
    w = open_window(qtbot)
    paste(qtbot, w, urls_mime(*pngs))
    qtbot.waitUntil(lambda: w.notice.isVisible() and "files were not attached" in w.notice.text(), timeout=10_000)
    lines = w.notice.text().split("\n")
    assert lines[0] == "4 of the 4 files were not attached:"
    assert sorted(line.split(" ")[1] for line in lines[1:]) == [f"shot{i}.png" for i in range(4)]
    assert w.attachments.chips == [] and w.input.toPlainText() == ""
