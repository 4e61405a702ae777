"""The main window: conversation list | model bar, chat, legend, input | stats panel."""
from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QByteArray, QSize, Qt
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QToolBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine import paths
from engine.errors import AttachmentError
from app.chat.actions import MessageAction
from app.chat.attachment_bar import AttachmentBar
from app.chat.chat_pane import ChatPane
from app.chat.chat_view import ViewOptions
from app.chat.context_meter import ContextMeter
from app.control.controller import ChatController
from app.history.conversation_list import ConversationList
from app.core import slot_errors
from app.core.errors import Action, Level, Notice
from app.history.export import write_markdown, write_trace
from app.models.first_run import FirstRunPanel
from app.chat.input_box import InputBox
from app.chat.legend import Legend
from app.models.model_bar import ModelBar
from app.notice_bar import NoticeBar
from app.history.records import Role
from app.stats.stats_panel import StatsPanel
from app.core.theme import Theme, apply_theme, colours_for


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
        tb = QToolBar("Main")
        tb.setObjectName("main_toolbar")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.addToolBar(tb)
        self.act_new = QAction("New chat", self, shortcut=QKeySequence.StandardKey.New)
        self.act_models = QAction("Models…", self)
        self.act_compare = QAction("Compare with plain decoding", self)
        self.act_compare.setToolTip("Run the last prompt again without a drafter and show both replies side by side")
        self.act_export_md = QAction("Export Markdown…", self)
        self.act_export_trace = QAction("Export trace (JSONL)…", self)
        self.act_export_trace.setToolTip("Every branch of this chat with each reply's engine events (JSON Lines); "
                                         "Import chat reads it back")
        self.act_import = QAction("Import chat…", self)
        self.act_import.setToolTip("Open a chat exported as JSON Lines (Export trace) as a new chat")
        self.act_attach = QAction("Attach files…", self, shortcut=QKeySequence("Ctrl+Shift+A"))
        self.act_attach.setToolTip("Add text, code or PDF files to your message (Ctrl+Shift+A; or drop or paste "
                                   "them into the message box)")
        self.act_highlight = QAction("Highlight tokens", self, checkable=True)
        self.act_rejected = QAction("Show rejected drafts", self, checkable=True)
        self.act_rejected.setToolTip("Show what the drafter proposed, struck through, before each correction")
        self.chat_pane = ChatPane()  # the chat view, its find bar (Ctrl+F) and token details panel
        self.addAction(self.act_new)  # Ctrl+N; the button sits above the chat list
        for a in (self.act_models, self.act_compare):
            tb.addAction(a)
        tb.addSeparator()
        for a in (self.act_export_md, self.act_export_trace, self.act_import):
            tb.addAction(a)
        tb.addSeparator()
        for a in (self.act_highlight, self.act_rejected, self.chat_pane.act_details):
            tb.addAction(a)
        tb.addSeparator()
        tb.addWidget(QLabel(" Theme "))
        self.theme = QComboBox()
        for t in Theme:
            self.theme.addItem(t.value.capitalize(), t)
        tb.addWidget(self.theme)

        self.conversations = ConversationList()
        self.bar = ModelBar()
        self.notice = NoticeBar()
        self._previous_excepthook = slot_errors.install(self.notice.show_notice)
        self.chat = self.chat_pane.view
        self.chat.setObjectName("chat_view")
        self.legend = Legend()
        self.input = InputBox()
        self.attachments = AttachmentBar()
        self.attach_button = QToolButton()
        self.attach_button.setDefaultAction(self.act_attach)
        self.attach_button.setObjectName("attach")
        self.addAction(self.act_attach)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("send")
        self.send_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setObjectName("stop")
        self.stop_button.setEnabled(False)
        self.stats = StatsPanel()
        self.first_run = FirstRunPanel(self.controller)
        self.first_run.hide()

        centre = QWidget()
        cl = QVBoxLayout(centre)
        cl.setContentsMargins(6, 0, 6, 0)
        cl.addWidget(self.bar)
        cl.addWidget(self.notice)
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

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.conversations)
        split.addWidget(centre)
        split.addWidget(self.stats)
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

    def sizeHint(self) -> QSize:
        return QSize(1280, 800)

    def _name_controls(self) -> None:
        """What a screen reader says for each control (toolbar buttons, pickers, panes)."""
        tb = self.findChild(QToolBar, "main_toolbar")
        for act in tb.actions():
            if not act.isSeparator() and (button := tb.widgetForAction(act)) is not None and act.text():
                button.setAccessibleName(act.text().rstrip("…"))
        if (more := tb.findChild(QToolButton, "qt_toolbar_ext_button")) is not None:
            more.setAccessibleName("More toolbar actions")  # shown when the window is too narrow
        cv = self.conversations
        for w, name in ((self.theme, "Theme"), (cv, "Chats"), (cv.list, "Chat list"), (cv.search, "Search chats"),
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
        if s.window_splitter:
            self.split.restoreState(QByteArray.fromBase64(s.window_splitter.encode("ascii")))

    def _connect(self) -> None:
        c = self.controller
        c.sig_notice.connect(self.notice.show_notice)
        c.sig_conversations.connect(self.conversations.set_conversations)
        c.sig_messages.connect(self.chat.show_messages)
        c.sig_message_added.connect(self.chat.append_message)
        c.sig_tokens.connect(self.chat.append_tokens)
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

        self.conversations.sig_new.connect(c.new_conversation)
        self.conversations.sig_selected.connect(c.open_conversation)
        self.conversations.sig_rename.connect(c.rename_conversation)
        self.conversations.sig_delete.connect(self._confirm_delete)
        self.conversations.sig_search.connect(c.set_search)
        self.bar.sig_target_chosen.connect(lambda p: c.update_settings(target=p))
        self.bar.sig_drafter_chosen.connect(lambda d: c.update_settings(drafter=d, drafter_chosen=True))
        self.bar.sig_draft_length.connect(lambda k: c.update_settings(draft_max=k))
        self.bar.sampling.sig_changed.connect(lambda ch: c.update_settings(**ch.changes()))
        self.bar.sampling.sig_forget.connect(c.forget_past_chats)
        c.sig_past_chats.connect(self.bar.sampling.show_past_chats)
        self.input.sig_submit.connect(self._send)
        self.input.sig_resend.connect(self._resend)
        self.input.sig_editing.connect(self._editing)
        self.input.sig_files.connect(self.attachments.add_paths)
        self.input.sig_refused.connect(self._refused_file)
        self.attachments.sig_refused.connect(self._refused_file)
        self.attachments.sig_changed.connect(lambda: setattr(self.input, "files_attached", self.attachments.any))
        self.act_attach.triggered.connect(self.pick_files)
        self.act_import.triggered.connect(self.import_chat)
        self.chat.action_requested.connect(self._message_action)
        c.sig_messages.connect(self._path_changed)
        self.send_button.clicked.connect(lambda: self._send(self.input.toPlainText()))
        self.stop_button.clicked.connect(c.stop)
        self.stop_button.setToolTip("Stop the reply (Esc)")
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, activated=c.stop)
        self.notice.sig_action.connect(self._notice_action)
        self.first_run.sig_open_models.connect(self.open_models)
        self.act_new.triggered.connect(c.new_conversation)
        self.act_models.triggered.connect(self.open_models)
        self.act_compare.triggered.connect(self.open_compare)
        self.act_export_md.triggered.connect(self.export_markdown)
        self.act_export_trace.triggered.connect(self.export_trace)
        self.act_highlight.toggled.connect(lambda on: c.update_settings(highlight=on))
        self.act_rejected.toggled.connect(lambda on: c.update_settings(show_rejected=on))
        self.chat.copied.connect(lambda what: self.statusBar().showMessage(f"Copied the {what}.", 2500))
        self.chat.link_refused.connect(lambda url: self.statusBar().showMessage(
            f"Not opened: {url[:80]} (links in messages open only as http, https or mailto).", 5000))
        self.theme.activated.connect(lambda _i: c.update_settings(theme=self.theme.currentData()))
        QGuiApplication.styleHints().colorSchemeChanged.connect(self._system_scheme_changed)
        for sig in (c.sig_messages, c.sig_reply_finished, c.sig_loaded):
            sig.connect(self._show_context)

    # -- reacting ----------------------------------------------------------------------------
    def _apply_settings(self, s) -> None:
        app = QApplication.instance()
        if app is not None and getattr(self, "_theme", None) != s.theme:
            self._theme = s.theme
            apply_theme(app, s.theme)
        for act, on in ((self.act_highlight, s.highlight), (self.act_rejected, s.show_rejected)):
            act.blockSignals(True)
            act.setChecked(on)
            act.blockSignals(False)
        self.theme.setCurrentIndex(self.theme.findData(s.theme))
        colours = colours_for(s.theme)
        self.chat.set_options(ViewOptions(colours, s.highlight, s.show_rejected))
        self.legend.show_legend(colours, s.highlight, s.show_rejected)
        self.context_meter.set_colours(colours)
        self.bar.set_settings(s)

    def _system_scheme_changed(self, _scheme=None) -> None:
        """The OS switched between light and dark: the System theme follows at once."""
        if self.controller.settings.theme == Theme.SYSTEM:
            self._theme = None
            self._apply_settings(self.controller.settings)

    def _show_context(self, *_args) -> None:
        loaded = self.controller.loaded
        self.context_meter.show_usage(self.controller.messages, loaded.n_ctx if loaded else None)

    def _send(self, text: str) -> None:
        if self.input.editing is not None:
            self._resend(self.input.editing, text)
            return
        files = self._attached()
        if files is not None and self.controller.send(text, files):
            self.input.clear()
            self.attachments.clear()

    def _attached(self):
        """The attached files as they are now, or None (and a notice) when one cannot be sent."""
        try:
            return self.attachments.attachments()
        except AttachmentError as exc:
            self.notice.show_notice(Notice(f"{exc}. Nothing was sent.", Level.WARNING))
            return None

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
        elif action in (MessageAction.PREVIOUS, MessageAction.NEXT):
            c.show_alternative(message_id, -1 if action == MessageAction.PREVIOUS else 1)

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
        self.act_compare.setEnabled(not busy)

    def _load_state(self, text: str, fraction: float) -> None:
        self.status_label.setText(text)
        if fraction < 0:
            self.progress.hide()
        else:
            self.progress.show()
            self.progress.setValue(int(fraction * 100))

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
            self.controller.new_conversation()

    def _first_run(self) -> None:
        """No model is installed: the ways to get one take the chat's place until one is."""
        self.chat_pane.hide()
        self.legend.hide()
        self.first_run.show()
        self.controller.update_settings(first_run_done=True)

    def _models_listed(self, models, target: str) -> None:
        if (models or target) and self.first_run.isVisible():
            self.first_run.hide()
            self.chat_pane.show()
            self.legend.show()

    # -- dialogs ------------------------------------------------------------------------------
    def open_models(self) -> None:
        from app.models.models_dialog import ModelsDialog

        dlg = ModelsDialog(self.controller, self)
        dlg.exec()

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
        if path:
            self.controller.import_chat(Path(path))

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
