"""Every command of the main window as one QAction, the menu bar built from them, and what each does.

Shortcuts are the platform's standard ones where Qt knows one (New, Find, Find next, Quit, Preferences, Help,
Undo and the clipboard, Full screen) and otherwise chosen here; the menu shows each beside its command, the
tooltip names it, and Help ▸ Keyboard shortcuts lists them all from these same actions.
"""
from __future__ import annotations

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QLineEdit,
    QMenu,
    QMenuBar,
    QMessageBox,
    QPlainTextEdit,
    QTextEdit,
    QToolBar,
    QWidget,
)

from app.core.commands import StandardKey, command, describe, key_sequences
from app.core.settings import AppSettings
from app.core.theme import Theme


def keys(*sequences: str) -> list[QKeySequence]:
    return [QKeySequence(s) for s in sequences]


class WindowCommands(QObject):
    """The window's QActions, by menu. `connect_to` wires them once the window's parts exist."""

    def __init__(self, w: QWidget) -> None:
        super().__init__(w)
        pane = w.chat_pane
        # File
        self.new = command(w, "&New chat", "Start a new chat", key_sequences(StandardKey.New, "Ctrl+N"), name="new_chat")
        self.export_md = command(w, "Export &Markdown…", "Save this chat as a Markdown file", keys("Ctrl+E"))
        self.export_trace = command(w, "Export &trace (JSONL)…", "Save every branch of this chat with every token, "
                                    "round and timing as JSON Lines (Import chat reads it back)", keys("Ctrl+Shift+E"))
        self.import_chat = command(w, "&Import chat…", "Open a chat exported as JSON Lines (Export trace) as a new chat",
                                   key_sequences(StandardKey.Open, "Ctrl+O"))
        self.quit = command(w, "&Quit", "Close Draftlight (chats are saved as they are written)",
                            key_sequences(StandardKey.Quit, "Ctrl+Q"))
        # Edit: on the text field that has the keyboard
        self.undo = command(w, "&Undo", "Undo the last change to the text being typed", key_sequences(StandardKey.Undo, "Ctrl+Z"))
        self.redo = command(w, "&Redo", "Do again what Undo took back", key_sequences(StandardKey.Redo, "Ctrl+Shift+Z"))
        self.cut = command(w, "Cu&t", "Cut the selected text", key_sequences(StandardKey.Cut, "Ctrl+X"))
        self.copy = command(w, "&Copy", "Copy the selected text", key_sequences(StandardKey.Copy, "Ctrl+C"))
        self.paste = command(w, "&Paste", "Paste into the text field", key_sequences(StandardKey.Paste, "Ctrl+V"))
        self.select_all = command(w, "Select &all", "Select all the text of the field or the chat",
                                  key_sequences(StandardKey.SelectAll, "Ctrl+A"))
        self.find = pane.act_find
        self.find_next = command(w, "Find &next", "The next match in the chat",
                                 key_sequences(StandardKey.FindNext, "F3"))
        self.find_previous = command(w, "Find pre&vious", "The previous match in the chat",
                                     key_sequences(StandardKey.FindPrevious, "Shift+F3"))
        self.search_chats = command(w, "&Search chats…", "Find a chat by the words in it", keys("Ctrl+Shift+F"))
        # View
        self.highlight = command(w, "&Highlight tokens", "Mark each token by where it came from: accepted draft, "
                                 "correction, bonus token or the target alone", keys("Ctrl+Shift+H"), checkable=True)
        self.rejected = command(w, "Show &rejected drafts", "Show what the drafter proposed, struck through, before "
                                "each correction (with highlighting on)", keys("Ctrl+Shift+R"), checkable=True)
        self.details = pane.act_details
        self.chat_list = command(w, "&Chat list", "Show or hide the list of chats", keys("Ctrl+Shift+L"), checkable=True)
        self.stats = command(w, "&Statistics", "Show the reply's statistics beside the chat, or fold them to a strip",
                             keys("F9"), checkable=True)
        self.themes: dict[Theme, QAction] = {}
        self.theme_group = QActionGroup(self)
        for t in Theme:
            act = command(w, f"&{t.value.capitalize()}", f"The {t.value} theme" if t != Theme.SYSTEM
                          else "Light or dark as the system is", checkable=True)
            self.theme_group.addAction(act)
            self.themes[t] = act
        self.next_pane = command(w, "Next &pane", "Move the keyboard to the next pane: chats, chat, message box",
                                 keys("F6"))
        self.previous_pane = command(w, "Previous pan&e", "Move the keyboard to the previous pane", keys("Shift+F6"))
        self.full_screen = command(w, "&Full screen", "Use the whole screen", key_sequences(StandardKey.FullScreen, "F11"),
                                   checkable=True)
        # Chat
        self.attach = command(w, "Attach &files…", "Add text, code or PDF files to your message (or drop or paste them "
                              "into the message box)", keys("Ctrl+Shift+A"))
        self.send = command(w, "&Send", "Send the message (Enter in the message box; Shift+Enter starts a new line)",
                            keys("Ctrl+Return"), name="send_message")
        self.stop = command(w, "S&top", "Stop the reply", keys("Esc"))
        self.stop.setEnabled(False)
        self.regenerate = command(w, "&Regenerate last reply", "A new reply to the last question, made with the "
                                  "settings the last reply was made with (kept as an alternative)", keys("Ctrl+R"))
        self.compare = command(w, "&Compare with plain decoding", "Run the last prompt again without a drafter and "
                               "show both replies side by side", keys("Ctrl+Shift+C"))
        self.previous_message = command(w, "&Previous message", "Move to the previous message in the chat",
                                        keys("Ctrl+Up"))
        self.next_message = command(w, "Ne&xt message", "Move to the next message in the chat", keys("Ctrl+Down"))
        self.message_actions = command(w, "Message &actions…", "Copy, regenerate, edit, delete… the message at the "
                                       "chat's text cursor (Tab also moves through a message's links)",
                                       keys("Shift+F10"))
        self.message_box = command(w, "Go to the &message box", "Put the keyboard in the message box", keys("Ctrl+L"))
        self.rename_chat = command(w, "Re&name chat", "Rename the open chat", keys("F2"))
        self.delete_chat = command(w, "&Delete chat…", "Delete the open chat (asks first)")
        # Models
        self.models = command(w, "&Models…", "Installed models, what pairs with what, the catalog of pairs, hardware",
                              keys("Ctrl+Shift+M"))
        self.hardware = command(w, "&Hardware and loading…", "Context length, GPU layers, threads, and the memory "
                                "the pair needs", key_sequences(StandardKey.Preferences, "Ctrl+,"))
        self.target = command(w, "Choose the &target…", "The model whose answer you get", keys("Alt+T"))
        self.drafter = command(w, "Choose the &drafter…", "A small model, prompt lookup, both, or none",
                               keys("Alt+D"))
        self.draft_length = command(w, "Draft &length", "Tokens drafted per round (when Auto is off)", keys("Alt+K"))
        self.auto = command(w, "&Automatic draft length", "Let the engine choose the draft length from measured "
                            "costs, down to no drafting when speculation would be slower", keys("Alt+A"),
                            checkable=True)
        self.local_server = command(w, "Local se&rver…", "Serve the loaded pair to other programs on this computer "
                                    "(an OpenAI-compatible API) and watch their requests live")
        self.sampling = command(w, "&Sampling…", "Temperature, top-k, top-p, min-p, seed, max tokens, system prompt",
                                keys("Alt+S"))
        # Help
        self.shortcuts = command(w, "&Keyboard shortcuts", "Every command and its keys",
                                 key_sequences(StandardKey.HelpContents, "F1"))
        self.about = command(w, "&About Draftlight", "Version and what Draftlight does")
        for act in (self.find, self.details):  # made by the chat pane: same words, this window's tooltips
            describe(act, act.statusTip())
        self.window_actions = [a for a in vars(self).values() if isinstance(a, QAction)] + list(self.themes.values())
        w.addActions(self.window_actions)  # their shortcuts work while the menu bar is hidden (macOS full screen)

    def fill_menu_bar(self, bar: QMenuBar, toolbar: QToolBar) -> None:
        toolbar_action = toolbar.toggleViewAction()
        toolbar_action.setText("T&oolbar")
        describe(toolbar_action, "Show or hide the toolbar (its commands are all in these menus)")
        theme_menu = QMenu("&Theme", bar)
        theme_menu.addActions(list(self.themes.values()))
        menus: list[tuple[str, list[QAction | QMenu | None]]] = [
            ("&File", [self.new, None, self.export_md, self.export_trace, self.import_chat, None, self.quit]),
            ("&Edit", [self.undo, self.redo, None, self.cut, self.copy, self.paste, self.select_all, None,
                       self.find, self.find_next, self.find_previous, None, self.search_chats]),
            ("&View", [self.highlight, self.rejected, self.details, None, self.chat_list, self.stats, toolbar_action,
                       None, theme_menu, None, self.next_pane, self.previous_pane, self.full_screen]),
            ("&Chat", [self.attach, self.send, self.stop, None, self.regenerate, self.compare, None, self.previous_message,
                       self.next_message, self.message_actions, self.message_box, None, self.rename_chat,
                       self.delete_chat]),
            ("&Models", [self.models, self.hardware, None, self.target, self.drafter, self.draft_length, self.auto,
                         self.sampling, None, self.local_server]),
            ("&Help", [self.shortcuts, self.about]),
        ]
        for title, items in menus:
            menu = bar.addMenu(title)
            for item in items:
                if item is None:
                    menu.addSeparator()
                elif isinstance(item, QMenu):
                    menu.addMenu(item)
                else:
                    menu.addAction(item)
        self.menu_bar = bar

    # -- what each does ---------------------------------------------------------------------------
    def connect_to(self, w) -> None:
        """`w`: the MainWindow (app.window, a layer above: not imported here)."""
        c, pane, bar = w.controller, w.chat_pane, w.bar
        self.window = w
        self.new.triggered.connect(w.new_chat)
        self.export_md.triggered.connect(w.export_markdown)
        self.export_trace.triggered.connect(w.export_trace)
        self.quit.triggered.connect(w.close)
        for act, name in ((self.undo, "undo"), (self.redo, "redo"), (self.cut, "cut"), (self.copy, "copy"),
                          (self.paste, "paste"), (self.select_all, "selectAll")):
            act.triggered.connect(lambda _checked=False, n=name: self._edit(n))
        self.find_next.triggered.connect(lambda: self._find(backward=False))
        self.find_previous.triggered.connect(lambda: self._find(backward=True))
        self.search_chats.triggered.connect(self._search_chats)
        self.highlight.toggled.connect(lambda on: c.update_settings(highlight=on))
        self.rejected.toggled.connect(lambda on: c.update_settings(show_rejected=on))
        self.chat_list.toggled.connect(lambda on: c.update_settings(chat_list_shown=on))
        self.stats.toggled.connect(lambda on: c.update_settings(stats_folded=not on))
        for t, act in self.themes.items():
            act.triggered.connect(lambda _checked=False, theme=t: c.update_settings(theme=theme))
        self.next_pane.triggered.connect(lambda: self._cycle_panes(1))
        self.previous_pane.triggered.connect(lambda: self._cycle_panes(-1))
        self.full_screen.toggled.connect(lambda on: w.showFullScreen() if on else w.showNormal())
        self.send.triggered.connect(w.send_typed)
        self.stop.triggered.connect(c.stop)
        self.regenerate.triggered.connect(w.regenerate_last)
        self.compare.triggered.connect(w.open_compare)
        self.previous_message.triggered.connect(lambda: self._go_to_message(-1))
        self.next_message.triggered.connect(lambda: self._go_to_message(1))
        self.message_actions.triggered.connect(lambda: w.chat.show_actions_menu())
        self.message_box.triggered.connect(w.focus_input)
        self.rename_chat.triggered.connect(self._rename_chat)
        self.delete_chat.triggered.connect(self._delete_chat)
        self.models.triggered.connect(lambda: w.open_models())
        self.hardware.triggered.connect(lambda: w.open_models("hardware"))
        self.target.triggered.connect(lambda: self._open_picker(bar.target))
        self.drafter.triggered.connect(lambda: self._open_picker(bar.drafter))
        self.draft_length.triggered.connect(self._draft_length)
        self.auto.toggled.connect(bar.auto.setChecked)
        self.sampling.triggered.connect(lambda: bar.sampling.popup_under(bar.sampling_button))
        self.local_server.triggered.connect(w.open_local_server)
        self.shortcuts.triggered.connect(self._show_shortcuts)
        self.about.triggered.connect(self._about)
        pane.find_bar.closed.connect(w.focus_input)

    def show_settings(self, s: AppSettings) -> None:
        """Check marks as the settings say (without acting on them again)."""
        for act, on in ((self.highlight, s.highlight), (self.rejected, s.show_rejected and s.highlight),
                        (self.chat_list, s.chat_list_shown), (self.stats, not s.stats_folded),
                        (self.auto, s.draft_max.is_auto), (self.themes[s.theme], True)):
            act.blockSignals(True)
            act.setChecked(on)
            act.blockSignals(False)
        # Rejected drafts show only with highlighting (with it off a reply reads as plain text).
        self.rejected.setEnabled(s.highlight)

    def busy(self, busy: bool) -> None:
        """A reply or Compare is running: what would start another waits."""
        self.stop.setEnabled(busy)
        for act in (self.send, self.regenerate, self.compare):
            act.setEnabled(not busy)

    # -- helpers ---------------------------------------------------------------------------------------
    def _edit(self, name: str) -> None:
        """Undo, Redo, Cut, Copy, Paste or Select all on the text field (or the chat) that has the keyboard."""
        widget = QApplication.focusWidget()
        if isinstance(widget, QAbstractSpinBox):
            widget = widget.findChild(QLineEdit)
        if isinstance(widget, (QLineEdit, QTextEdit, QPlainTextEdit)):
            getattr(widget, name)()

    def _find(self, backward: bool) -> None:
        bar = self.window.chat_pane.find_bar
        if not bar.isVisible() or not bar.field.text():
            bar.open()
        else:
            bar.find(backward=backward)

    def _search_chats(self) -> None:
        w = self.window
        if not w.controller.settings.chat_list_shown:
            w.controller.update_settings(chat_list_shown=True)
        w.conversations.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        w.conversations.search.selectAll()

    def _panes(self) -> list[QWidget]:
        w = self.window
        panes = [w.conversations.list, w.chat, w.input] if w.chat_pane.isVisible() else [w.conversations.list,
                                                                                           w.first_run]
        return [p for p in panes if p.isVisible()]

    def _cycle_panes(self, step: int) -> None:
        panes = self._panes()
        if not panes:
            return
        focus = QApplication.focusWidget()
        at = next((i for i, p in enumerate(panes) if focus is not None and (p is focus or p.isAncestorOf(focus))), -1)
        if at < 0 and focus is not None and self.window.conversations.isAncestorOf(focus):
            at = 0  # the search field or a button of the chat list
        target = panes[(at + step) % len(panes)] if at >= 0 else panes[0 if step > 0 else -1]
        if target is self.window.first_run:
            self.window.first_run.default_button.setFocus(Qt.FocusReason.TabFocusReason)
        else:
            target.setFocus(Qt.FocusReason.TabFocusReason)

    def _go_to_message(self, step: int) -> None:
        chat = self.window.chat
        chat.setFocus(Qt.FocusReason.ShortcutFocusReason)
        chat.go_to_message(step)

    def _rename_chat(self) -> None:
        w = self.window
        if w.conversations.current_id() is None:
            return
        if not w.controller.settings.chat_list_shown:
            w.controller.update_settings(chat_list_shown=True)
        w.conversations.list.setFocus(Qt.FocusReason.ShortcutFocusReason)
        w.conversations.start_rename()

    def _delete_chat(self) -> None:
        cid = self.window.conversations.current_id()
        if cid is not None:
            self.window._confirm_delete(cid)
            self.window.focus_input()

    @staticmethod
    def _open_picker(combo) -> None:
        combo.setFocus(Qt.FocusReason.ShortcutFocusReason)
        combo.showPopup()

    def _draft_length(self) -> None:
        bar = self.window.bar
        if bar.length.isEnabled():
            bar.length.setFocus(Qt.FocusReason.ShortcutFocusReason)
        else:  # Auto chooses it: the box that turns Auto off is where to start
            bar.auto.setFocus(Qt.FocusReason.ShortcutFocusReason)
            self.window.statusBar().showMessage("Auto chooses the draft length: turn Auto off (Alt+A, or Space "
                                                "here) to set one.", 6000)

    def _show_shortcuts(self) -> None:
        from app.shell.shortcuts_dialog import ShortcutsDialog

        dlg = ShortcutsDialog(self.menu_bar, self.window)
        self.shortcuts_dialog = dlg
        dlg.exec()
        self.shortcuts_dialog = None
        self.window.focus_input()

    def _about(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("draftlight")
        except PackageNotFoundError:
            v = "(not installed as a package)"
        QMessageBox.about(self.window, "About Draftlight",
                          f"<b>Draftlight</b> {v}<br>A local chat that shows speculative decoding at work: a small "
                          "drafter proposes tokens, the target checks them in one pass, and the chat marks which "
                          "ones it kept.")
