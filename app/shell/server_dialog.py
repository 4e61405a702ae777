"""Models ▸ Local server: serve the loaded pair to other programs, and watch their requests as they run.

Off by default. Turning it on serves the window's pair on 127.0.0.1 (the port and an optional API key are
kept in the settings); the address to give a client is shown, with a button that copies it. Each request
the server answers is listed, newest first, and the one selected (the newest, unless another is chosen) is
drawn as the chat draws replies: the same token highlighting, legend and statistics panel.
"""
from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox, QDialog, QDialogButtonBox, QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem, QPushButton,
    QSpinBox, QSplitter, QVBoxLayout, QWidget,
)

from app.chat.chat_view import ChatView, ViewOptions
from app.chat.legend import Legend
from app.control.controller import ChatController
from app.control.local_server import ServedReply, ServerState
from app.core.theme import colours_for
from app.core.window_fit import resize_within
from app.stats.stats_panel import StatsPanel


class ServerDialog(QDialog):
    """The switch, the address, and the served requests live (not modal: the chat stays usable)."""

    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Local server")
        self.controller = controller
        self.server = controller.local_server
        s = controller.settings
        lay = QVBoxLayout(self)
        intro = QLabel("Other programs on this computer can use the loaded pair through an OpenAI-compatible API "
                       "(chat and completions, streamed or whole). Their requests run one at a time, in turn with "
                       "this window's own replies, and show here as they are written.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        row = QHBoxLayout()
        self.switch = QCheckBox("&Serve the loaded pair")
        self.switch.setAccessibleName("Local server on")
        self.port = QSpinBox()
        self.port.setRange(1, 65535)
        self.port.setValue(s.server_port)
        self.port.setAccessibleName("Port")
        self.key = QLineEdit(s.server_key)
        self.key.setPlaceholderText("none")
        self.key.setAccessibleName("API key")
        self.key.setToolTip("Clients must send 'Authorization: Bearer KEY' (empty: no key is asked for)")
        port_label, key_label = QLabel("&Port"), QLabel("API &key")
        port_label.setBuddy(self.port)
        key_label.setBuddy(self.key)
        for w in (self.switch, port_label, self.port, key_label, self.key):
            row.addWidget(w)
        row.addStretch(1)
        lay.addLayout(row)
        addr = QHBoxLayout()
        self.address = QLineEdit()
        self.address.setReadOnly(True)
        self.address.setAccessibleName("Server address")
        self.copy = QPushButton("&Copy address")
        self.copy.clicked.connect(self._copy)
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setObjectName("server_status")
        addr.addWidget(QLabel("Address"))
        addr.addWidget(self.address, 1)
        addr.addWidget(self.copy)
        lay.addLayout(addr)
        lay.addWidget(self.status)

        split = QSplitter(Qt.Orientation.Horizontal)
        self.list = QListWidget()
        self.list.setAccessibleName("Served requests")
        self.list.setWordWrap(True)  # a question and its state on two lines, never a sideways scroll
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.currentRowChanged.connect(self._show_row)
        middle = QWidget()
        mid = QVBoxLayout(middle)
        mid.setContentsMargins(0, 0, 0, 0)
        self.view = ChatView()
        self.view.setAccessibleName("Served request")
        options = ViewOptions(colours_for(s.theme), s.highlight, s.show_rejected and s.highlight, actions=False)
        self.view.set_options(options)
        self.legend = Legend()
        self.legend.show_legend(options.colours, options.highlight, options.show_rejected)
        mid.addWidget(self.view, 1)
        mid.addWidget(self.legend)
        self.stats = StatsPanel()
        split.addWidget(self.list)
        split.addWidget(middle)
        split.addWidget(self.stats)
        split.setStretchFactor(1, 1)
        split.setSizes([230, 540, 300])
        lay.addWidget(split, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        resize_within(self, 1100, 640)

        self.shown: ServedReply | None = None
        self._follow = True  # show each new request as it comes, until the person picks an older one
        self._items: dict[int, QListWidgetItem] = {}
        for r in reversed(self.server.requests):
            self._add(r)
        self.server.sig_state.connect(self._state)
        self.server.sig_request.connect(self._arrived)
        self._state(self.server.state)
        self.switch.toggled.connect(self._toggle)

    # -- the switch ---------------------------------------------------------------------------------------
    def _toggle(self, on: bool) -> None:
        if on and not self.server.running:
            self.server.start(self.port.value(), self.key.text().strip())
        elif not on and self.server.running:
            self.server.stop()

    def _state(self, st: ServerState) -> None:
        self.switch.blockSignals(True)
        self.switch.setChecked(st.running)
        self.switch.blockSignals(False)
        for w in (self.port, self.key):
            w.setEnabled(not st.running)
        self.address.setText(st.url)
        self.copy.setEnabled(bool(st.url))
        model = self.server.served()
        if st.running:
            pair = f"{model.id} (drafter: {model.drafter})" if model else "the pair once one is loaded"
            key = "; clients must send the API key" if st.keyed else "; no key is asked for"
            self.status.setText(f"Serving {html.escape(pair)} on this computer only{key}. "
                                "Give clients the address above as their base URL.")
        elif st.error:
            self.status.setText(f"The server could not start: {html.escape(st.error)}")
        else:
            self.status.setText("Off: nothing listens.")

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.address.text())
        self.status.setText(self.status.text().split(" (copied)")[0] + " (copied)")

    # -- the requests -----------------------------------------------------------------------------------------
    def _add(self, r: ServedReply) -> None:
        item = QListWidgetItem(self._label(r))
        self.list.insertItem(0, item)
        self._items[r.job.id] = item
        # Bound methods, not lambdas: the connections end with this dialog, while the requests live on.
        r.updated.connect(self._updated)
        r.reply.changed.connect(self._changed)
        r.reply.stats_changed.connect(self._stats_changed)
        r.reply.finished.connect(self._reply_finished)

    def _arrived(self, r: ServedReply) -> None:
        self._add(r)
        if self._follow:
            self.list.setCurrentRow(0)

    def _label(self, r: ServedReply) -> str:
        asked = " ".join(r.question.content.split())
        asked = asked if len(asked) <= 28 else asked[:27] + "…"
        return f"#{r.number} {asked}\n   {r.status}"

    def _title(self, r: ServedReply) -> str:
        return f"Served request #{r.number}" + ("" if r.finished else " (streaming)")

    def _updated(self, r: ServedReply) -> None:
        item = self._items.get(r.job.id)
        if item is not None:
            item.setText(self._label(r))

    def _show_row(self, row: int) -> None:
        if row < 0:
            return
        self._follow = row == 0
        r = next((x for x in self.server.requests if self._items.get(x.job.id) is self.list.item(row)), None)
        if r is None:
            return
        self.shown = r
        self.view.show_messages([r.question, r.message])
        self.stats.show_snapshot(r.reply.snapshot() if r.running or r.finished else None, self._title(r))

    def _of(self, reply) -> ServedReply | None:
        return next((r for r in self.server.requests if r.reply is reply), None)

    def _changed(self, message_id: int, start: int) -> None:
        r = self.shown
        if r is not None and r.message.id == message_id:
            self.view.reply_changed(message_id, start)
        if (sender := self._of(self.sender())) is not None:
            self._updated(sender)

    def _stats_changed(self, snapshot) -> None:
        r = self.shown
        if r is not None and self.sender() is r.reply:
            self.stats.show_snapshot(snapshot, self._title(r))

    def _reply_finished(self, reply) -> None:
        r = self._of(reply)
        if r is None:
            return
        if r is self.shown and reply.done is not None:
            self.view.finish_reply(r.message)
            self.stats.show_snapshot(reply.snapshot(), self._title(r))
        self._updated(r)
