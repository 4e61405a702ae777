"""Every command by keyboard, on the real window with the tiny real models: key events only (qtbot.keyClick on
the focused widget or the window, as the keyboard delivers them), never a call to the slot.

The menu bar (File, Edit, View, Chat, Models, Help) holds one QAction per command; the toolbar shows the same
actions; the tooltip names the shortcut. Focus starts in the message box and comes back to it after each
command that finishes something.
"""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QPoint, Qt, QTimer  # noqa: E402
from PySide6.QtGui import QKeySequence  # noqa: E402
from PySide6.QtWidgets import QApplication, QMenu  # noqa: E402
from app_support import (REPLY_TIMEOUT_MS, activate, install_tiny, menu_keys, open_window,  # noqa: E402
                              send)

from app.core.settings import load_settings  # noqa: E402
from engine.drafting.draft_choice import DraftLength, DraftSpec  # noqa: E402
from app.history.records import Role  # noqa: E402

CTRL, SHIFT, ALT = Qt.KeyboardModifier.ControlModifier, Qt.KeyboardModifier.ShiftModifier, Qt.KeyboardModifier.AltModifier


def keyboard_window(qtbot, tiny, home, **settings):
    install_tiny(tiny, home, **settings)
    w = open_window(qtbot)
    activate(qtbot, w)
    return w


def focused():
    return QApplication.focusWidget()


# After a dialog or a popup menu closes, the offscreen platform may leave no window active for a moment (a
# window manager gives the keyboard back); what matters is where the window puts it: w.focusWidget().


def press(qtbot, key, modifiers=Qt.KeyboardModifier.NoModifier):
    """A key as the keyboard delivers it: to the widget that has the focus."""
    qtbot.keyClick(focused(), key, modifiers)


def in_dialog(qtbot, find, then):
    """Run `then(dialog)` once the modal dialog `find()` returns is open (a command's exec() waits for it)."""
    seen = {}

    def look():
        dlg = find()
        if dlg is None or not dlg.isVisible():
            QTimer.singleShot(20, look)
            return
        seen["result"] = then(dlg)

    QTimer.singleShot(0, look)
    return seen


def menu_actions(w):
    """(menu title, action) for every command in the menu bar, submenus included."""
    out = []

    def walk(title, menu):
        for act in menu.actions():
            if act.menu() is not None:
                walk(title, act.menu())
            elif not act.isSeparator():
                out.append((title, act))

    for top in w.menuBar().actions():
        walk(top.text().replace("&", ""), top.menu())
    return out


# -- focus --------------------------------------------------------------------------------------------------
def test_focus_starts_in_the_message_box_and_typing_goes_there(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home)
    assert focused() is w.input
    qtbot.keyClicks(focused(), "hello")
    assert w.input.toPlainText() == "hello"


def test_new_chat_and_a_chat_chosen_in_the_list_give_the_message_box_the_keyboard(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home)
    send(qtbot, w, "first chat")
    press(qtbot, Qt.Key.Key_N, CTRL)  # File ▸ New chat
    assert w.controller.messages == [] and focused() is w.input
    send(qtbot, w, "second chat")
    press(qtbot, Qt.Key.Key_F, CTRL | SHIFT)  # Edit ▸ Search chats…
    assert focused() is w.conversations.search
    press(qtbot, Qt.Key.Key_Down)  # into the list
    assert focused() is w.conversations.list
    press(qtbot, Qt.Key.Key_Down)  # the older chat opens as the selection moves
    assert w.controller.messages[0].content == "first chat"
    press(qtbot, Qt.Key.Key_Return)  # and Enter goes on with it
    assert focused() is w.input


