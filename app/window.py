"""The main window: menu bar and toolbar | conversation list | model bar, chat, legend, input | stats pane.

Every command is one QAction (app.shell.window_commands makes them): the menu bar, the toolbar, the tooltip and
the shortcut all show the same object, so they never disagree. The keyboard reaches everything: the input
has the focus at start and after each command that finishes something, F6 moves between the panes, Ctrl+Up
and Ctrl+Down between messages, Tab to a message's links and Shift+F10 (or the menu key) to its actions.
"""
from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QByteArray, QSize, Qt
from PySide6.QtGui import QCloseEvent, QGuiApplication, QIcon, QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine import paths
from engine.errors import AttachmentError
from engine.drafting.draft_choice import DraftSpec
from app.chat.actions import MessageAction
from app.chat.attachment_bar import AttachmentBar
from app.chat.chat_pane import ChatPane
from app.chat.chat_view import ViewOptions
from app.chat.context_meter import ContextMeter
from app.control.controller import ChatController
from app.chat.conversation_list import ConversationList
from app.control.model_scan import entry_for
from app.control.pairing import LoadState
from app.control.streaming_reply import StreamingReply, stats_title
from app.core import slot_errors
from app.core.errors import Action, Level, Notice
from app.history.export import write_markdown, write_trace
from app.models.first_run import FirstRunPanel
from app.chat.input_box import InputBox
from app.chat.legend import Legend
from app.models.model_bar import ModelBar
from app.notice_bar import NoticeBar
from app.history.records import Role
from app.history.reply_stats import StatsSnapshot
from app.shell.fold import FoldingPane
from app.shell.import_job import ImportJob
from app.shell.toolbar import overflow_toolbar
from app.stats.stats_panel import StatsPanel
from app.core.theme import Theme, apply_theme, colours_for
from app.core.window_fit import fit_to_screen
from app.shell.window_commands import WindowCommands


def icon_path() -> Path:
    return paths.resources_dir() / "icons" / "draftlight.svg"


