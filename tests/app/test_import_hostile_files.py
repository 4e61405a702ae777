"""Importing files that are not chat exports, or are exports edited by hand, as a careless or hostile person would:
Ctrl+O in the real window, the file picked in the (patched) file dialog, real files on disk, a real SQLite file.

Each file here broke the import before: a deeply nested line was an "internal error" with a traceback, a big file
froze the window while it was read, a hand-edited reply showed tokens that were not its text.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402
import sqlite3  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QFileDialog, QProgressDialog, QPushButton  # noqa: E402
from app_support import install_tiny, open_window  # noqa: E402

from app.history.store import database_path  # noqa: E402


def conversations() -> int:
    with sqlite3.connect(database_path()) as db:
        return db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0]


def press_import(qtbot, w, monkeypatch, path: Path) -> None:
    """Ctrl+O, and the file dialog answers with `path` (what the person picked)."""
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), "JSON Lines (*.jsonl)"))
    w.input.setFocus()
    qtbot.keyClick(w.input, Qt.Key.Key_O, Qt.KeyboardModifier.ControlModifier)


def import_said(qtbot, w, monkeypatch, path: Path) -> str:
    before = w.notice.text()
    press_import(qtbot, w, monkeypatch, path)
    qtbot.waitUntil(lambda: w.notice.isVisible() and w.notice.text() != before, timeout=20_000)
    return w.notice.text()


def message_line(mid, role, content, **kw) -> str:
    return json.dumps({"type": "message", "id": mid, "role": role, "content": content, "target": "t.gguf",
                       "drafter": "none", **kw})


def token_line(mid, i, text) -> str:
    return json.dumps({"message": mid, "type": "token", "text": text, "token_id": 100 + i, "source": "target",
                       "round": i + 1, "p": 0.9, "q": None, "index": i})


@pytest.mark.parametrize("name, body, said", [
    ("deep.jsonl", "[" * 10_000 + "]" * 10_000 + "\n", "line 1 nests lists or objects thousands deep"),
    ("deep-content.jsonl", '{"type": "message", "id": 1, "role": "user", "content": '
     + "[" * 10_000 + "]" * 10_000 + "}\n", "line 1 nests lists or objects thousands deep"),
    ("nested-settings.jsonl", message_line(1, "user", "q", settings={"a": [[[[[[[[[1]]]]]]]]]}) + "\n",
     "line 1 nests lists or objects more than 8 deep"),
    ("control.jsonl", '{"type": "conversation"}\n' + message_line(1, "user", "q") + '\n{"type": "mess\x01age"}\n',
     "line 3 is not JSON (Invalid control character at column 15)"),
    ("latin1.jsonl", message_line(1, "user", "q") + "\n" + '{"x": "caf\xe9"}\n', "line 2 is not UTF-8 text"),
])
def test_a_file_that_is_not_an_export_is_refused_with_its_reason_not_an_internal_error(
        qtbot, tiny, isolated_home, tmp_path, monkeypatch, name, body, said):
    install_tiny(tiny, isolated_home)
    path = tmp_path / name
    path.write_bytes(body.encode("latin-1") if name == "latin1.jsonl" else body.encode("utf-8"))
    w = open_window(qtbot)
    before = conversations()
    text = import_said(qtbot, w, monkeypatch, path)
    assert text.startswith(f"Could not import {name}: {said}"), text
    assert "Something went wrong" not in text and "Nothing was imported." in text
    assert conversations() == before


def test_a_file_larger_than_any_export_is_refused_unread(qtbot, tiny, isolated_home, tmp_path, monkeypatch):
    install_tiny(tiny, isolated_home)
    huge = tmp_path / "huge.jsonl"
    with open(huge, "wb") as fh:
        fh.truncate(65 * 2**20)  # sparse: no disk spent, 65 MB by its size
    w = open_window(qtbot)
    text = import_said(qtbot, w, monkeypatch, huge)
    assert text.startswith("Could not import huge.jsonl: huge.jsonl is 65 MB: a chat export is at most 64 MB")


def test_a_message_longer_than_any_message_draftlight_writes_is_refused(qtbot, tiny, isolated_home, tmp_path,
                                                                        monkeypatch):
    install_tiny(tiny, isolated_home)
    path = tmp_path / "long.jsonl"
    path.write_text(message_line(1, "user", "a " * (4 * 2**20 + 1)) + "\n")  # 8 MB and 2 characters
    w = open_window(qtbot)
    text = import_said(qtbot, w, monkeypatch, path)
    assert text.startswith("Could not import long.jsonl: line 1: its content is 8,388,610 characters long"), text


def big_export(path: Path, replies: int = 4000) -> None:
    """A real-shaped export of `replies` question-and-reply pairs, each reply 20 tokens: about 12 MB."""
    with open(path, "w") as fh:
        fh.write(json.dumps({"type": "conversation", "title": "Big chat"}) + "\n")
        for n in range(replies):
            q, a = 2 * n + 1, 2 * n + 2
            words = [f" w{n}-{i}" for i in range(20)]
            fh.write(message_line(q, "user", f"question {n}") + "\n")
            fh.write(message_line(a, "assistant", "".join(words), finish_reason="stop") + "\n")
            fh.writelines(token_line(a, i, t) + "\n" for i, t in enumerate(words))


def test_a_big_export_is_read_off_the_gui_thread_with_progress_and_cancel_imports_nothing(
        qtbot, tiny, isolated_home, tmp_path, monkeypatch):
    install_tiny(tiny, isolated_home)
    path = tmp_path / "big.jsonl"
    big_export(path)
    assert path.stat().st_size > 8 * 2**20
    w = open_window(qtbot)
    before = conversations()
    press_import(qtbot, w, monkeypatch, path)
    job = w.import_job
    qtbot.waitUntil(lambda: job.dialog.isVisible(), timeout=10_000)
    dialog = w.findChild(QProgressDialog, "import_progress")
    assert dialog is job.dialog and dialog.windowModality() == Qt.WindowModality.WindowModal
    cancel = next(b for b in dialog.findChildren(QPushButton) if b.text() == "Cancel")
    qtbot.mouseClick(cancel, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "cancelled" in w.notice.text(), timeout=10_000)
    assert w.notice.text() == "Import of big.jsonl cancelled. Nothing was imported."
    assert not dialog.isVisible()
    assert job.worker.wait(30)  # the reader saw the flag (or ended): its answer is dropped
    qtbot.wait(50)  # let a late answer arrive, were it to be delivered
    assert conversations() == before


def test_a_big_export_imports_with_progress_while_the_window_keeps_answering(qtbot, tiny, isolated_home, tmp_path,
                                                                            monkeypatch):
    install_tiny(tiny, isolated_home)
    path = tmp_path / "big.jsonl"
    big_export(path)
    w = open_window(qtbot)
    seen: list[int] = []
    press_import(qtbot, w, monkeypatch, path)
    w.import_job.worker.progressed.connect(lambda done, size: seen.append(done))  # delivered on the GUI thread
    with qtbot.waitSignal(w.import_job.finished, timeout=120_000) as done:
        pass
    assert done.args == [True]
    # The GUI thread ran while the file was read: the reader's progress reached it before the end.
    assert len(seen) >= 2 and seen[-1] == path.stat().st_size
    assert w.controller.current_conversation().title == "Big chat"
    assert len(w.controller.messages) == 8000


def test_a_reply_whose_tokens_were_cut_short_by_hand_is_imported_as_its_text_provenance_unknown(
        qtbot, tiny, isolated_home, tmp_path, monkeypatch):
    install_tiny(tiny, isolated_home)
    words = [f" word{i}" for i in range(512)]
    full = "".join(words)
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join([message_line(1, "user", "q"),
                               message_line(2, "assistant", full, finish_reason="stop"),
                               *[token_line(2, i, t) for i, t in enumerate(words[:10])],  # 10 of 512 kept
                               message_line(3, "user", "again"),
                               message_line(4, "assistant", "Replaced by hand.", finish_reason="stop"),
                               *[token_line(4, i, t) for i, t in enumerate([" old", " tokens"])],
                               message_line(5, "user", "and"),
                               message_line(6, "assistant", "kept true", finish_reason="stop"),
                               token_line(6, 0, "kept"), token_line(6, 1, " true")]) + "\n")
    w = open_window(qtbot)
    text = import_said(qtbot, w, monkeypatch, path)
    assert text.startswith("Imported cut.jsonl, but 2 replies' token records do not spell the reply's text"), text
    got = w.controller.messages
    assert [m.text for m in got] == ["q", full, "again", "Replaced by hand.", "and", "kept true"]
    assert got[1].tokens == [] and got[3].tokens == [] and got[1].settings["provenance"] == "unknown"
    assert [t.text for t in got[5].tokens] == ["kept", " true"] and "provenance" not in got[5].settings
    shown = w.chat.document().toPlainText()
    assert full.strip() in shown and "Replaced by hand." in shown and " old tokens" not in shown
    assert shown.count("imported: which model wrote each token is unknown") == 2


def test_an_imported_history_too_long_for_the_context_is_dropped_and_the_reply_says_so(
        qtbot, tiny, isolated_home, tmp_path, monkeypatch):
    from app_support import REPLY_TIMEOUT_MS

    install_tiny(tiny, isolated_home, max_tokens=8, n_ctx=512)
    path = tmp_path / "long-history.jsonl"
    path.write_text("\n".join([message_line(1, "user", "first"),
                               message_line(2, "assistant", "the code", finish_reason="stop"),
                               message_line(3, "user", "hello world " * 2000)]) + "\n")  # never answered
    w = open_window(qtbot)
    press_import(qtbot, w, monkeypatch, path)
    qtbot.waitUntil(lambda: len(w.controller.messages) == 3, timeout=10_000)
    w.input.setFocus()
    qtbot.keyClicks(w.input, "hi")
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    reply = done.args[0]
    assert reply.error == "" and reply.stats is not None
    assert reply.stats.note.startswith("the chat's history does not fit the context: dropped the 3 oldest messages")
