"""The small things a person noticed (issue 22), each on the real widgets: the context meter while a reply
streams, rejected drafts with highlighting off, a drafter named "AWQ" by its metadata, the pair's size and
memory told alike everywhere, the unchecked Auto box in the dark theme, a cut drafter name, notices and
Compare that moved the layout, a tooltip on the blank page, and tables streaming as raw pipes."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import dataclasses  # noqa: E402
import re  # noqa: E402

from PySide6.QtCore import QEvent, QPoint, Qt  # noqa: E402
from PySide6.QtGui import QHelpEvent, QTextCursor  # noqa: E402
from PySide6.QtWidgets import QApplication, QStyle, QStyleOptionButton, QToolTip  # noqa: E402
from test_app_access import contrast  # noqa: E402
from chat_view_support import make_view, tokens_of, user  # noqa: E402
from app_support import (PROMPT, REPLY_TIMEOUT_MS, activate, hold_after_first_token, install_tiny,  # noqa: E402
                              open_window, send)

import tiny_models  # noqa: E402
from app.core.theme import Mark, Theme  # noqa: E402
from app.history.records import Message, Role  # noqa: E402
from engine.decoding.events import FinishReason  # noqa: E402

CTRL, SHIFT = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier
#: The default pair's two files, as the catalog gives their sizes (resources/catalog.json): 1,608,720,832
#: bytes, 1.6 GB in decimal units (the hub's and the engine's); 1.5 was the same bytes in GiB.
DEFAULT_PAIR_SIZE = "1.6 GB"


def settle() -> None:
    """Let the layouts that a resize asked for run (the model bar may switch to two rows, then lay out again)."""
    for _ in range(3):
        QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest.value)
        QApplication.processEvents()


def test_the_context_meter_counts_a_reply_while_it_streams(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    assert w.context_meter.label.text() == "context 0 / 4k"
    gate, hold = hold_after_first_token(w)
    try:
        w.input.setPlainText(PROMPT)
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: w.controller.chat_reply is not None and bool(w.controller.chat_reply.message.tokens),
                        timeout=REPLY_TIMEOUT_MS)  # the first token shown (it is announced as it is added)
        # The question (about 4 characters a token) and the reply's first token, marked as an estimate.
        question = -(-len(PROMPT) // 4)
        assert w.context_meter.label.text() == f"context ≈{question + 1} / 4k"
    finally:
        w.controller.worker.sig_event.disconnect(hold)
        gate.set()
    qtbot.waitUntil(lambda: not w.controller.busy, timeout=REPLY_TIMEOUT_MS)
    done = w.controller.messages[-1]
    assert w.context_meter.label.text() == f"context {done.stats.prompt_tokens + done.stats.tokens} / 4k"


def test_the_context_meter_counts_a_questions_attached_files():
    """Found on the real pair: a question with an 8 KB file showed 'context ≈23 / 4k' while the model read
    some 2,000 tokens of it. 4,000 characters of file are at least 1,000 tokens at four characters a token."""
    from app.chat.context_meter import context_used
    from engine.attachments import Attachment, AttachmentKind

    notes = Attachment("notes.txt", 4000, AttachmentKind.TEXT, "word " * 800)
    question = Message(1, Role.USER, "Summarise this.", "", "", attachments=(notes,))
    used, estimated = context_used([question])
    assert estimated and 1000 <= used < 1100

def test_with_highlighting_off_rejected_drafts_are_not_shown(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    activate(qtbot, w)
    send(qtbot, w)
    qtbot.keyClick(w.input, Qt.Key.Key_R, CTRL | SHIFT)  # View ▸ Show rejected drafts
    assert any(f.mark == Mark.REJECTED for f in w.chat.token_fragments())
    shown = w.chat.toPlainText()
    qtbot.keyClick(w.input, Qt.Key.Key_H, CTRL | SHIFT)  # View ▸ Highlight tokens: off
    assert not any(f.mark == Mark.REJECTED for f in w.chat.token_fragments())
    struck = []
    block = w.chat.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            if it.fragment().charFormat().fontStrikeOut():
                struck.append(it.fragment().text())
            it += 1
        block = block.next()
    assert struck == [] and len(w.chat.toPlainText()) < len(shown)
    assert "plain text" in w.legend.toPlainText()
    assert not w.commands.rejected.isEnabled() and not w.commands.rejected.isChecked()
    assert w.controller.settings.show_rejected  # kept: highlighting on again brings them back
    qtbot.keyClick(w.input, Qt.Key.Key_H, CTRL | SHIFT)
    assert any(f.mark == Mark.REJECTED for f in w.chat.token_fragments()) and w.commands.rejected.isChecked()


def test_a_model_is_named_without_the_format_words_of_its_metadata(qtbot, tiny, isolated_home):
    """The real 0.5B drafter's general.name is "Qwen2.5 Coder 0.5B Instruct AWQ"; it is a Q4_K_M GGUF."""
    from app.control.model_scan import ModelEntry

    awq = ModelEntry(tiny["drafter"], "Qwen2.5 Coder 0.5B Instruct AWQ", "qwen2", 630_167_424, "Q4_K_M", 491_400_064)
    assert awq.label == "Qwen2.5 Coder 0.5B Instruct · Q4_K_M" and awq.short_label == "Qwen2.5 Coder 0.5B"
    gguf = dataclasses.replace(awq, name="Qwen2.5 Coder 1.5B Instruct GGUF", n_params=1_777_088_000)
    assert gguf.label == "Qwen2.5 Coder 1.5B Instruct · Q4_K_M"
    plain = dataclasses.replace(awq, name="tiny-target", n_params=123_456)
    assert plain.label == "tiny-target · 123K · Q4_K_M"  # no size in the name: the count says it

    # In the window: a drafter whose metadata says AWQ is shown with its own quantization.
    folder = isolated_home / "data" / "models"
    folder.mkdir(parents=True)
    made = isolated_home.parent / "awq-drafter.gguf"
    tiny_models.write_tiny_model(made, dataclasses.replace(tiny_models.DRAFTER, name="Tiny Coder 0.1B Instruct AWQ"))
    install_tiny({"target": tiny["target"], "drafter": made}, isolated_home)
    w = open_window(qtbot)
    qtbot.waitUntil(lambda: len(w.bar.drafter_choices()) > 2, timeout=REPLY_TIMEOUT_MS)
    items = [w.bar.drafter.itemText(i) for i in range(w.bar.drafter.count())]
    assert "Tiny Coder 0.1B Instruct · F32" in items and not any("AWQ" in t for t in items), items


