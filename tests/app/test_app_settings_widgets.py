"""Settings changed from the real widgets round-trip through Settings, and a failure on the send
path reaches the window: the Theme box (now View ▸ Theme) once stopped every send, with the error only in the log."""
from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from chat_view_support import anchor_position, click_link  # noqa: E402
from app_support import REPLY_TIMEOUT_MS, activate, install_tiny, menu_keys, open_window, send  # noqa: E402

from app.chat.actions import MessageAction  # noqa: E402
from app.chat.app_links import LinkKind, href as app_href  # noqa: E402
from app.core.settings import AppSettings, load_settings, settings_path, typed_changes  # noqa: E402
from engine.drafting.draft_choice import DraftLength, DraftSpec  # noqa: E402
from app.core.theme import Theme  # noqa: E402
from app.history.records import Role  # noqa: E402
from app.history.store import ChatStore  # noqa: E402


def saved_theme() -> str:
    return json.loads(settings_path().read_text(encoding="utf-8"))["theme"]


@pytest.mark.parametrize(("before", "letter", "after"), [(Theme.SYSTEM, "d", Theme.DARK), (Theme.DARK, "l", Theme.LIGHT)])
def test_choosing_a_theme_from_the_menu_keeps_send_working(qtbot, tiny, isolated_home, before, letter, after):
    install_tiny(tiny, isolated_home, theme=before)
    w = open_window(qtbot)
    activate(qtbot, w)
    menu_keys(qtbot, w, "v", "t", letter)  # View ▸ Theme ▸ Dark (or Light), by the underlined letters
    chosen = w.controller.settings.theme
    assert chosen is after and w.commands.themes[after].isChecked()
    reply = send(qtbot, w)  # Enter in the input: a reply streams, the input empties
    assert reply.tokens and w.input.toPlainText() == ""
    w.controller.prefs.save()
    assert saved_theme() == chosen.value  # written as the value the file holds ("light", "dark")
    assert load_settings()[0].theme is chosen


def test_values_from_widgets_are_typed_or_refused():
    assert typed_changes({"theme": "dark"}) == {"theme": Theme.DARK}
    assert typed_changes({"temperature": 1}) == {"temperature": 1.0}
    with pytest.raises(ValueError):
        typed_changes({"theme": "purple"})
    with pytest.raises(ValueError):
        typed_changes({"no_such_setting": 1})
    with pytest.raises(ValueError):
        typed_changes({"seed": -1})  # llama.cpp and numpy take 0 .. 2**32-1


def test_a_negative_seed_in_the_file_falls_back_to_a_fresh_seed(isolated_home):
    settings_path().parent.mkdir(parents=True, exist_ok=True)
    settings_path().write_text(json.dumps({"seed": -5, "temperature": 0.7}), encoding="utf-8")
    s, note = load_settings()
    assert s.seed is None and s.temperature == 0.7 and note is None
    assert AppSettings(seed=7).to_json()["seed"] == 7


@pytest.mark.qt_no_exception_capture
def test_an_exception_in_a_slot_reaches_the_window_as_a_notice(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    w = open_window(qtbot)

    def broken() -> None:
        raise AttributeError("'str' object has no attribute 'value'")

    w.send_button.clicked.connect(broken)
    w.input.setPlainText("kept")
    qtbot.mouseClick(w.send_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "AttributeError" in w.notice.text(), timeout=5000)
    assert w.notice.isVisible() and "Nothing you typed was lost" in w.notice.text()


def test_an_unanswered_question_offers_retry_and_retry_answers_it(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    store = ChatStore()
    conv = store.new_conversation("left unanswered")
    question = store.add_message(conv.id, Role.USER, "the model is fast")
    store.close()
    w = open_window(qtbot)
    href = app_href(LinkKind.ACTION, MessageAction.REGENERATE.value, question.id)
    qtbot.waitUntil(lambda: any(m.id == question.id for m in w.chat.messages), timeout=5000)
    anchor_position(w.chat, href)  # raises when the link is not in the document
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as blocker:
        click_link(qtbot, w.chat, href)
    reply = blocker.args[0]
    assert reply.role == Role.ASSISTANT and reply.tokens
    assert [m.role for m in w.controller.messages] == [Role.USER, Role.ASSISTANT]
    with pytest.raises(AssertionError):  # answered now: no Retry on it any more
        anchor_position(w.chat, href)


def toolbar_button(w, action):
    button = w.toolbar_strip.button_for(action)
    if button is not None and button.isVisible():
        return button
    raise AssertionError(f"no toolbar button for {action.text()}")


def test_every_bar_control_round_trips_through_the_settings_file(qtbot, tiny, isolated_home):
    """Each control driven as a person does (a key on the focused widget, a mouse click), then the
    settings as saved and read back: typed as the settings hold them."""
    installed = install_tiny(tiny, isolated_home, draft_max=4, highlight=True, show_rejected=False)
    w = open_window(qtbot)
    qtbot.waitUntil(lambda: len(w.bar.drafter_choices()) > 2, timeout=REPLY_TIMEOUT_MS)

    def saved() -> AppSettings:
        w.controller.prefs.save()
        return load_settings()[0]

    qtbot.keyClick(w.bar.length, Qt.Key.Key_Right)  # the draft length slider: 4 -> 5
    assert saved().draft_max == DraftLength.fixed(5) and type(saved().draft_max) is DraftLength
    qtbot.mouseClick(w.bar.auto, Qt.MouseButton.LeftButton)
    assert saved().draft_max == DraftLength.AUTO
    w.bar.drafter.setFocus()
    index = w.bar.drafter.currentIndex()
    qtbot.keyClick(w.bar.drafter, Qt.Key.Key_Up if index else Qt.Key.Key_Down)
    s = saved()
    assert s.drafter == w.bar.current_drafter() and s.drafter != DraftSpec(installed["drafter"]) and s.drafter_chosen
    for action, field in ((w.act_rejected, "show_rejected"), (w.act_highlight, "highlight")):
        before = getattr(saved(), field)
        qtbot.mouseClick(toolbar_button(w, action), Qt.MouseButton.LeftButton)
        assert getattr(saved(), field) is (not before)
    reply = send(qtbot, w)  # and sending still works after all of it
    assert reply.tokens