# -- the menu bar, the toolbar and the shortcuts --------------------------------------------------------------
def test_every_toolbar_command_is_in_the_menu_bar_and_its_shortcut_is_shown_and_unique(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home)
    titles = [a.text().replace("&", "") for a in w.menuBar().actions()]
    assert titles == ["File", "Edit", "View", "Chat", "Models", "Help"]
    in_menus = {id(a) for _t, a in menu_actions(w)}
    toolbar = [a for a, _button in w.toolbar_strip.items if a is not None]
    assert len(toolbar) == 8 and all(id(a) in in_menus for a in toolbar)  # the same objects, not copies
    keyed = [a for _t, a in menu_actions(w) if a.shortcuts()]
    for a in toolbar:
        key = a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        assert key and a.toolTip().endswith(f"({key})"), (a.text(), a.toolTip())
    seen: dict[str, str] = {}
    for a in keyed:
        for k in a.shortcuts():
            name = k.toString(QKeySequence.SequenceFormat.PortableText)
            assert name not in seen, f"{name} is both {seen[name]} and {a.text()}"
            seen[name] = a.text()
    # The platform's standard keys where Qt has one (the fallback only where it has none).
    for command, standard in ((w.commands.new, QKeySequence.StandardKey.New), (w.commands.find, QKeySequence.StandardKey.Find),
                              (w.commands.copy, QKeySequence.StandardKey.Copy),
                              (w.commands.find_next, QKeySequence.StandardKey.FindNext),
                              (w.commands.import_chat, QKeySequence.StandardKey.Open)):
        assert command.shortcuts() == QKeySequence.keyBindings(standard)
    assert "Ctrl+Shift+M" in seen and "Shift+F10" in seen and "F9" in seen

    # Help ▸ Keyboard shortcuts (F1 here) lists every command of the menus with its keys.
    help_key = w.commands.shortcuts.shortcut()
    got = in_dialog(qtbot, lambda: w.commands.shortcuts_dialog, lambda dlg: (dlg.rows(), dlg.reject()))
    qtbot.keyClick(focused(), help_key[0].key(), help_key[0].keyboardModifiers())
    rows = got["result"][0]
    listed = {(command, keys) for _group, command, keys in rows}
    for _title, a in menu_actions(w):
        keys = a.shortcut().toString(QKeySequence.SequenceFormat.NativeText)  # the menu's (first) keys
        assert (a.text().replace("&", "").rstrip("…").strip(), keys) in listed, a.text()
    assert ("Send", "Enter") in listed  # and the keys of one place (the message box)
    assert w.focusWidget() is w.input  # the window takes the keyboard back


def test_the_models_dialog_opens_by_keyboard_and_the_keyboard_comes_back(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home)
    tabs = []

    def look_and_close(dlg):
        tabs.append(dlg.tabs.tabText(dlg.tabs.currentIndex()))
        qtbot.keyClick(dlg, Qt.Key.Key_Escape)

    in_dialog(qtbot, lambda: w.models_dialog, look_and_close)
    press(qtbot, Qt.Key.Key_M, CTRL | SHIFT)  # Models ▸ Models…
    assert w.focusWidget() is w.input  # the keyboard is back in the message box
    activate(qtbot, w)
    in_dialog(qtbot, lambda: w.models_dialog, look_and_close)
    menu_keys(qtbot, w, "m", "m")  # the same through the menu: Alt+M, then M
    assert w.focusWidget() is w.input
    activate(qtbot, w)
    in_dialog(qtbot, lambda: w.models_dialog, look_and_close)
    menu_keys(qtbot, w, "m", "h")  # Models ▸ Hardware and loading…
    assert tabs == ["Installed", "Installed", "Hardware"]
    assert w.models_dialog is None
    assert w.focusWidget() is w.input