def test_the_pairs_download_size_is_one_figure_everywhere(qtbot, tiny, isolated_home):
    """The catalog said 1.5 GB, the default-pair box 1.6 GB: the same bytes in two units, one written by hand."""
    from PySide6.QtWidgets import QLabel

    from app.models.first_run import FirstRunPanel
    from app.models.models_dialog import ModelsDialog

    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    dlg = ModelsDialog(w.controller, w, tab="catalog")
    qtbot.addWidget(dlg)
    default_box = next(lab.text() for lab in dlg.catalog.findChildren(QLabel)
                       if lab.text().startswith("Qwen2.5-Coder 1.5B Instruct (target)"))
    card = next(c for c in dlg.catalog.cards if c.pair.id == "qwen2.5-coder-1.5b").head.text()
    first_run = FirstRunPanel(w.controller)
    qtbot.addWidget(first_run)
    offer = " ".join([first_run.default_button.text()] + [lab.text() for lab in first_run.findChildren(QLabel)])
    assert f", {DEFAULT_PAIR_SIZE}, Apache-2.0." in default_box
    assert f" · {DEFAULT_PAIR_SIZE} download · " in card
    assert f"({DEFAULT_PAIR_SIZE})" in offer
    for text in (default_box, card, offer):  # and no other figure for the same files
        assert {m.group(0) for m in re.finditer(r"\d+(\.\d)? GB(?! of memory)", text)} <= {DEFAULT_PAIR_SIZE}, text


