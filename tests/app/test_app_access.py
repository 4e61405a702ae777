"""Readable for everyone: contrast, greyscale, accessible names; and the window remembering itself.

The references are computed here, not taken from the app: WCAG 2.x relative luminance and
contrast from the sRGB formula, greyscale from rendered pixels.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from app_support import install_tiny, open_window, send

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QColor,
    QFont,
    QGuiApplication,
    QImage,
    QPainter,
    QPalette,
    QTextCursor,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QScrollBar,
    QTabWidget,
    QTextEdit,
    QToolBar,
    QWidget,
)

from app.core import theme
from app.core.settings import settings_path
from app.core.theme import DARK_COLOURS, LIGHT_COLOURS, Mark, Theme, mark_format
from tree import ROOT

THEMES = {"light": LIGHT_COLOURS, "dark": DARK_COLOURS}


# -- WCAG contrast ------------------------------------------------------------------------------
def luminance(colour: QColor) -> float:
    """WCAG 2.x relative luminance of an sRGB colour."""

    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(colour.red()) + 0.7152 * channel(colour.green()) + 0.0722 * channel(colour.blue())


def contrast(a: QColor, b: QColor) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_the_wcag_formula_here_matches_known_values():
    assert contrast(QColor("#000000"), QColor("#FFFFFF")) == pytest.approx(21.0)
    assert contrast(QColor("#777777"), QColor("#FFFFFF")) == pytest.approx(4.48, abs=0.01)  # the classic near miss
    assert contrast(QColor("#C7EADF"), QColor("#FFFFFF")) == pytest.approx(1.29, abs=0.01)  # the shading


def _drawn(mark: Mark, colours) -> tuple[QColor, list[QColor]]:
    """The text colour a mark is drawn in, and every background it can sit on."""
    fmt = mark_format(mark, colours)
    fg = fmt.foreground().color() if fmt.foreground().style() != Qt.BrushStyle.NoBrush else QColor(colours.text_fg)
    if fmt.background().style() != Qt.BrushStyle.NoBrush:
        return fg, [fmt.background().color()]
    return fg, [QColor(colours.page_bg), QColor(colours.code_bg)]


@pytest.mark.parametrize("name", THEMES)
def test_text_keeps_4_5_to_1_on_every_shading(qapp, name):
    colours = THEMES[name]
    for mark in Mark:
        fg, backgrounds = _drawn(mark, colours)
        for bg in backgrounds:
            assert contrast(fg, bg) >= 4.5, (name, mark, fg.name(), bg.name(), contrast(fg, bg))
    for bg in (colours.page_bg, colours.code_bg):  # headers and notes
        assert contrast(QColor(colours.muted_fg), QColor(bg)) >= 4.5, (name, bg)
    # The shading itself shows against the page and the code background (the issue measured 1.29:1).
    shade = QColor(colours.accepted_bg)
    assert contrast(shade, QColor(colours.page_bg)) >= 1.5
    assert contrast(shade, QColor(colours.code_bg)) >= 1.3
    # The page and text the palette gives are the ones measured here.
    palette = theme.palette_for(Theme.DARK if name == "dark" else Theme.LIGHT)
    assert palette.color(QPalette.ColorRole.Base) == QColor(colours.page_bg)
    assert palette.color(QPalette.ColorRole.Text) == QColor(colours.text_fg)
    # The meter's warning reads on the window background.
    assert contrast(QColor(colours.warning_fg), palette.color(QPalette.ColorRole.Window)) >= 4.5


def test_readable_darkens_or_lightens_syntax_colours_just_enough(qapp):
    """For colours the theme does not choose (Pygments' syntax colours) drawn on a shading."""
    syntax = ["#008000", "#BA2121", "#0000FF", "#AA22FF", "#687822", "#9C6500", "#E69F00", "#56B4E9"]
    for colours in THEMES.values():
        for bg in (colours.accepted_bg, colours.code_bg, colours.page_bg):
            for fg in syntax:
                out = theme.readable(fg, bg)
                assert contrast(out, QColor(bg)) >= 4.5, (fg, bg)
                if contrast(QColor(fg), QColor(bg)) >= 4.5:
                    assert out == QColor(fg)  # already readable: left alone
    assert theme.readable("#008000", "#99D8C7") != QColor("#008000")  # 2.9:1 on the light shading


# -- greyscale, from rendered pixels ---------------------------------------------------------------
def render_grey(mark: Mark, colours, text: str) -> QImage:
    """`text` in the mark's format on the theme's page, as a greyscale image."""
    doc = QTextDocument()
    doc.setDocumentMargin(4)
    font = QFont()
    font.setPixelSize(16)
    doc.setDefaultFont(font)
    QTextCursor(doc).insertText(text, mark_format(mark, colours))
    img = QImage(doc.size().toSize(), QImage.Format.Format_RGB32)
    img.fill(QColor(colours.page_bg))
    painter = QPainter(img)
    ctx = QAbstractTextDocumentLayout.PaintContext()
    ctx.palette.setColor(QPalette.ColorRole.Text, QColor(colours.text_fg))
    doc.documentLayout().draw(painter, ctx)
    painter.end()
    return img.convertToFormat(QImage.Format.Format_Grayscale8)


def grey_at(img: QImage, x: int, y: int) -> int:
    return img.pixelColor(x, y).red()


def shading_and_strokes(img: QImage) -> tuple[int, frozenset[tuple[int, int]]]:
    """The most common grey inside the text box (the shading, or the page), and the pixels that
    stand out from it by more than 40 levels (underline and strike-through on blank text)."""
    inner = [(x, y) for x in range(4, img.width() - 4) for y in range(4, img.height() - 4)]
    counts: dict[int, int] = {}
    for x, y in inner:
        g = grey_at(img, x, y)
        counts[g] = counts.get(g, 0) + 1
    shade = max(counts, key=counts.get)
    return shade, frozenset((x, y) for x, y in inner if abs(grey_at(img, x, y) - shade) > 40)


@pytest.mark.parametrize("name", THEMES)
def test_every_mark_differs_from_every_other_in_greyscale(qapp, name):
    colours = THEMES[name]
    img = QImage(1, 1, QImage.Format.Format_RGB32)
    img.fill(QColor(colours.page_bg))
    page_grey = grey_at(img.convertToFormat(QImage.Format.Format_Grayscale8), 0, 0)
    # Blank text (no-break spaces) leaves only what is not a glyph: shading, underline, strike-through.
    cues = {m: shading_and_strokes(render_grey(m, colours, "\u00a0" * 8)) for m in Mark}
    shade, strokes = cues[Mark.ACCEPTED]
    assert abs(shade - page_grey) >= 40 and not strokes  # a shading, clearly off the page
    for m in (Mark.CORRECTION, Mark.BONUS, Mark.TARGET, Mark.REJECTED):
        assert cues[m][0] == page_grey, m  # on the page itself
    assert not cues[Mark.TARGET][1]
    height = render_grey(Mark.TARGET, colours, "\u00a0").height()
    rows = {m: sorted({y for _, y in cues[m][1]}) for m in Mark}
    # Rejected: one line through the middle of the text; correction and bonus: lines under it.
    assert rows[Mark.REJECTED] and max(rows[Mark.REJECTED]) < height * 0.6
    assert rows[Mark.CORRECTION] and min(rows[Mark.CORRECTION]) > height * 0.6
    assert rows[Mark.BONUS] and min(rows[Mark.BONUS]) > height * 0.6
    # Wavy against dotted: the wave climbs over two rows or more; the dots leave gaps along one.
    assert len(rows[Mark.CORRECTION]) >= 2
    dots = sorted(x for x, y in cues[Mark.BONUS][1] if y == rows[Mark.BONUS][0])
    assert any(b - a > 1 for a, b in zip(dots, dots[1:]))
    for a, b in itertools.combinations(Mark, 2):
        (shade_a, strokes_a), (shade_b, strokes_b) = cues[a], cues[b]
        assert abs(shade_a - shade_b) >= 25 or len(strokes_a ^ strokes_b) >= 10, (name, a, b)

    # Real text: every pair also differs in the grey pixels a reader sees (not by hue alone).
    words = {m: render_grey(m, colours, "token") for m in Mark}
    for a, b in itertools.combinations(Mark, 2):
        ia, ib = words[a], words[b]
        w, h = min(ia.width(), ib.width()), min(ia.height(), ib.height())
        differ = sum(abs(grey_at(ia, x, y) - grey_at(ib, x, y)) > 40 for x in range(w) for y in range(h))
        assert differ >= 0.03 * w * h, (name, a, b, differ)


def test_the_legend_wraps_at_narrow_widths_and_shows_every_item(qtbot):
    from app.chat.legend import Legend

    legend = Legend()
    qtbot.addWidget(legend)
    legend.show_legend(LIGHT_COLOURS, highlight=True, show_rejected=True)
    legend.resize(900, legend.height())
    legend.show()
    qtbot.waitExposed(legend)
    one_line = legend.height()
    legend.resize(260, legend.height())
    doc = legend.document()
    # It grows to more lines, and all of them show: nothing clipped.
    qtbot.waitUntil(lambda: legend.height() > one_line and doc.size().height() <= legend.viewport().height() + 1)
    assert legend.marks == list(Mark)
    assert all(theme.LABELS[m] in doc.toPlainText().replace("\u00a0", " ") for m in Mark)


# -- the main window ----------------------------------------------------------------------------------
INTERACTIVE = (QAbstractButton, QComboBox, QAbstractSpinBox, QLineEdit, QAbstractItemView, QTextEdit, QPlainTextEdit,
               QAbstractSlider)


def unnamed_controls(root: QWidget) -> list[str]:
    """Interactive widgets without an accessible name (a spin box's or combo's own editor and
    popup are parts of it and take its name; toolbar buttons count even when scrolled off)."""
    out = []
    for w in root.findChildren(QWidget):
        if not w.isVisibleTo(root) and not isinstance(w.parentWidget(), QToolBar):
            continue
        if isinstance(w.parentWidget(), (QAbstractSpinBox, QComboBox)) or w.window() is not root:
            continue
        if isinstance(w, (QLabel, QScrollBar, QHeaderView)) or isinstance(w.parentWidget(), QTabWidget):
            continue  # read by their own text, or parts of a named table, list or tab widget
        if isinstance(w, INTERACTIVE) or w.focusPolicy() != Qt.FocusPolicy.NoFocus:
            if not w.accessibleName().strip():
                out.append(f"{type(w).__name__} {w.objectName()!r}")
    return out


def test_every_control_of_the_window_and_sampling_has_an_accessible_name(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    buttons = [w.toolbar_strip.button_for(a) for a in (w.act_models, w.act_highlight)]
    assert [b.accessibleName() for b in buttons] == ["Models", "Highlight tokens"]
    assert unnamed_controls(w) == []
    popover = w.bar.sampling
    popover.popup_under(w.bar.sampling_button)
    assert unnamed_controls(popover) == []
    assert popover.min_p.accessibleName() == "Min-p"
    popover.hide()
    w.chat_pane.act_find.trigger()  # the chat's find bar and token details panel
    w.chat_pane.act_details.setChecked(True)
    assert w.chat_pane.find_bar.isVisible() and w.chat_pane.details.isVisible()
    assert unnamed_controls(w) == []
    w.first_run.show()  # what a first start shows instead of the chat
    assert unnamed_controls(w) == []
    w.first_run.hide()


def test_every_control_of_the_dialogs_has_an_accessible_name(qtbot, tiny, isolated_home):
    from app.history.records import Message, Role
    from app.models.models_dialog import ModelsDialog
    from app.stats.compare_dialog import CompareDialog

    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    models = ModelsDialog(w.controller, w)
    qtbot.addWidget(models)
    models.show()
    for i in range(models.tabs.count()):
        models.tabs.setCurrentIndex(i)
        assert unnamed_controls(models) == [], models.tabs.tabText(i)
    compare = CompareDialog(w.controller, [Message(1, Role.USER, "hi"), Message(2, Role.ASSISTANT, "yo")], w)
    qtbot.addWidget(compare)
    compare.show()
    assert unnamed_controls(compare) == []


RESTART = """
import json, sys
from PySide6.QtWidgets import QApplication
app = QApplication(sys.argv[:1])
from app.window import MainWindow
w = MainWindow()
w.show()
app.processEvents()
if sys.argv[1] == "change":
    w.resize(1010, 730)
    w.split.setSizes([300, 480, 230])
    app.processEvents()
print(json.dumps({"size": [w.width(), w.height()], "panes": w.split.sizes()}))
w.close()
"""


def run_app(screen_config, step: str) -> dict:
    """The window in a process of its own (a real restart), on a 1920x1200 offscreen screen: the
    default offscreen screen is 800x800, and restoring fits a window into the screen it opens on."""
    env = dict(os.environ, QT_QPA_PLATFORM=f"offscreen:configfile={screen_config}")
    done = subprocess.run([sys.executable, "-c", RESTART, step], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_geometry_and_pane_widths_survive_a_restart(tmp_path, isolated_home):
    screen = tmp_path / "screen.json"
    screen.write_text(json.dumps({"screens": [{"name": "big", "x": 0, "y": 0, "width": 1920, "height": 1200,
                                               "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}))
    first = run_app(screen, "look")
    assert first["size"] == [1280, 800]  # the default
    changed = run_app(screen, "change")
    assert changed["size"] == [1010, 730] and changed["panes"] != first["panes"]
    saved = json.loads(settings_path().read_text())
    assert saved["window_geometry"] and saved["window_splitter"]
    assert run_app(screen, "look") == changed


def test_a_size_saved_on_a_big_screen_fits_a_small_one_under_x11(tmp_path, isolated_home):
    """On X11 without a window manager Qt keeps a restored size as it was: a 1280x800 window on an
    800x600 screen had its right edge, and its Send button, past the screen."""
    screen = tmp_path / "screen.json"
    screen.write_text(json.dumps({"screens": [{"name": "big", "x": 0, "y": 0, "width": 1920, "height": 1200,
                                               "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]}))
    assert run_app(screen, "look")["size"] == [1280, 800]  # saved at close
    xvfb = shutil.which("Xvfb")
    assert xvfb, "Xvfb is needed (apt-get install xvfb): the README names it"
    read, write = os.pipe()
    server = subprocess.Popen([xvfb, "-displayfd", str(write), "-screen", "0", "800x600x24", "-nolisten", "tcp"],
                              pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        display = os.read(read, 16).decode().strip()
        env = dict(os.environ, QT_QPA_PLATFORM="xcb", DISPLAY=f":{display}")
        done = subprocess.run([sys.executable, "-c", RESTART, "look"], env=env, capture_output=True, text=True,
                              timeout=120, cwd=ROOT)
    finally:
        os.close(read)
        server.terminate()
        server.wait(10)
    assert done.returncode == 0, done.stderr
    width, height = json.loads(done.stdout.strip().splitlines()[-1])["size"]
    assert 0 < width <= 800 and 0 < height <= 600


def test_a_damaged_saved_geometry_is_ignored(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    data = json.loads(settings_path().read_text())
    data.update(window_geometry="not base64 !", window_splitter=12)
    settings_path().write_text(json.dumps(data))
    w = open_window(qtbot)
    assert w.controller.settings.window_geometry == "" and w.controller.settings.window_splitter == ""
    assert (w.width(), w.height()) == (1280, 800)


def test_min_p_is_editable_and_reaches_the_generation_settings(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    assert w.bar.sampling.min_p.value() == pytest.approx(0.05)  # the default, shown
    w.bar.sampling.min_p.setValue(0.2)
    assert w.controller.settings.min_p == pytest.approx(0.2)
    assert w.controller.generation_settings().sampling.min_p == pytest.approx(0.2)
    w.bar.sampling.min_p.setValue(0.0)
    assert w.controller.generation_settings().sampling.min_p == 0.0
    assert w.bar.sampling.min_p.text() == "0 (off)"


def test_the_context_meter_counts_the_conversation_after_a_reply(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    assert w.controller.loaded.n_ctx == 4096
    assert w.context_meter.label.text() == "context 0 / 4k"
    reply = send(qtbot, w)
    used = reply.stats.prompt_tokens + reply.stats.tokens
    assert 0 < used < 1024
    assert w.context_meter.label.text() == f"context {used} / 4k"
    assert not w.context_meter.warning
    first = w.controller.current_id
    w.controller.new_conversation()
    assert w.context_meter.label.text() == "context 0 / 4k"
    w.controller.open_conversation(first)
    assert w.context_meter.label.text() == f"context {used} / 4k"

    # Near full: words and colour both say so.
    nearly = dataclasses.replace(reply, stats=dataclasses.replace(reply.stats, prompt_tokens=3500, tokens=190))
    w.context_meter.show_usage([nearly], 4096)
    assert w.context_meter.label.text() == "context 3.6k / 4k · nearly full"
    assert w.context_meter.warning
    assert w.context_meter.label.palette().color(QPalette.ColorRole.WindowText) == QColor(LIGHT_COLOURS.warning_fg)
    full = dataclasses.replace(reply, stats=dataclasses.replace(reply.stats, prompt_tokens=4000, tokens=96))
    w.context_meter.show_usage([full], 4096)
    assert w.context_meter.label.text() == "context 4k / 4k · full"


def test_the_system_theme_follows_the_os_live(qtbot, tiny, isolated_home, monkeypatch):
    """The offscreen platform cannot switch the OS scheme: the test stands in for the OS by making
    the scheme query answer dark and emitting Qt's own colorSchemeChanged signal."""
    install_tiny(tiny, isolated_home, theme=Theme.SYSTEM)
    w = open_window(qtbot)
    app = QApplication.instance()
    hints = QGuiApplication.styleHints()
    assert w.chat.options.colours == LIGHT_COLOURS

    monkeypatch.setattr(theme, "system_is_dark", lambda: True)
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert app.palette().color(QPalette.ColorRole.Base) == QColor(DARK_COLOURS.page_bg)
    assert w.chat.options.colours == DARK_COLOURS
    assert QColor(DARK_COLOURS.accepted_bg) in legend_backgrounds(w.legend)  # the legend follows too

    monkeypatch.setattr(theme, "system_is_dark", lambda: False)
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Light)
    assert app.palette().color(QPalette.ColorRole.Base) == QColor(LIGHT_COLOURS.page_bg)
    assert w.chat.options.colours == LIGHT_COLOURS

    w.controller.update_settings(theme=Theme.LIGHT)  # a chosen theme stays put
    monkeypatch.setattr(theme, "system_is_dark", lambda: True)
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert w.chat.options.colours == LIGHT_COLOURS
    assert app.palette().color(QPalette.ColorRole.Base) == QColor(LIGHT_COLOURS.page_bg)


def legend_backgrounds(legend) -> list[QColor]:
    out = []
    block = legend.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.background().style() != Qt.BrushStyle.NoBrush:
                out.append(fmt.background().color())
            it += 1
        block = block.next()
    return out


def test_the_stats_panel_shows_all_its_text_at_the_default_size(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    assert (w.width(), w.height()) == (1280, 800)
    send(qtbot, w)
    assert "of the time drafting" in w.stats.fields["time"].text()
    labels = (*w.stats.fields.values(), w.stats.verdict)

    def check():
        for label in labels:
            # Every line of the label fits inside it: wrapped text needs no more room than it was given.
            needed = label.fontMetrics().boundingRect(QRect(0, 0, label.contentsRect().width(), 10_000),
                                                       int(Qt.TextFlag.TextWordWrap), label.text())
            assert needed.width() <= label.contentsRect().width(), (label.objectName(), label.text())
            assert needed.height() <= label.contentsRect().height() + 1, (label.objectName(), label.text())
            assert label.geometry().right() <= w.stats.contentsRect().right()

    # The last stats arrive with the reply's end; Qt lays the panel out on its next pass of the event
    # loop (what a person sees a frame later), so give it that pass rather than reading mid-layout.
    qtbot.waitUntil(check, timeout=2000)


def test_the_chat_view_draws_each_mark_as_rendered_above(qtbot, tiny, isolated_home):
    """The real view, grabbed and turned grey: accepted text sits on its shading, clearly apart
    from the page, and no other kind does; in both themes."""
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    send(qtbot, w)
    for theme_, colours in ((Theme.LIGHT, LIGHT_COLOURS), (Theme.DARK, DARK_COLOURS)):
        w.controller.update_settings(theme=theme_)
        view = w.chat
        shot = view.viewport().grab().toImage().convertToFormat(QImage.Format.Format_Grayscale8)
        dpr = shot.devicePixelRatio()
        probe = QImage(1, 1, QImage.Format.Format_RGB32)
        probe.fill(QColor(colours.accepted_bg))
        shade = grey_at(probe.convertToFormat(QImage.Format.Format_Grayscale8), 0, 0)
        seen: dict[Mark, list[int]] = {}
        for f in view.token_fragments():
            if len(f.text.strip()) < 2:
                continue
            cur = QTextCursor(view.document())
            cur.setPosition(f.position)
            start = view.cursorRect(cur)
            cur.setPosition(f.position + len(f.text))
            end = view.cursorRect(cur)
            if end.top() != start.top() or end.left() - start.left() < 6 or start.bottom() >= shot.height() / dpr:
                continue  # wrapped across lines, too short, or scrolled out of the grab
            counts: dict[int, int] = {}
            for x in range(int((start.left() + 2) * dpr), int((end.left() - 1) * dpr)):
                for y in range(int((start.top() + 1) * dpr), int((start.bottom() - 1) * dpr)):
                    g = grey_at(shot, x, y)
                    counts[g] = counts.get(g, 0) + 1
            seen.setdefault(f.mark, []).append(max(counts, key=counts.get))
        assert seen.get(Mark.ACCEPTED) and seen.get(Mark.CORRECTION), seen.keys()
        assert all(abs(g - shade) <= 3 for g in seen[Mark.ACCEPTED]), (theme_, shade, seen[Mark.ACCEPTED])
        for mark, greys in seen.items():
            if mark != Mark.ACCEPTED:
                assert all(abs(g - shade) >= 25 for g in greys), (theme_, mark, shade, greys)
