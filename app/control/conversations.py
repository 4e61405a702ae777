"""Conversations and their messages: the list, the open one, and its shown path of alternatives.

A conversation is a tree in the store (see app.history.store); the window shows one path through
it, `messages`, which is also the history the engine is given. Choosing another alternative,
deleting a message or adding a branch re-reads only the path's shape and loads the messages not
already in memory, so stepping through alternatives of a long chat does not re-read its tokens.

It knows nothing of the engine: the reply being written is reached through `live`, which the
controller wires to the replies. That reply (a StreamingReply) is the single owner of its Message:
a path read while it streams takes that Message as one already in memory, rather than reading a
second copy of it from the store.
"""
from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.core.errors import Level, Notice
from app.history.chat_import import ChatImportError, ImportedChat, read_chat
from app.history.records import Conversation, Message, Role
from app.control.streaming_reply import DONE_TITLE, LIVE_TITLE, StreamingReply
from app.history.reply_stats import ReplyStats
from app.history.store import ChatStore, StoreError

TITLE_CHARS = 48


FORK_MARK = "Fork: "


def fork_title(title: str) -> str:
    """A fork's title: the original's, marked in front, where a narrow chat list still shows it (a fork of a
    fork is not marked twice)."""
    return title if title.startswith(FORK_MARK) else FORK_MARK + title