class MainWindow(QMainWindow):
    """Wires widgets to the controller; holds no state of its own beyond what is on screen."""

    def __init__(self, controller: ChatController | None = None) -> None:
        super().__init__()
        self.controller = controller or ChatController()
        self.setWindowTitle("Draftlight")
        if icon_path().is_file():
            self.setWindowIcon(QIcon(str(icon_path())))
        self.resize(1280, 800)
        self._build()
        self._name_controls()
        self._restore_layout()
        self._connect()
        self.controller.start()

    # -- layout --------------------------------------------------------------------------
    def _build(self) -> None:
        self.chat_pane = ChatPane()  # the chat view, its find bar (Ctrl+F) and token details panel
        self.conversations = ConversationList()
        self.bar = ModelBar()
        self.notice = NoticeBar()
        self._previous_excepthook = slot_errors.install(self.notice.show_notice)
        self.chat = self.chat_pane.view
        self.chat.setObjectName("chat_view")
        self.legend = Legend()
        self.input = InputBox()
        self.attachments = AttachmentBar()
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("send")
        self.send_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stop")
        self.stop_button.setEnabled(False)
        self.stats = StatsPanel()
        self.stats_pane = FoldingPane(self.stats, "Statistics")
        self.stats_pane.setObjectName("stats_pane")
        self.first_run = FirstRunPanel(self.controller)
        self.first_run.hide()

        self.commands = WindowCommands(self)
        c = self.commands
        # The names the toolbar's actions had before the menu bar (tests and scripts use them).
        self.act_new, self.act_models, self.act_compare = c.new, c.models, c.compare
        self.act_export_md, self.act_export_trace, self.act_highlight, self.act_rejected = (
            c.export_md, c.export_trace, c.highlight, c.rejected)
        self.act_attach, self.act_import = c.attach, c.import_chat
        self.attach_button = QToolButton()
        self.attach_button.setDefaultAction(self.act_attach)
        self.attach_button.setObjectName("attach")
        self.toolbar, self.toolbar_strip = overflow_toolbar("Toolbar", "main_toolbar", [
            c.models, c.compare, None, c.export_md, c.export_trace, c.import_chat, None, c.highlight, c.rejected,
            c.details])
        self.addToolBar(self.toolbar)
        c.fill_menu_bar(self.menuBar(), self.toolbar)

        centre = QWidget()
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(6, 0, 6, 0)
        cl.addWidget(self.bar)
        cl.addWidget(self.first_run, 1)
        cl.addWidget(self.chat_pane, 1)
        cl.addWidget(self.legend)
        cl.addWidget(self.attachments)
        row = QHBoxLayout()
        row.addWidget(self.input, 1)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        row.addLayout(buttons)
        cl.addLayout(row)
        self.context_meter = ContextMeter()
        bottom = QHBoxLayout()
        bottom.addWidget(self.attach_button)
        bottom.addStretch(1)
        bottom.addWidget(self.context_meter)
        cl.addLayout(bottom)
        self.notice.setParent(centre)  # floats over the chat's top edge: showing it moves nothing
        self.notice.float_over([self.chat_pane, self.first_run])

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.conversations)
        split.addWidget(centre)
        split.addWidget(self.stats_pane)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(2, 0)
        split.setSizes([220, 760, 300])
        split.setChildrenCollapsible(False)
        self.setCentralWidget(split)
        self.split = split

        self.status_label = QLabel("Starting…")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(200)
        self.progress.setRange(0, 100)
        self.progress.hide()
        self.statusBar().addWidget(self.status_label, 1)
        self.statusBar().addPermanentWidget(self.progress)
        self.setTabOrder(self.input, self.send_button)

    def sizeHint(self) -> QSize:
        return QSize(1280, 800)

    def _name_controls(self) -> None:
        """What a screen reader says for each control (pickers, panes, buttons)."""
        cv = self.conversations
        for w, name in ((cv, "Chats"), (cv.list, "Chat list"), (cv.search, "Search chats"),
                        (cv.new_button, "New chat"), (cv.rename_button, "Rename chat"),
                        (cv.delete_button, "Delete chat"), (self.chat, "Conversation"), (self.input, "Message"),
                        (self.send_button, "Send"), (self.stop_button, "Stop"), (self.attach_button, "Attach files"),
                        (self.progress, "Loading progress"), (self.status_label, "Status")):
            w.setAccessibleName(name)

    def _restore_layout(self) -> None:
        """The window's place and size, and the panes' widths, as they were at the last close."""
        s = self.controller.settings
        if s.window_geometry:
            self.restoreGeometry(QByteArray.fromBase64(s.window_geometry.encode("ascii")))
            fit_to_screen(self)  # saved on a bigger screen
        if s.window_splitter:
            self.split.restoreState(QByteArray.fromBase64(s.window_splitter.encode("ascii")))

    def showEvent(self, e: QShowEvent) -> None:
        super().showEvent(e)
        if not e.spontaneous() and not getattr(self, "_shown_once", False):
            self._shown_once = True
            self.focus_input()  # typing starts a message, whatever the window shows first

    def _connect(self) -> None:
        c = self.controller
        c.sig_notice.connect(self.notice.show_notice)
        c.sig_conversations.connect(self.conversations.set_conversations)
        c.sig_messages.connect(self.chat.show_messages)
        c.sig_message_added.connect(self.chat.append_message)
        c.sig_reply_started.connect(self._follow_reply)
        c.sig_reply_finished.connect(self.chat.finish_reply)
        c.sig_stats.connect(self.stats.show_snapshot)
        c.sig_busy.connect(self._busy)
        c.sig_input_restore.connect(self._restore_input)
        c.sig_load_state.connect(self._load_state)
        c.sig_models.connect(self.bar.set_models)
        c.sig_models.connect(self._models_listed)
        c.sig_drafters.connect(self.bar.set_drafters)
        c.sig_settings.connect(self._apply_settings)
        c.sig_no_models.connect(self._first_run)

        self.conversations.sig_new.connect(self.new_chat)
        self.conversations.sig_selected.connect(c.open_conversation)
        self.conversations.sig_rename.connect(c.rename_conversation)
        self.conversations.sig_delete.connect(self._confirm_delete)
        self.conversations.sig_search.connect(c.set_search)
        self.conversations.sig_chosen.connect(self.focus_input)
        self.bar.sig_target_chosen.connect(lambda p: c.update_settings(target=p))
        self.bar.sig_drafter_chosen.connect(lambda d: c.update_settings(drafter=d, drafter_chosen=True))
        self.bar.sig_draft_length.connect(lambda k: c.update_settings(draft_max=k))
        self.bar.sig_fast_copy_wanted.connect(lambda: self.open_models("fast-copy"))
        self.stats.sig_fast_copy.connect(lambda: self.open_models("fast-copy"))
        c.sig_models.connect(self._fast_copy_offered)
        c.sig_settings.connect(self._fast_copy_offered)
        self.bar.sampling.sig_changed.connect(lambda ch: c.update_settings(**ch.changes()))
        self.bar.sampling.sig_forget.connect(c.forget_past_chats)
        c.sig_past_chats.connect(self.bar.sampling.show_past_chats)
        self.input.sig_submit.connect(self._send)
        self.input.sig_resend.connect(self._resend)
        self.input.sig_editing.connect(self._editing)
        self.input.sig_files.connect(self.attachments.add_paths)
        self.input.sig_refused.connect(self._refused_file)
        self.attachments.sig_refused.connect(self._refused_file)
        self.attachments.sig_changed.connect(self._files_changed)
        self.act_attach.triggered.connect(self.pick_files)
        self.act_import.triggered.connect(self.import_chat)
        self.chat.action_requested.connect(self._message_action)
        c.sig_messages.connect(self._path_changed)
        self.send_button.clicked.connect(self.send_typed)
        self.stop_button.clicked.connect(c.stop)
        self.stop_button.setToolTip(self.commands.stop.toolTip())
        self.send_button.setToolTip(self.commands.send.toolTip())
        self.notice.sig_action.connect(self._notice_action)
        self.first_run.sig_open_models.connect(self.open_models)
        self.chat.copied.connect(lambda what: self.statusBar().showMessage(f"Copied the {what}.", 2500))
        self.chat.link_refused.connect(lambda url: self.statusBar().showMessage(
            f"Not opened: {url[:80]} (links in messages open only as http, https or mailto).", 5000))
        self.stats_pane.sig_fold_requested.connect(lambda fold: c.update_settings(stats_folded=fold))
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._system_scheme_changed)
        for sig in (c.sig_messages, c.sig_reply_finished, c.sig_loaded, c.sig_message_added):
            sig.connect(self._show_context)
        self.commands.connect_to(self)

    # -- reacting ----------------------------------------------------------------------------
    def _apply_settings(self, s) -> None:
        app = QApplication.instance()
        if app is not None and getattr(self, "_theme", None) != s.theme:
            self._theme = s.theme
            apply_theme(app, s.theme)
        self.commands.show_settings(s)
        colours = colours_for(s.theme)
        self.chat.set_options(ViewOptions(colours, s.highlight, s.show_rejected))
        self.legend.show_legend(colours, s.highlight, s.show_rejected and s.highlight)
        self.context_meter.set_colours(colours)
        self.bar.set_settings(s)
        self.stats_pane.set_folded(s.stats_folded)
        self.conversations.setVisible(s.chat_list_shown)

    def _system_scheme_changed(self, _scheme=None) -> None:
        """The OS switched between light and dark: the System theme follows at once."""
        if self.controller.settings.theme == Theme.SYSTEM:
            self._theme = None
            self._apply_settings(self.controller.settings)

    def _follow_reply(self, reply: StreamingReply) -> None:
        """A chat reply started: the chat view, the stats panel and the context meter observe it."""
        reply.changed.connect(self.chat.reply_changed)
        reply.changed.connect(self._show_context)
        reply.stats_changed.connect(self._reply_stats)

    def _reply_stats(self, snapshot: StatsSnapshot) -> None:
        live = self.controller.chat_reply
        if live is not None and self.controller.showing(live):  # its chat is the open one
            self.stats.show_snapshot(snapshot, stats_title(snapshot))

    def _show_context(self, *_args) -> None:
        loaded = self.controller.loaded
        self.context_meter.show_usage(self.controller.messages, loaded.n_ctx if loaded else None)

    def focus_input(self) -> None:
        """Give the message box the keyboard (where it is shown: the first-run panel may stand in for the chat).
        Called after a command, a closed dialog included: the window takes the keyboard back too (a window
        manager does not always give it back)."""
        if self.isVisible() and not self.isActiveWindow() and QApplication.activeModalWidget() is None:
            self.activateWindow()
        if self.input.isVisibleTo(self) and self.chat_pane.isVisibleTo(self):
            self.input.setFocus(Qt.FocusReason.OtherFocusReason)
        elif self.first_run.isVisibleTo(self):
            self.first_run.default_button.setFocus(Qt.FocusReason.OtherFocusReason)

    def new_chat(self) -> None:
        self.controller.new_conversation()
        self.focus_input()

    def send_typed(self) -> None:
        """Send (or resend, when editing) what the message box holds."""
        self._send(self.input.toPlainText())
        self.focus_input()

    def _send(self, text: str) -> None:
        if self.input.editing is not None:
            self._resend(self.input.editing, text)
            return
        files = self._attached()
        earlier = self.notice.notice if not self.notice.isHidden() else None
        if files is not None and self.controller.send(text, files):
            self.input.clear()
            self.attachments.clear()
            if earlier is not None and self.notice.notice is earlier:
                self.notice.hide()  # what stopped an earlier send ("too long", a file gone) no longer holds

    def _attached(self):
        """The attached files as they are now, or None (and a notice) when one cannot be sent."""
        try:
            return self.attachments.attachments()
        except AttachmentError as exc:
            self._file_notice = Notice(f"{exc}. Nothing was sent.", Level.WARNING)
            self.notice.show_notice(self._file_notice)
            return None

    def _files_changed(self) -> None:
        self.input.files_attached = self.attachments.any
        # A warning about an attached file goes once that file is no longer attached (✕ on its chip).
        shown = self.notice.notice
        if shown is not None and shown is getattr(self, "_file_notice", None) and not self.notice.isHidden() and \
                not any(shown.text.startswith(f"{c.name} ") for c in self.attachments.chips):
            self.notice.hide()

    def _refused_file(self, why: str) -> None:
        self.notice.show_notice(Notice(why, Level.WARNING))

    def _editing(self, on: bool) -> None:
        self.send_button.setText("Resend" if on else "Send")
        if not on:
            self.attachments.setEnabled(True)
            self.act_attach.setEnabled(True)
            self.attachments.end_edit()

    def pick_files(self) -> None:
        """Attach files chosen in the platform's file dialog."""
        if self.act_attach.isEnabled():
            self.attachments.pick(self)
        self.input.setFocus()

    # -- one message's actions (links in the chat view) ------------------------------------------
    def _message_action(self, name: str, message_id: int) -> None:
        c = self.controller
        try:
            action = MessageAction(name)
        except ValueError:
            return
        if action in (MessageAction.REGENERATE, MessageAction.REGENERATE_CURRENT):
            c.regenerate(message_id, current=action == MessageAction.REGENERATE_CURRENT)
            self.focus_input()
        elif action == MessageAction.EDIT:
            if c.can_edit(message_id):
                m = c.message(message_id)
                reply = m.role == Role.ASSISTANT
                self.attachments.begin_edit(None if reply else m.attachments)
                self.attachments.setEnabled(not reply)  # a reply has no files
                self.input.begin_edit(message_id, m.text, reply=reply)
                self.act_attach.setEnabled(not reply)
                self.send_button.setText("Save" if reply else "Resend")
        elif action == MessageAction.CONTINUE:
            c.continue_reply(message_id)
        elif action == MessageAction.FORK:
            c.fork(message_id)
        elif action == MessageAction.DELETE:
            self._confirm_delete_message(message_id)
            self.focus_input()
        elif action in (MessageAction.PREVIOUS, MessageAction.NEXT):
            c.show_alternative(message_id, -1 if action == MessageAction.PREVIOUS else 1)

    def regenerate_last(self) -> None:
        """Regenerate the last reply on the shown path (Chat ▸ Regenerate last reply)."""
        last = next((m for m in reversed(self.controller.messages) if m.role == Role.ASSISTANT), None)
        if last is None:
            self.notice.show_notice(Notice("There is no reply to regenerate yet: send a message first.", Level.INFO))
            return
        self._message_action(MessageAction.REGENERATE.value, last.id)

    def _resend(self, message_id: int, text: str) -> None:
        m = self.controller.message(message_id)
        files = None
        if m is not None and m.role == Role.USER:
            files = self._attached()
            if files is None:
                return
        if self.controller.resend_edit(message_id, text, files):
            self.input.end_edit()

    def _path_changed(self, _messages) -> None:
        """The shown path changed: an edit of a message no longer shown has nothing to replace."""
        if self.input.editing is not None and self.controller.message(self.input.editing) is None:
            self.input.end_edit()

    def _confirm_delete_message(self, message_id: int) -> None:
        """Deleting a reply loses it (a sampled reply cannot be made again exactly): ask first. A
        question goes without asking: its replies stay, moved up (see ChatStore.delete_message)."""
        m = self.controller.message(message_id)
        if m is None or self.controller.refused("deleting a message"):
            return
        if m.role == Role.ASSISTANT:
            answer = QMessageBox.question(self, "Delete reply", f"Delete this reply ({len(m.tokens)} tokens and "
                                          "their provenance)? This cannot be undone.")
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.controller.delete_message(message_id)

    def _restore_input(self, text: str, attachments=()) -> None:
        if not self.input.toPlainText().strip():
            self.input.setPlainText(text)
        if attachments and not self.attachments.chips:
            self.attachments.set_attachments(attachments)

    def _busy(self, busy: bool) -> None:
        self.send_button.setEnabled(not busy)
        self.stop_button.setEnabled(busy)
        self.commands.busy(busy)

    def _load_state(self, state: LoadState) -> None:
        self.status_label.setText(state.text)
        if state.progress is None:
            self.progress.hide()
        else:
            self.progress.show()
            self.progress.setValue(int(state.progress * 100))

    def _confirm_delete(self, conv_id: int) -> None:
        conv = self.controller.conversation(conv_id)
        if conv is None:
            return
        answer = QMessageBox.question(self, "Delete chat", f"Delete “{conv.title}”? This cannot be undone.")
        if answer == QMessageBox.StandardButton.Yes:
            self.controller.delete_conversation(conv_id)

    def _notice_action(self, action: Action) -> None:
        if action == Action.OPEN_MODELS:
            self.open_models()
        elif action == Action.NEW_CHAT:
            self.new_chat()

    def _first_run(self) -> None:
        """No model is installed: the ways to get one take the chat's place until one is."""
        self.chat_pane.hide()
        self.legend.hide()
        self.first_run.show()
        self.controller.update_settings(first_run_done=True)
        self.focus_input()

    def _fast_copy_offered(self, *_args) -> None:
        """Whether the stats panel may point to a fast copy: one can be made of the target, and there is a drafter."""
        s = self.controller.settings
        entry = entry_for(self.controller.models, s.target)
        self.stats.fast_copy_offered = s.drafter != DraftSpec.NONE and entry is not None and entry.copyable
        if not self.stats.fast_copy_offered:
            self.stats.fast_copy_hint.hide()

    def _models_listed(self, models, target: str) -> None:
        if (models or target) and self.first_run.isVisible():
            self.first_run.hide()
            self.chat_pane.show()
            self.legend.show()
            self.focus_input()

    # -- dialogs ------------------------------------------------------------------------------
    def open_models(self, tab: str = "") -> None:
        from app.models.models_dialog import ModelsDialog

        dlg = ModelsDialog(self.controller, self, tab=tab)
        self.models_dialog = dlg  # while it is open (tests and the screenshots reach it here)
        dlg.exec()
        self.models_dialog = None
        self.focus_input()

    def open_local_server(self) -> None:
        """Models ▸ Local server: one dialog, not modal (the chat stays usable while clients are served)."""
        from app.shell.server_dialog import ServerDialog

        dlg = getattr(self, "server_dialog", None)
        if dlg is None:
            dlg = self.server_dialog = ServerDialog(self.controller, self)
        dlg.show()
        dlg.raise_()
        dlg.activateWindow()

    def open_compare(self) -> None:
        from app.stats.compare_dialog import CompareDialog

        c = self.controller
        last = next((i for i in range(len(c.messages) - 1, -1, -1) if c.messages[i].role == Role.ASSISTANT
                     and c.messages[i].finished), None)
        if last is None or last == 0:
            self.notice.show_notice(Notice("Nothing to compare yet: send a message first.", Level.INFO))
            return
        dlg = CompareDialog(c, c.messages[: last + 1], self)
        if not dlg.start():
            self.notice.show_notice(Notice("Wait for the reply to finish (or press Stop), then compare.", Level.INFO))
            dlg.deleteLater()
            return
        self.compare_dialog = dlg
        dlg.finished.connect(lambda _r: self.focus_input())
        dlg.show()

    def _export_target(self, title: str, suffix: str, filt: str) -> tuple[Path | None, object]:
        conv = self.controller.current_conversation()
        if conv is None or not self.controller.messages:
            self.notice.show_notice(Notice("Open a chat with messages to export it.", Level.INFO))
            return None, None
        safe = "".join(ch if ch.isalnum() or ch in " -_" else "_" for ch in conv.title).strip() or "chat"
        path, _ = QFileDialog.getSaveFileName(self, title, str(Path.home() / f"{safe}{suffix}"), filt)
        return (Path(path) if path else None), conv

    def export_markdown(self) -> None:
        path, conv = self._export_target("Export chat as Markdown", ".md", "Markdown (*.md)")
        if path is not None:
            self._write(lambda: write_markdown(path, conv, self.controller.messages), path)

    def export_trace(self) -> None:
        path, conv = self._export_target("Export trace as JSON Lines", ".jsonl", "JSON Lines (*.jsonl)")
        if path is not None:
            self._write(lambda: write_trace(path, conv, self.controller.chat_tree()), path)

    def import_chat(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a chat", str(Path.home()),
                                              "JSON Lines (*.jsonl);;All files (*)")
        if path and not self.controller.refused("importing a chat"):
            self.import_job = ImportJob(self, self.controller, Path(path))  # read off the GUI thread, with Cancel
            self.import_job.start()

    def _write(self, write, path: Path) -> None:
        try:
            write()
        except OSError as exc:
            self.notice.show_notice(Notice(f"Could not write {path}: {exc.strerror or exc}. Choose another folder."))
            return
        self.notice.show_notice(Notice(f"Saved {path}.", Level.INFO))

    def closeEvent(self, e: QCloseEvent) -> None:
        self.controller.update_settings(window_geometry=bytes(self.saveGeometry().toBase64()).decode("ascii"),
                                        window_splitter=bytes(self.split.saveState().toBase64()).decode("ascii"))
        self.controller.shutdown()
        sys.excepthook = self._previous_excepthook
        super().closeEvent(e)