def test_the_pickers_and_sampling_open_by_keyboard(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home, draft_max=4)
    qtbot.waitUntil(lambda: len(w.bar.drafter_choices()) > 2, timeout=REPLY_TIMEOUT_MS)
    press(qtbot, Qt.Key.Key_D, ALT)  # Models ▸ Choose the drafter…: the list opens
    qtbot.waitUntil(lambda: w.bar.drafter.view().isVisible())
    assert focused() in (w.bar.drafter, w.bar.drafter.view())
    qtbot.keyClick(w.bar.drafter.view(), Qt.Key.Key_End)
    qtbot.keyClick(w.bar.drafter.view(), Qt.Key.Key_Return)
    assert w.controller.settings.drafter == DraftSpec.NONE
    press(qtbot, Qt.Key.Key_K, ALT)  # the draft length slider
    assert focused() is w.bar.length
    press(qtbot, Qt.Key.Key_Right)
    assert w.controller.settings.draft_max == DraftLength.fixed(5)
    press(qtbot, Qt.Key.Key_A, ALT)  # Automatic draft length
    assert w.controller.settings.draft_max == DraftLength.AUTO and w.bar.auto.isChecked() and w.commands.auto.isChecked()
    press(qtbot, Qt.Key.Key_S, ALT)  # Sampling…: the popover, ready for typing
    qtbot.waitUntil(lambda: w.bar.sampling.isVisible())
    assert focused() is w.bar.sampling.temperature
    qtbot.keyClick(w.bar.sampling.temperature, Qt.Key.Key_Escape)
    assert not w.bar.sampling.isVisible()


# -- messages and their actions -----------------------------------------------------------------------------------
def test_messages_and_their_actions_by_keyboard(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home)
    send(qtbot, w, "the model")
    reply = send(qtbot, w)
    question = w.controller.messages[-2]
    press(qtbot, Qt.Key.Key_Up, CTRL)  # from the message box: Chat ▸ Previous message
    assert focused() is w.chat and w.chat.message_at(w.chat.textCursor().position()).id == reply.id
    press(qtbot, Qt.Key.Key_Up, CTRL)
    assert w.chat.message_at(w.chat.textCursor().position()).id == question.id
    press(qtbot, Qt.Key.Key_Tab)  # the question's links, in order
    assert w.chat.textCursor().selectedText() == "Copy"

    # Shift+F10: the message's actions as a menu, each with its underlined letter.
    press(qtbot, Qt.Key.Key_F10, SHIFT)
    menu = w.chat.actions_menu
    qtbot.waitUntil(lambda: menu.isVisible())
    words = [a.text().replace("&", "") for a in menu.actions() if not a.isSeparator()]
    assert words[:4] == ["Copy", "Edit", "Fork", "Delete"]
    qtbot.keyClick(menu, Qt.Key.Key_E)  # Edit: the question goes into the message box
    assert w.input.editing == question.id and w.input.toPlainText() == question.content and focused() is w.input
    press(qtbot, Qt.Key.Key_Escape)
    assert w.input.editing is None

    press(qtbot, Qt.Key.Key_Down, CTRL)  # from the message box to the last message (the reply)
    assert w.chat.message_at(w.chat.textCursor().position()).id == reply.id
    press(qtbot, Qt.Key.Key_F10, SHIFT)
    menu = w.chat.actions_menu
    qtbot.waitUntil(lambda: menu.isVisible())
    words = [a.text().replace("&", "") for a in menu.actions() if not a.isSeparator()]
    assert "Regenerate" in words and "Regenerate with current settings" in words
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(menu, Qt.Key.Key_R)  # Regenerate: a second alternative
    last = w.controller.messages[-1]
    assert last.role == Role.ASSISTANT and last.variants == 2 and last.id != reply.id
    assert w.focusWidget() is w.input


def test_send_regenerate_and_stop_from_anywhere(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home)
    qtbot.keyClicks(w.input, "the model is fast")
    press(qtbot, Qt.Key.Key_Up, CTRL)  # away from the message box (nothing to move to yet: the chat gets it)
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        press(qtbot, Qt.Key.Key_Return, CTRL)  # Chat ▸ Send sends what the message box holds
    assert w.controller.messages[0].content == "the model is fast" and w.input.toPlainText() == ""
    first = w.controller.messages[-1]
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        press(qtbot, Qt.Key.Key_R, CTRL)  # Chat ▸ Regenerate last reply
    assert w.controller.messages[-1].variants == 2 and w.controller.messages[-1].id != first.id
    assert not w.commands.stop.isEnabled()  # Stop only while something runs


def test_panes_take_turns_with_f6(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home)
    send(qtbot, w)
    order = []
    for _ in range(3):
        press(qtbot, Qt.Key.Key_F6)
        order.append(focused())
    assert order == [w.conversations.list, w.chat, w.input]
    press(qtbot, Qt.Key.Key_F6, SHIFT)
    assert focused() is w.chat
    press(qtbot, Qt.Key.Key_L, CTRL)  # Chat ▸ Go to the message box
    assert focused() is w.input