def title_of(text: str) -> str:
    """A chat's default title: the first words of its first message."""
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class Conversations(QObject):
    """The store's conversations as the window sees them (GUI thread)."""

    sig_notice = Signal(object)
    """Show a Notice above the chat."""
    sig_conversations = Signal(object, object)
    """The conversation list changed (list[Conversation], id of the open one or None)."""
    sig_messages = Signal(object)
    """Show these messages (list[Message], the shown path): a chat was opened or its path changed."""
    sig_message_added = Signal(object)
    """Append this Message to the open conversation."""
    sig_stats = Signal(object, str)
    """Show these numbers (StatsSnapshot or None) under this title."""

    def __init__(self, store: ChatStore, live: Callable[[], StreamingReply | None],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.live = live
        """The chat reply being written, if any."""
        self.current_id: int | None = None
        self.messages: list[Message] = []
        """The open conversation's shown path, first message to last."""
        self.search = ""

    def failed(self, exc: StoreError) -> None:
        """A store call failed: say so in one sentence."""
        text = str(exc)
        self.sig_notice.emit(Notice(text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")))

    # -- the list -------------------------------------------------------------------------------
    def listing(self) -> list[Conversation]:
        try:
            return self.store.conversations(self.search)
        except StoreError as exc:
            self.failed(exc)
            return []

    def conversation(self, conv_id: int) -> Conversation | None:
        try:
            return self.store.conversation(conv_id)
        except StoreError as exc:
            self.failed(exc)
            return None

    def current(self) -> Conversation | None:
        return self.conversation(self.current_id) if self.current_id is not None else None

    def emit_list(self) -> None:
        self.sig_conversations.emit(self.listing(), self.current_id)

    def set_search(self, text: str) -> None:
        self.search = text
        self.emit_list()

    def new(self) -> None:
        try:
            conv = self.store.new_conversation()
        except StoreError as exc:
            self.failed(exc)
            return
        self.current_id = conv.id
        self.messages = []
        self.search = ""
        self.emit_list()
        self.show_nothing()

    def open(self, conv_id: int) -> None:
        if conv_id == self.current_id and self.messages:
            return
        messages = self._read_path(conv_id, {})
        if messages is None:
            return
        self.current_id = conv_id
        # A long chat is tens of thousands of token and round objects that live as long as it is
        # open; left to the cyclic collector, each full pass walks them all (85-220 ms stalls of the
        # event loop measured on a 50k-token chat). None of them is part of a cycle, so moving what
        # exists now out of its sight loses nothing: plain reference counting still frees them.
        gc.freeze()
        self._show(messages)

    def rename(self, conv_id: int, title: str) -> None:
        try:
            self.store.rename(conv_id, title)
        except StoreError as exc:
            self.failed(exc)
        self.emit_list()

    def delete(self, conv_id: int) -> None:
        try:
            self.store.delete(conv_id)
        except StoreError as exc:
            self.failed(exc)
            return
        if conv_id == self.current_id:
            self.current_id = None
            convs = self.listing()
            if convs:
                self.emit_list()
                self.open(convs[0].id)
                self.emit_list()
                return
            self.messages = []
            self.show_nothing()
        self.emit_list()

    def forget_if_empty(self, conv_id: int) -> None:
        """A chat left with no message (its first question was taken back: the reply could not start) is not
        kept: it would stay in the list under the question's title, across restarts. The window stays on an
        empty chat; the next send starts one."""
        try:
            if self.store.tree(conv_id):
                return
            self.store.delete(conv_id)
        except StoreError as exc:
            self.failed(exc)
            return
        if conv_id == self.current_id:
            self.current_id = None
            self.messages = []
            self.show_nothing()
        self.emit_list()

    def show_nothing(self) -> None:
        self.sig_messages.emit([])
        self.sig_stats.emit(None, DONE_TITLE)

    # -- the open conversation's path ---------------------------------------------------------------
    def ensure_open(self) -> int:
        """The open conversation's id, starting one when none is open (raises StoreError)."""
        if self.current_id is None:
            self.current_id = self.store.new_conversation().id
            self.messages = []
        return self.current_id

    def appended(self, added: Sequence[Message]) -> None:
        """Messages were written after the path's end (a new exchange): show them."""
        self.messages += list(added)
        for m in added:
            self.sig_message_added.emit(m)
        self.emit_list()

    def find(self, message_id: int) -> int | None:
        """Where `message_id` is on the shown path (None: not shown)."""
        return next((i for i, m in enumerate(self.messages) if m.id == message_id), None)

    def reload(self) -> bool:
        """The path changed in the store: show it again, reading only messages not yet in memory."""
        if self.current_id is None:
            return False
        messages = self._read_path(self.current_id, {m.id: m for m in self.messages})
        if messages is None:
            return False
        self._show(messages)
        return True

    def _read_path(self, conv_id: int, known: dict[int, Message]) -> list[Message] | None:
        """A chat's shown path, reading only the messages not in `known` (nor the reply being written, whose
        Message is its own); None when the store fails."""
        live = self.live()
        if live is not None and live.conversation_id == conv_id:
            known = {**known, live.message.id: live.message}
        try:
            path = self.store.shown_path(conv_id)
            loaded = self.store.load([s.id for s in path if s.id not in known])
        except StoreError as exc:
            self.failed(exc)
            return None
        messages = []
        for step in path:
            m = known.get(step.id) or loaded.get(step.id)
            if m is not None:  # None: a role this version does not know (a newer Draftlight's)
                m.parent_id, m.variant, m.variants = step.parent_id, step.variant, step.variants
                messages.append(m)
        return messages

    def show_alternative(self, message_id: int, step: int) -> bool:
        """Show the alternative `step` places after (or before) this message among its siblings."""
        if self.find(message_id) is None:
            return False  # only the shown path's messages have links; a stale id changes nothing
        try:
            siblings = self.store.siblings(message_id)
            i = siblings.index(message_id)
        except StoreError as exc:
            self.failed(exc)
            return False
        except ValueError:
            return False
        j = i + step
        if not 0 <= j < len(siblings):
            return False  # the view offers no step past either end
        try:
            self.store.choose(siblings[j])
        except StoreError as exc:
            self.failed(exc)
            return False
        return self.reload()

    def delete_message(self, message_id: int) -> bool:
        """Delete one message of the shown path; what followed it moves up (see ChatStore.delete_message)."""
        if self.find(message_id) is None:
            return False
        try:
            self.store.delete_message(message_id)
        except StoreError as exc:
            self.failed(exc)
            return False
        ok = self.reload()
        self.emit_list()
        return ok

    def fork(self, message_id: int) -> bool:
        """A new chat holding the shown path up to this message (copied whole), opened."""
        conv = self.current()
        if conv is None or self.find(message_id) is None:
            return False
        try:
            forked = self.store.fork(conv.id, message_id, fork_title(conv.title))
        except StoreError as exc:
            self.failed(exc)
            return False
        self._open_new(forked.id)
        self.sig_notice.emit(Notice(f"Forked into “{forked.title}”: the chat up to that message, to go on "
                                    "differently; the original is unchanged.", Level.INFO))
        return True

    def import_chat(self, path: Path) -> bool:
        """A chat exported as JSON Lines, as a new chat, opened; a file that is not one is said, nothing saved.
        Reads the file here (the window reads a big one off the GUI thread first, then calls `add_imported`)."""
        try:
            chat = read_chat(path)
        except ChatImportError as exc:
            self.import_refused(Path(path).name, exc)
            return False
        return self.add_imported(chat, Path(path).name)

    def import_refused(self, name: str, exc: BaseException) -> None:
        self.sig_notice.emit(Notice(f"Could not import {name}: {exc}. Nothing was imported.", Level.WARNING))

    def add_imported(self, chat: ImportedChat, name: str) -> bool:
        """Save a chat read from an export as a new chat and open it."""
        try:
            conv = self.store.import_conversation(chat.title, chat.messages)
        except StoreError as exc:
            self.failed(exc)
            return False
        self._open_new(conv.id)
        n = len(chat.unknown_provenance)
        if n:
            which = "reply's token record does" if n == 1 else "replies' token records do"
            self.sig_notice.emit(Notice(
                f"Imported {name}, but {n} {which} not spell the reply's text (the file was edited by hand?): "
                "the text is kept and shown plainly; which model wrote each token is unknown.", Level.WARNING))
        return True

    def tree(self) -> list[tuple[Message, int]]:
        """Every message of the open chat, every branch, with its shown stamp ([] when none is open)."""
        if self.current_id is None:
            return []
        try:
            return self.store.tree(self.current_id)
        except StoreError as exc:
            self.failed(exc)
            return []

    def _open_new(self, conv_id: int) -> None:
        self.search = ""
        self.current_id = None
        self.open(conv_id)
        self.emit_list()

    def _show(self, messages: list[Message]) -> None:
        live = self.live()
        self.messages = messages
        self.sig_messages.emit(messages)
        # The stats are a generated reply's: an edited one has none to show.
        last = next((m for m in reversed(messages) if m.role == Role.ASSISTANT and not m.edited), None)
        if last is None:
            self.sig_stats.emit(None, DONE_TITLE)
        elif live is not None and live.message is last:
            snap = live.snapshot()
            self.sig_stats.emit(snap, DONE_TITLE if snap.finished else LIVE_TITLE)
        else:
            auto = last.stats.auto if last.stats else True
            rounds = [last.rounds[k] for k in sorted(last.rounds)]
            self.sig_stats.emit(ReplyStats.of_rounds(rounds, last.stats, auto).snapshot(), "Last reply")