def test_the_pairs_memory_is_the_hardware_tabs_figure(qtbot, real_pair, isolated_home):
    """The catalog said 3 GB where the Hardware tab computed the same pair's need from its files."""
    from app.core.settings import AppSettings, save_settings
    from engine.drafting.draft_choice import DraftSpec
    from app.models.models_dialog import ModelsDialog

    folder = isolated_home / "data" / "models"
    folder.mkdir(parents=True)
    target, drafter = (folder / p.name for p in real_pair)
    for link, real in zip((target, drafter), real_pair):
        link.symlink_to(real)
    save_settings(AppSettings(target=str(target), drafter=DraftSpec.with_lookup(drafter), first_run_done=True, n_threads=1))
    from app.control.controller import ChatController

    controller = ChatController()  # not started: nothing loads, the dialog reads the files' headers only
    try:
        dlg = ModelsDialog(controller, None, tab="hardware")
        qtbot.addWidget(dlg)
        card = next(c for c in dlg.catalog.cards if c.pair.id == "qwen2.5-coder-1.5b")
        qtbot.waitUntil(lambda: "needs about" in dlg.hardware.estimate.text() and "context" in card.head.text()
                        and "catalog" not in card.head.text(), timeout=REPLY_TIMEOUT_MS)
    finally:
        controller.shutdown()
    need = re.search(r"the pair needs about (\d+\.\d GB)", dlg.hardware.estimate.text()).group(1)
    assert f"needs about {need} of memory with a 4,096-token context" in card.head.text()
    # And the figure is the file's: weights + KV cache + compute buffers of both models, read from their headers.
    from engine.models.hardware import model_memory

    total = sum(model_memory(p, 4096).total for p in real_pair)
    assert need == f"{total / 1e9:.1f} GB"


def test_the_unchecked_auto_box_shows_its_edge_in_both_themes(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, theme=Theme.DARK, draft_max=4)
    w = open_window(qtbot)
    for theme in (Theme.DARK, Theme.LIGHT):
        w.controller.update_settings(theme=theme)
        box = w.bar.auto
        assert not box.isChecked()
        img = box.grab().toImage()
        opt = QStyleOptionButton()
        opt.initFrom(box)
        r = box.style().subElementRect(QStyle.SubElement.SE_CheckBoxIndicator, opt, box)
        window = w.palette().color(w.backgroundRole())
        edge = [img.pixelColor(r.left(), y) for y in range(r.top() + 3, r.bottom() - 2)]
        # WCAG's contrast for the edge of a control: 3:1 against what is around it (it was 1.1:1 in the dark).
        assert min(contrast(c, window) for c in edge) >= 3.0, (theme, [c.name() for c in edge], window.name())


def test_none_shows_whole_or_marked_as_cut_in_a_narrow_window(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, drafter="none", drafter_chosen=True)
    w = open_window(qtbot)
    qtbot.waitUntil(lambda: w.bar.drafter.count() > 2, timeout=REPLY_TIMEOUT_MS)
    assert w.bar.drafter.currentText() == "none (plain decoding)"
    for width in (1280, 800):
        w.resize(width, 700)
        qtbot.waitUntil(lambda: w.width() == width)
        settle()
        shown = w.bar.drafter.shown_text()
        assert shown in ("none (plain decoding)", "none (plain)") or ("…" in shown and len(shown) > 5), shown
        room = w.bar.drafter.fontMetrics().horizontalAdvance(shown)
        assert room <= w.bar.drafter.width()
    assert "none (plain decoding)" in w.bar.drafter.toolTip()


