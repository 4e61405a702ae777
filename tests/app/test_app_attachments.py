"""Attachments in the window: drop, paste and the Attach action on the real widgets, chips, what the engine is
given, the SQLite file, a restart, and every way a file can be refused with nothing typed lost.

Tiny real models on the engine thread, a real SQLite file, the real Qt event loop (offscreen). The texts
the model must be given are written out here; token counts come from llama-cpp-python's own tokenizer
(a vocab-only Llama), not from the app's code.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import sqlite3  # noqa: E402
from pathlib import Path  # noqa: E402

from attachment_files import write_encrypted_pdf, write_text_pdf  # noqa: E402
from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl  # noqa: E402
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication, QImage  # noqa: E402
from PySide6.QtWidgets import QApplication, QFileDialog  # noqa: E402
from test_app_history_drafts import CHATML_PROMPT, model_facts, ngram_counts, status_until  # noqa: E402
from app_support import REPLY_TIMEOUT_MS, install_tiny, open_window  # noqa: E402

from app.chat.input_box import IMAGE_REFUSED  # noqa: E402
from app.history.records import Role  # noqa: E402
from app.history.store import database_path  # noqa: E402
from engine.drafting.history_index import HistoryIndex, default_folder, index_path  # noqa: E402

CODE = "def total(xs):\n    return sum(xs)\n"
QUESTION = "What does it do?"
#: What the model must be given for CODE attached as totals.py and QUESTION (the file's name, then a fence).
SENT = "totals.py\n```python\ndef total(xs):\n    return sum(xs)\n```\n\nWhat does it do?"


def urls_mime(*paths: Path) -> QMimeData:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    return mime


def drop(w, *paths: Path) -> bool:
    """Drag files onto the message box and drop them there, as a file manager does; whether the drag was accepted."""
    vp = w.input.viewport()
    mime = urls_mime(*paths)
    at = vp.rect().center()
    enter = QDragEnterEvent(at, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(vp, enter)
    event = QDropEvent(QPointF(at), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(vp, event)
    return enter.isAccepted()


def paste(qtbot, w, mime: QMimeData) -> None:
    """Put `mime` on the clipboard (a file manager's Copy) and press Ctrl+V in the message box."""
    QGuiApplication.clipboard().setMimeData(mime)
    w.input.setFocus()
    qtbot.keyClick(w.input, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    QGuiApplication.clipboard().clear()  # the clipboard owns `mime`: left there, interpreter exit frees it twice


def chips_read(qtbot, w, n: int) -> list:
    qtbot.waitUntil(lambda: len(w.attachments.chips) == n and not w.attachments.reading, timeout=10_000)
    return w.attachments.chips


def requests(w) -> list:
    got: list = []
    w.controller.replies.sig_request.connect(got.append)
    return got


def rows(sql: str, *args) -> list[tuple]:
    with sqlite3.connect(database_path()) as db:
        return db.execute(sql, args).fetchall()


def send_and_wait(qtbot, w):
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    return blocker.args[0]


def test_a_dropped_file_is_a_chip_the_model_reads_it_and_it_is_kept_with_the_chat(qtbot, tiny, isolated_home, tmp_path):
    install_tiny(tiny, isolated_home, max_tokens=8)
    code = tmp_path / "totals.py"
    code.write_text(CODE)
    w = open_window(qtbot)
    assert not w.attachments.isVisible()
    assert drop(w, code)
    (chip,) = chips_read(qtbot, w, 1)
    assert w.attachments.isVisible() and chip.isVisible()
    assert chip.label.text() == "totals.py · 34 bytes"
    assert w.input.toPlainText() == ""  # the file is attached, not its path typed
    sent = requests(w)
    w.input.setPlainText(QUESTION)
    reply = send_and_wait(qtbot, w)
    assert sent[-1].messages == ({"role": "user", "content": SENT},)
    assert w.attachments.chips == [] and not w.attachments.isVisible() and w.input.toPlainText() == ""
    question = w.controller.messages[0]
    assert question.content == QUESTION and [a.name for a in question.attachments] == ["totals.py"]
    assert rows("SELECT message_id, idx, name, size, kind, text FROM attachments") == [
        (question.id, 0, "totals.py", 34, "text", CODE)]
    assert "Attached   totals.py · 34 bytes " in w.chat.toPlainText()
    assert [c.id for c in w.controller.store.conversations("totals.p")] == [w.controller.current_id]  # found by name
    w.close()
    again = open_window(qtbot)  # a restart reads it back
    q = again.controller.messages[0]
    assert q.attachments[0].text == CODE and "Attached   totals.py · 34 bytes " in again.chat.toPlainText()
    # The next question's history gives the file again, as the first time.
    sent = requests(again)
    again.input.setPlainText("And now?")
    send_and_wait(qtbot, again)
    assert sent[-1].messages[0] == {"role": "user", "content": SENT}
    assert sent[-1].messages[1] == {"role": "assistant", "content": reply.text}


def test_pasted_files_attach_a_pdf_reads_as_text_and_a_chip_is_removed_with_its_button(qtbot, tiny, isolated_home,
                                                                                       tmp_path):
    install_tiny(tiny, isolated_home, max_tokens=8)
    pdf = write_text_pdf(tmp_path / "report.pdf", [["Revenue rose 12%"], ["Costs fell"]])
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n")
    w = open_window(qtbot)
    w.input.setPlainText("Summarise.")
    paste(qtbot, w, urls_mime(pdf, notes))
    chips = chips_read(qtbot, w, 2)
    assert [c.name for c in chips] == ["report.pdf", "notes.md"]
    assert w.input.toPlainText() == "Summarise."  # nothing of the paste went into the text
    qtbot.mouseClick(chips[1].remove, Qt.MouseButton.LeftButton)
    assert [c.name for c in w.attachments.chips] == ["report.pdf"]
    sent = requests(w)
    send_and_wait(qtbot, w)
    assert sent[-1].messages[-1]["content"] == "report.pdf\n```\nRevenue rose 12%\n\nCosts fell\n```\n\nSummarise."
    # Plain text pasted is still typed.
    text = QMimeData()
    text.setText("typed words")
    paste(qtbot, w, text)
    assert w.input.toPlainText() == "typed words" and w.attachments.chips == []


def test_the_attach_action_adds_the_files_chosen_in_the_dialog(qtbot, tiny, isolated_home, tmp_path, monkeypatch):
    install_tiny(tiny, isolated_home, max_tokens=8)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("alpha")
    b.write_text("beta")
    asked = []
    monkeypatch.setattr(QFileDialog, "getOpenFileNames",
                        lambda *args, **kw: asked.append(args[1]) or ([str(a), str(b)], "All files (*)"))
    w = open_window(qtbot)
    w.input.setFocus()
    qtbot.keyClick(w.input, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert asked == ["Attach files"]
    assert [c.name for c in chips_read(qtbot, w, 2)] == ["a.txt", "b.txt"]
    qtbot.mouseClick(w.attach_button, Qt.MouseButton.LeftButton)  # the button: the same action
    assert asked == ["Attach files", "Attach files"] and len(chips_read(qtbot, w, 4)) == 4
    for chip in w.attachments.chips[2:]:
        qtbot.mouseClick(chip.remove, Qt.MouseButton.LeftButton)
    sent = requests(w)
    assert w.input.toPlainText() == ""
    send_and_wait(qtbot, w)  # files and no words: Enter sends them
    assert sent[-1].messages == ({"role": "user", "content": "a.txt\n```\nalpha\n```\n\nb.txt\n```\nbeta\n```"},)
    assert w.controller.current_conversation().title == "a.txt"


def test_images_binary_files_and_bad_pdfs_are_refused_with_a_reason_and_nothing_typed_is_lost(
        qtbot, tiny, isolated_home, tmp_path):
    install_tiny(tiny, isolated_home, max_tokens=8)
    png = tmp_path / "shot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    latin = tmp_path / "old.txt"
    latin.write_bytes("naïve".encode("latin-1"))
    locked = write_encrypted_pdf(tmp_path / "locked.pdf", write_text_pdf(tmp_path / "x.pdf", [["secret"]]), "pw")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog")
    w = open_window(qtbot)
    w.input.setPlainText("keep me")
    for path, said in ((png, "shot.png is an image: the models here read text only, so they cannot see it."),
                       (latin, "old.txt is not UTF-8 text (byte 2 is 0xef"),
                       (locked, "locked.pdf is protected by a password"),
                       (broken, "broken.pdf could not be read as a PDF")):
        drop(w, path)
        qtbot.waitUntil(lambda said=said: said in w.notice.text(), timeout=10_000)
        assert w.attachments.chips == [] and w.input.toPlainText() == "keep me"
    image = QMimeData()
    image.setImageData(QImage(8, 8, QImage.Format.Format_RGB32))
    paste(qtbot, w, image)
    assert w.notice.text() == IMAGE_REFUSED and w.input.toPlainText() == "keep me" and w.attachments.chips == []
    assert rows("SELECT COUNT(*) FROM messages") == [(0,)]


def test_a_file_deleted_after_it_was_attached_stops_the_send_and_loses_nothing(qtbot, tiny, isolated_home, tmp_path):
    install_tiny(tiny, isolated_home, max_tokens=8)
    gone, kept = tmp_path / "gone.txt", tmp_path / "kept.txt"
    gone.write_text("soon deleted")
    kept.write_text("stays")
    w = open_window(qtbot)
    drop(w, gone, kept)
    chips_read(qtbot, w, 2)
    gone.unlink()
    w.input.setPlainText("my question")
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    assert w.notice.text() == ("gone.txt was moved or deleted after it was attached. Attach it again, or remove it (✕) "
                               "to send without it. Nothing was sent.")
    assert w.input.toPlainText() == "my question" and [c.name for c in w.attachments.chips] == ["gone.txt", "kept.txt"]
    assert not w.controller.busy and rows("SELECT COUNT(*) FROM messages") == [(0,)]
    # A file changed since it was attached is read again: the model reads it as it is when sent.
    kept.write_text("changed since")
    qtbot.mouseClick(w.attachments.chips[0].remove, Qt.MouseButton.LeftButton)
    sent = requests(w)
    send_and_wait(qtbot, w)
    assert sent[-1].messages[-1]["content"] == "kept.txt\n```\nchanged since\n```\n\nmy question"


def test_a_file_too_large_for_the_context_is_refused_with_its_token_count_before_a_reply(qtbot, tiny, isolated_home,
                                                                                         tmp_path):
    installed = install_tiny(tiny, isolated_home, n_ctx=256, max_tokens=16)
    big = tmp_path / "big.txt"
    big.write_text("the model is fast and the draft is right " * 60)
    import llama_cpp

    vocab = llama_cpp.Llama(str(installed["target"]), vocab_only=True, verbose=False)
    body = "big.txt\n```\n" + big.read_text() + "\n```"  # the fenced form, written out
    n = len(vocab.tokenize(body.encode(), add_bos=False, special=False))
    whole = len(vocab.tokenize(CHATML_PROMPT.format(body + "\n\nsummarise").encode(), add_bos=True, special=True))
    del vocab
    w = open_window(qtbot)
    drop(w, big)
    chips_read(qtbot, w, 1)
    w.input.setPlainText("summarise")
    with qtbot.waitSignal(w.controller.sig_input_restore, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    assert w.notice.text().startswith(
        f"big.txt is {n:,} tokens, and the model's context holds 256 (with your message and the chat template, "
        f"{whole:,}). Nothing was sent: remove the file (✕)")
    assert w.input.toPlainText() == "summarise" and [c.name for c in w.attachments.chips] == ["big.txt"]
    assert w.controller.messages == [] and rows("SELECT COUNT(*) FROM messages") == [(0,)]
    assert rows("SELECT COUNT(*) FROM attachments") == [(0,)] and w.send_button.isEnabled()


def test_an_unanswered_question_with_a_file_is_retried_with_its_file(qtbot, tiny, isolated_home, tmp_path):
    from engine.attachments import Attachment, AttachmentKind

    from app.history.store import ChatStore

    install_tiny(tiny, isolated_home, max_tokens=8)
    store = ChatStore()
    conv = store.new_conversation("left unanswered")
    q = store.add_message(conv.id, Role.USER, QUESTION, attachments=[Attachment("totals.py", 34, AttachmentKind.TEXT,
                                                                                CODE)])
    store.close()
    w = open_window(qtbot)
    sent = requests(w)
    from app.chat.actions import MessageAction
    from app.chat.app_links import LinkKind, href
    from chat_view_support import click_link

    qtbot.waitUntil(lambda: any(m.id == q.id for m in w.chat.messages), timeout=5000)
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        click_link(qtbot, w.chat, href(LinkKind.ACTION, MessageAction.REGENERATE.value, q.id))
    assert sent[-1].messages == ({"role": "user", "content": SENT},)


def test_the_index_of_past_chats_counts_the_attached_text(qtbot, tiny, isolated_home, tmp_path):
    installed = install_tiny(tiny, isolated_home, drafter="lookup", history_drafts=True, max_tokens=8)
    code = tmp_path / "totals.py"
    code.write_text(CODE)
    w = open_window(qtbot)
    status_until(qtbot, w, lambda s: s.open)
    drop(w, code)
    chips_read(qtbot, w, 1)
    w.input.setPlainText(QUESTION)
    reply = send_and_wait(qtbot, w)
    status_until(qtbot, w, lambda s: " 1 repl" in s.summary)
    fp, prompt = model_facts(installed["target"], CHATML_PROMPT.format(SENT))
    index = HistoryIndex.open(index_path(default_folder(), fp), fp)
    reference = ngram_counts(prompt + [t.token_id for t in reply.tokens])
    assert index.entries == sum(len(c) for c in reference.values())
    for context, nexts in reference.items():
        assert index.continuations(context) == dict(nexts), context
    _, in_file = model_facts(installed["target"], "return sum(xs)")
    assert index.continuations(tuple(in_file[1:4])) == {in_file[4]: 1}  # from the file's text, after its BOS
