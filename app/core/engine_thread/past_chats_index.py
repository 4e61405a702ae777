"""Drafting from past chats (opt-in), on the engine thread: which index is open, what goes in, when it is saved.

Off by default. When on, each finished reply and the conversation before it are counted into a
HistoryIndex (token n-gram counts, engine.drafting.history_index) in the data folder, one file per
vocabulary, capped in size; prompt lookup then also drafts from it where the conversation itself
has nothing to copy. Nothing here may fail a reply or a load: every error becomes a note for the
person. Not thread-safe: the EngineWorker calls it from the engine thread only (and at release,
once that thread has ended).
"""
from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.drafting.history_index import HistoryIndex, default_folder
from engine.decoding.session import GenerationSettings, Session

SAVE_STEP_BYTES = 8 * 2**20
"""A save writes the whole index (about 0.1 s per 8 MB): it is done every 1 + size / SAVE_STEP_BYTES
replies, so that saving costs a reply about 0.1 s at most on average, and always at close."""


@dataclass(frozen=True, slots=True)
class PastChatsChoice:
    """What the person chose (the settings history_drafts and history_cap_mb)."""

    enabled: bool = False
    cap_mb: int = 64


@dataclass(frozen=True, slots=True)
class PastChatsStatus:
    """What the index holds and does now, for the window."""

    enabled: bool
    """The person turned it on."""
    summary: str
    """What is stored, in words."""
    folder: Path
    """Where the index files are."""
    cap_mb: int
    """Most megabytes it may hold."""
    open: bool
    """An index is open for the loaded target (replies are counted)."""
    drafting: bool
    """It is open and the loaded drafter (prompt lookup) asks it."""
    notes: tuple[str, ...] = ()
    """To tell the person once: a damaged or other-vocabulary file set aside, a save that failed."""


class PastChatsIndex:
    """The open index (for the loaded target's vocabulary) and its file."""

    def __init__(self, folder: Callable[[], Path] = default_folder) -> None:
        self._folder = folder
        self.choice = PastChatsChoice()
        self.index: HistoryIndex | None = None
        self._unsaved = 0  # replies added since the last save
        self._notes: list[str] = []

    @property
    def folder(self) -> Path:
        return self._folder()

    # -- the person's choices ------------------------------------------------------------------
    def configure(self, choice: PastChatsChoice, session: Session | None) -> None:
        """On, off, or another cap; takes effect without reloading anything."""
        old, self.choice = self.choice, choice
        if not choice.enabled or choice.cap_mb != old.cap_mb:
            self.detach(session)  # saved first; a new cap is applied as the file is opened again
        if choice.enabled and session is not None:
            self.attach(session)

    def forget(self, session: Session | None) -> None:
        """Delete every index file (all vocabularies, files set aside too); when on, start an empty one."""
        if session is not None and self.index is not None:
            session.use_history(None)
        self.index, self._unsaved = None, 0
        folder = self.folder
        try:
            if folder.exists():
                shutil.rmtree(folder)
        except OSError as exc:
            self._notes.append(f"could not delete the index of past chats in {folder} "
                               f"({exc.strerror or exc}); delete that folder by hand")
        if self.choice.enabled and session is not None:
            self.attach(session)

    # -- the model's lifetime ---------------------------------------------------------------------
    def attach(self, session: Session) -> None:
        """After a load: open the index for this target's vocabulary and let prompt lookup use it."""
        if not self.choice.enabled or (self.index is not None and session.history is self.index):
            return
        self.detach(None)
        try:
            index = HistoryIndex.open_for(self.folder, session.target, cap_bytes=int(self.choice.cap_mb * 2**20))
            session.use_history(index)
        except Exception as exc:  # noqa: BLE001 - drafting goes on without past chats
            self._notes.append(f"could not open the index of past chats: {exc}")
            return
        self._notes.extend(index.notes)
        self.index = index
        if index.evicted:  # saved under a higher cap: the file shrinks now, not at the next reply
            self._write(index)

    def detach(self, session: Session | None) -> None:
        """Save what is unsaved and close the index (`session`: stop drafting from it)."""
        if session is not None and self.index is not None and session.history is self.index:
            session.use_history(None)
        self.save()
        self.index = None

    # -- replies ------------------------------------------------------------------------------------
    def add(self, session: Session, messages: Sequence[dict], settings: GenerationSettings, reply: Sequence[int],
            conversation: str | None) -> None:
        """Count a finished reply with the conversation before it, as the target read it."""
        index = self.index
        if index is None or conversation is None or not reply or session.history is not index:
            return
        try:
            prompt = session.render(messages, reserve=settings.max_tokens).tokens  # as Session.chat rendered it
            index.add(prompt + list(reply), conversation=conversation)
        except Exception as exc:  # noqa: BLE001 - the reply stands; only its counting failed
            self._notes.append(f"this reply was not added to the index of past chats: {exc}")
            return
        self._unsaved += 1
        if self._unsaved >= 1 + index.nbytes // SAVE_STEP_BYTES:
            self.save()

    def save(self) -> None:
        if self.index is not None and self.index.dirty:
            self._write(self.index)

    def _write(self, index: HistoryIndex) -> None:
        try:
            index.save()
            self._unsaved = 0
        except Exception as exc:  # noqa: BLE001 - EngineError says where and why
            self._notes.append(str(exc))

    def close(self) -> None:
        """The models are being freed: save, and let go."""
        self.save()
        self.index = None

    # -- what to show ------------------------------------------------------------------------------------
    def status(self, session: Session | None) -> PastChatsStatus:
        """The state now, with the notes gathered since the last call."""
        notes, self._notes = tuple(self._notes), []
        index, choice = self.index, self.choice
        drafting = (index is not None and session is not None and session.history is index
                    and session.spec.lookup and session.drafter is not None)
        if index is not None:
            summary = (f"{index.entries:,} n-grams from {_count(index.serial, 'reply', 'replies')} in "
                       f"{_count(index.conversations, 'chat', 'chats')}, {_size(index.nbytes)} of {choice.cap_mb} MB")
        else:
            kept = _bytes_in(self.folder)
            if choice.enabled:
                summary = "On: the index opens once a model is loaded."
            elif kept:
                summary = f"Off: {_size(kept)} kept from before (Forget deletes it)."
            else:
                summary = "Off: nothing is stored."
        return PastChatsStatus(choice.enabled, summary, self.folder, choice.cap_mb, index is not None, drafting, notes)


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**10:.0f} KB" if nbytes < 2**20 // 10 else f"{nbytes / 2**20:.1f} MB"


def _bytes_in(folder: Path) -> int:
    try:
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    except OSError:
        return 0