def test_a_notice_floats_over_the_chat_without_moving_it(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    activate(qtbot, w)
    before = (w.chat_pane.geometry(), w.input.geometry(), w.legend.geometry())
    qtbot.keyClick(w.input, Qt.Key.Key_C, CTRL | SHIFT)  # Compare, with nothing to compare: a notice
    assert w.notice.isVisible() and "Nothing to compare" in w.notice.text()
    assert (w.chat_pane.geometry(), w.input.geometry(), w.legend.geometry()) == before
    top_left = w.notice.mapTo(w, QPoint(0, 0))
    assert top_left == w.chat_pane.mapTo(w, QPoint(0, 0)) and w.notice.width() == w.chat_pane.width()
    qtbot.mouseClick(w.notice.close_button, Qt.MouseButton.LeftButton)
    assert not w.notice.isVisible() and (w.chat_pane.geometry(), w.input.geometry()) == before[:2]


def test_compare_fits_in_an_800_px_window_and_does_not_grow(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=40)
    w = open_window(qtbot)
    activate(qtbot, w)
    w.resize(800, 700)
    qtbot.waitUntil(lambda: w.width() == 800)
    send(qtbot, w)
    qtbot.keyClick(w.input, Qt.Key.Key_C, CTRL | SHIFT)  # Chat ▸ Compare with plain decoding
    dlg = w.compare_dialog
    qtbot.addWidget(dlg)
    assert dlg.isVisible() and dlg.width() <= w.width()
    width = dlg.width()
    qtbot.waitUntil(lambda: dlg.complete, timeout=REPLY_TIMEOUT_MS)
    assert dlg.width() == width and dlg.minimumSizeHint().width() <= w.width()
    for label in (dlg.left_title, dlg.right_title, dlg.verdict):  # long words wrap inside it
        assert label.geometry().right() <= dlg.width()


def test_no_tooltip_on_the_blank_page_under_the_last_message(qtbot):
    v = make_view(qtbot)
    v.resize(760, 600)
    done = Message(2, Role.ASSISTANT, "Short.", "t.gguf", "d.gguf", tokens=tokens_of(["Short", "."]),
                   finish_reason=FinishReason.STOP)
    v.show_messages([user(), done])

    def tip_at(point: QPoint) -> str:
        QToolTip.hideText()
        qtbot.waitUntil(lambda: not QToolTip.isVisible())  # hideText lets a shown tip fade first
        QApplication.sendEvent(v.viewport(), QHelpEvent(QEvent.Type.ToolTip, point, v.viewport().mapToGlobal(point)))
        return QToolTip.text() if QToolTip.isVisible() else ""

    # The "Delete" link itself has its tooltip (the check can see one)…
    doc = v.document()
    cur = doc.find("Delete", QTextCursor(doc))
    assert not cur.isNull()
    c = QTextCursor(doc)
    c.setPosition(cur.selectionStart() + 2)
    assert tip_at(v.cursorRect(c).center()) == "Delete this message"
    # …the blank page under it has none.
    below = QPoint(40, int(doc.size().height()) + 60)
    assert below.y() < v.viewport().height()
    assert tip_at(below) == ""


def test_a_table_streams_in_as_a_table_never_as_raw_pipes(qtbot):
    v = make_view(qtbot)
    pieces = ["Here", ":", "\n\n", "|", " Column", " 1", " |", " Column", " 2", " |\n", "|", "---", "|", "---",
              "|\n", "|", " a", " |", " b", " |\n", "\n", "Done", "."]
    live = Message(2, Role.ASSISTANT, "", "t.gguf", "d.gguf")
    v.show_messages([user(), live])
    tokens = tokens_of(pieces)
    seen = []
    for i, t in enumerate(tokens):
        live.tokens.append(t)
        v.reply_changed(live.id, i)
        qtbot.waitUntil(lambda: v.complete, timeout=2000)
        text = v.toPlainText()
        seen.append(text)
        assert "|" not in text, (i, "".join(pieces[: i + 1]), text)
    assert "Column 1" not in seen[9] and "Column 1" in seen[14]  # the header waited for its delimiter row
    live.content, live.finish_reason = "".join(pieces), FinishReason.STOP
    v.finish_reply(live)
    final = v.toPlainText()
    assert "Column 1" in final and "a" in final and "Done." in final and "|" not in final


def _window_on_a_target_without_template(qtbot, tiny, isolated_home):
    """A window on the tiny pair whose target has no chat template (the engine notes it after each reply)."""
    installed = install_tiny(tiny, isolated_home)
    tiny_models.write_tiny_model(installed["target"], dataclasses.replace(tiny_models.TARGET, chat_template=None))
    return open_window(qtbot)


def _ask(qtbot, w, text: str) -> None:
    """Type `text` in the message box and press Enter; back when the reply has finished."""
    qtbot.keyClicks(w.input, text)
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(w.input, Qt.Key.Key_Return)


def test_a_note_about_the_pair_is_shown_once_not_over_every_reply(qtbot, tiny, isolated_home):
    """A target without a chat template: its note comes over the chat after the first reply, dismissed it stays
    away for the next reply and after a restart, and the status line still says it (real Enter key, real mouse
    click)."""
    w = _window_on_a_target_without_template(qtbot, tiny, isolated_home)
    _ask(qtbot, w, "one")
    qtbot.waitUntil(lambda: w.notice.isVisible())
    assert "has no chat template" in w.notice.text()
    qtbot.mouseClick(w.notice.close_button, Qt.MouseButton.LeftButton)
    assert not w.notice.isVisible()
    _ask(qtbot, w, "two")
    qtbot.wait(200)  # the finished reply's signals are all delivered
    assert not w.notice.isVisible() and len(w.controller.messages) == 4
    assert "has no chat template" in w.status_label.text()
    w.close()
    # The next launch with the same pair: the note is not back over the chat (it came at every launch), the
    # status line still says it.
    w2 = open_window(qtbot)
    assert "has no chat template" in w2.status_label.text()
    _ask(qtbot, w2, "three")
    qtbot.wait(200)
    assert len(w2.controller.messages) == 6 and not w2.notice.isVisible()


def test_the_speed_chart_has_no_scale_before_a_reply_has_a_speed(qtbot, tiny, isolated_home):
    """An empty speed chart was numbered 0.00 to 0.11 tokens/s, which read as a measurement. Its y axis is
    numbered once a reply has tokens (pixels of the label column, before and after a real Enter)."""
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    chart = w.stats.speed_chart

    def label_pixels() -> int:
        img = chart.grab().toImage()
        bg = img.pixelColor(2, img.height() - 2)
        # The numbers' column: left of the plot, below the title.
        return sum(1 for x in range(0, 28) for y in range(20, img.height() - 4)
                   if abs(img.pixelColor(x, y).lightness() - bg.lightness()) > 60)

    assert chart.isVisible() and label_pixels() == 0
    qtbot.keyClicks(w.input, PROMPT)
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(chart.points))
    assert label_pixels() > 20