def test_edit_commands_act_on_the_field_that_has_the_keyboard(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home)
    qtbot.keyClicks(w.input, "copy me")
    menu_keys(qtbot, w, "e", "a")  # Edit ▸ Select all
    assert w.input.textCursor().selectedText() == "copy me"
    menu_keys(qtbot, w, "e", "t")  # Edit ▸ Cut
    assert w.input.toPlainText() == "" and QApplication.clipboard().text() == "copy me"
    menu_keys(qtbot, w, "e", "p")  # Edit ▸ Paste
    assert w.input.toPlainText() == "copy me"
    menu_keys(qtbot, w, "e", "u")  # Edit ▸ Undo
    assert w.input.toPlainText() == ""


# -- narrow windows -------------------------------------------------------------------------------------------------
def test_the_statistics_fold_to_a_strip_and_back_by_keyboard_and_mouse_and_stay_so(qtbot, tiny, isolated_home):
    from app.shell.fold import STRIP

    w = keyboard_window(qtbot, tiny, isolated_home)
    open_width, chat_width = w.stats_pane.width(), w.chat.width()
    press(qtbot, Qt.Key.Key_F9)  # View ▸ Statistics
    qtbot.waitUntil(lambda: w.stats_pane.width() == STRIP)
    assert not w.stats.isVisible() and w.stats_pane.strip.isVisible() and w.controller.settings.stats_folded
    assert w.chat.width() > chat_width + open_width - STRIP - 20  # the chat has the room
    assert focused() is w.input  # the keyboard stays where it was
    qtbot.mouseClick(w.stats_pane.strip, Qt.MouseButton.LeftButton)  # the strip opens it again
    qtbot.waitUntil(lambda: w.stats.isVisible())
    assert abs(w.stats_pane.width() - open_width) <= 2 and not w.controller.settings.stats_folded
    qtbot.mouseClick(w.stats_pane.fold_button, Qt.MouseButton.LeftButton)  # the button at its corner folds it
    qtbot.waitUntil(lambda: w.stats_pane.width() == STRIP)
    press(qtbot, Qt.Key.Key_L, CTRL | SHIFT)  # and the chat list hides too
    assert not w.conversations.isVisible() and not w.controller.settings.chat_list_shown
    w.close()
    assert load_settings()[0].stats_folded

    again = open_window(qtbot)  # the next start remembers
    qtbot.waitUntil(lambda: again.stats_pane.width() == STRIP)
    assert not again.stats.isVisible() and not again.conversations.isVisible()
    assert not again.commands.stats.isChecked() and not again.commands.chat_list.isChecked()


def test_at_800_px_nothing_that_tells_target_from_drafter_is_cut(qtbot, tiny, isolated_home):
    from PySide6.QtWidgets import QLabel

    w = keyboard_window(qtbot, tiny, isolated_home)
    qtbot.waitUntil(lambda: len(w.bar.drafter_choices()) > 2, timeout=REPLY_TIMEOUT_MS)
    w.resize(800, 700)
    qtbot.waitUntil(lambda: w.width() == 800)  # the window goes that narrow with the statistics open
    press(qtbot, Qt.Key.Key_F9)
    qtbot.waitUntil(lambda: w.stats_pane.width() < 40)
    bar = w.bar
    labels = {lab.text(): lab for lab in bar.findChildren(QLabel) if lab.text() in ("Target", "Drafter")}
    assert set(labels) == {"Target", "Drafter"}
    for lab in labels.values():  # the role labels show whole, inside the bar
        assert lab.isVisible() and lab.width() >= lab.sizeHint().width()
        assert lab.mapTo(bar, QPoint(lab.width(), 0)).x() <= bar.width()
    for combo in (bar.target, bar.drafter):
        assert combo.mapTo(bar, QPoint(combo.width(), 0)).x() <= bar.width()
        full = combo.currentText()
        shown = combo.shown_text()
        assert shown == (combo.currentData(Qt.ItemDataRole.UserRole + 1) or full) or "…" in shown, shown
        assert full in combo.toolTip()  # the whole name, with what the box is for
    assert "tiny-target" in bar.target.shown_text() and "tiny-drafter" in bar.drafter.shown_text()

    # The toolbar: every command has a visible button inside the bar, or sits in the More menu.
    strip = w.toolbar_strip
    actions = [a for a, _b in strip.items if a is not None]
    shown = [a for a in actions if strip.button_for(a).isVisible()]
    assert strip.overflow and strip.more.isVisible() and shown + strip.overflow == actions
    for a in shown:
        b = strip.button_for(a)
        assert b.mapTo(strip, QPoint(b.width(), 0)).x() <= strip.width()
    assert [a for a in strip.more_menu.actions() if not a.isSeparator()] == strip.overflow
    w.resize(1900, 800)
    qtbot.waitUntil(lambda: not strip.overflow)
    assert not strip.more.isVisible() and all(strip.button_for(a).isVisible() for a in actions)