def test_a_reply_records_its_settings_without_the_notes_seen(qtbot, tiny, isolated_home):
    """The notes the app remembers as shown are not a setting a reply was made with: kept out of what every
    message records (they would grow each message by the notes' text)."""
    w = _window_on_a_target_without_template(qtbot, tiny, isolated_home)
    _ask(qtbot, w, "one")
    _ask(qtbot, w, "two")
    qtbot.waitUntil(lambda: len(w.controller.prefs.settings.notes_seen) == 1)
    assert "has no chat template" in w.controller.prefs.settings.notes_seen[0]
    replies = [m for m in w.controller.messages if m.role is Role.ASSISTANT]
    assert len(replies) == 2 and all("notes_seen" not in m.settings and m.settings["temperature"] == 0.0
                                     for m in replies)


def test_a_reply_too_short_to_draft_in_says_so_not_that_drafting_was_judged_slower(qtbot, tiny, isolated_home):
    """Auto judges a model drafter on the reply's own first tokens (six here): a four-token reply ended before
    that, and the panel said "Auto judged drafting slower than plain decoding here", a verdict nobody made.
    A longer reply that Auto could judge keeps its own sentence (real Enter key, the panel's text)."""
    install_tiny(tiny, isolated_home, draft_max="auto", max_tokens=4)
    w = open_window(qtbot)
    _ask(qtbot, w, "hello")
    qtbot.waitUntil(lambda: w.stats.snapshot is not None and w.stats.snapshot.finished)
    s = w.stats.snapshot
    assert s.tokens == 4 and s.drafted == 0
    assert w.stats.verdict.text() == "Plain decoding: the reply was too short for Auto to start drafting."
    w.controller.update_settings(max_tokens=40)
    _ask(qtbot, w, "hello again")
    qtbot.waitUntil(lambda: w.stats.snapshot is not None and w.stats.snapshot.finished and w.stats.snapshot.tokens > 6)
    assert "too short" not in w.stats.verdict.text()