def test_the_more_menu_works_by_mouse_and_its_commands_by_keyboard(qtbot, tiny, isolated_home):
    w = keyboard_window(qtbot, tiny, isolated_home, show_rejected=False)
    w.resize(800, 700)
    qtbot.waitUntil(lambda: w.toolbar_strip.more.isVisible())
    assert w.commands.rejected in w.toolbar_strip.overflow
    menu = w.toolbar_strip.more_menu

    def choose(m: QMenu) -> None:  # the menu is open (a mouse press on "More" waits in it): pick an item
        m.setActiveAction(w.commands.rejected)
        qtbot.keyClick(m, Qt.Key.Key_Return)

    in_dialog(qtbot, lambda: menu, choose)
    qtbot.mouseClick(w.toolbar_strip.more, Qt.MouseButton.LeftButton)
    assert w.controller.settings.show_rejected
    activate(qtbot, w)
    press(qtbot, Qt.Key.Key_R, CTRL | SHIFT)  # its shortcut, the same command
    assert not w.controller.settings.show_rejected


def test_esc_stops_a_reply_while_the_message_box_has_the_keyboard(qtbot, tiny, isolated_home):
    """Esc is Chat ▸ Stop: it reaches the window from the message box, where the keyboard is after Send."""
    from engine.decoding.events import FinishReason

    w = keyboard_window(qtbot, tiny, isolated_home, max_tokens=3000)
    w.resize(800, 700)  # narrow: the toolbar folds its end into More ▾
    qtbot.keyClicks(w.input, "the model is fast")
    qtbot.keyClick(w.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(w.controller.messages and w.controller.messages[-1].tokens), timeout=REPLY_TIMEOUT_MS)
    assert focused() is w.input
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS) as done:
        press(qtbot, Qt.Key.Key_Escape)
    assert done.args[0].finish_reason == FinishReason.CANCELLED


def test_a_message_sent_brings_the_chat_to_its_end_wherever_it_was_read(qtbot, tiny, isolated_home):
    """Scrolled up to read an earlier reply, a person who sends a message sees it and the reply streaming below
    it (the real scroll bar, the real Enter key)."""
    w = keyboard_window(qtbot, tiny, isolated_home)
    w.resize(800, 520)
    for text in ("one " * 60, "two " * 60, "three " * 60):
        qtbot.keyClicks(w.input, text)
        with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
            qtbot.keyClick(w.input, Qt.Key.Key_Return)
    sb = w.chat.verticalScrollBar()
    qtbot.waitUntil(lambda: sb.maximum() > 0)
    w.chat.setFocus()
    press(qtbot, Qt.Key.Key_Home, CTRL)  # back to the first message, as a reader does
    qtbot.waitUntil(lambda: sb.value() < sb.maximum() // 2)
    w.input.setFocus()
    qtbot.keyClicks(w.input, "four")
    with qtbot.waitSignal(w.controller.sig_reply_finished, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(w.input, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: sb.value() == sb.maximum())
    assert w.controller.messages[-2].content == "four"
