"""The files attached to the message being written: one chip each (name and size, ✕ removes it).

A file is read when it is added (on a pool thread: a long PDF takes a while), so a refusal (an image, a
binary file, a protected PDF...) comes at once and the chip never appears. It is read again when the
message is sent if it changed since, so the model reads the file as it is then; one moved or deleted
meanwhile stops the send with a notice, and nothing typed or attached is lost. Files attached to an
earlier question come back (without a path: their text is what was sent) when it is edited, or when a
send fails before its reply starts.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (QFileDialog, QFrame, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QStyle, QToolButton,
                               QWidget)

from engine.attachments import Attachment, human_size, read_attachment
from engine.errors import AttachmentError

from app.chat.flow_layout import FlowLayout
from app.core.background import run_in_background

NAME_CHARS = 32
"""A chip shows this much of a long name (all of it in its tooltip)."""
ROWS_SHOWN = 3
"""Rows of chips shown at most; more scroll (twenty files once pushed the window to 3,589 px in one row)."""
FILE_FILTER = ("All files (*);;Text and code (*.txt *.md *.py *.js *.ts *.json *.csv *.html *.css *.c *.h *.cpp *.rs "
               "*.go *.java *.toml *.yaml *.yml);;PDF (*.pdf)")


@dataclass(frozen=True, slots=True)
class PickedFile:
    """A file as it was read, and where it was read from."""

    attachment: Attachment
    """Its text, name and size."""
    path: Path | None = None
    """Where it came from (None: attached to an earlier question, its text is all there is)."""
    mtime_ns: int = 0
    """Its modification time when read (a changed file is read again when the message is sent)."""


def pick(path: Path) -> PickedFile:
    """Read the file at `path` (AttachmentError says why it cannot be attached)."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        mtime = 0  # read_attachment says why
    return PickedFile(read_attachment(path), path, mtime)


def as_sent(p: PickedFile) -> PickedFile:
    """The file as it is now: read again if it changed since it was picked; AttachmentError if it is gone."""
    if p.path is None:
        return p
    try:
        st = os.stat(p.path)
    except FileNotFoundError:
        raise AttachmentError(f"{p.attachment.name} was moved or deleted after it was attached. Attach it again, or "
                              "remove it (✕) to send without it") from None
    except OSError as exc:
        raise AttachmentError(f"{p.attachment.name} cannot be read any more: {exc.strerror or exc}") from None
    if st.st_mtime_ns == p.mtime_ns and st.st_size == p.attachment.size:
        return p
    return pick(p.path)


class _Batch:
    """The files of one drop, paste or pick: how many are still being read, and why each refused one was."""

    def __init__(self, files: int) -> None:
        self.files, self.waiting = files, files
        self.refused: list[str] = []

    def said(self) -> str:
        if len(self.refused) == 1:
            return self.refused[0]
        return (f"{len(self.refused)} of the {self.files} files were not attached:\n"
                + "\n".join(f"• {why}" for why in self.refused))


class AttachmentChip(QFrame):
    """One file: a file icon, 'name · 12.3 KB', and a ✕ that removes it."""

    sig_remove = Signal(object)
    """✕ was clicked (the chip)."""

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attachment_chip")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.file: PickedFile | None = None
        """None while the file is being read."""
        self.name = name
        short = name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"
        icon = QLabel()
        size = self.fontMetrics().height()
        icon.setPixmap(self.style().standardIcon(QStyle.StandardPixmap.SP_FileIcon).pixmap(size, size))
        self.label = QLabel(f"{short} · reading…")
        self.remove = QToolButton()
        self.remove.setText("✕")
        self.remove.setAutoRaise(True)
        self.remove.setAccessibleName(f"Remove {name}")
        self.remove.setToolTip(f"Remove {name} from this message")
        self.remove.clicked.connect(lambda: self.sig_remove.emit(self))
        lay = QHBoxLayout(self)
        lay.setContentsMargins(6, 1, 1, 1)
        lay.setSpacing(2)
        lay.addWidget(icon)
        lay.addWidget(self.label)
        lay.addWidget(self.remove)
        self._short = short

    def set_file(self, f: PickedFile) -> None:
        self.file = f
        a = f.attachment
        lines = a.text.count("\n") + 1
        self.label.setText(f"{self._short} · {human_size(a.size)}")
        where = f"\n{f.path}" if f.path is not None else ""
        self.setToolTip(f"{a.name}{where}\n{human_size(a.size)}, {lines:,} lines of text; the model reads it before "
                        "your message")
        self.setAccessibleName(f"Attached file {a.name}, {human_size(a.size)}")


class AttachmentBar(QWidget):
    """The chips of the message being written (hidden when there are none), in rows that wrap; past
    ROWS_SHOWN rows they scroll."""

    sig_refused = Signal(str)
    """Files of one drop, paste or pick could not be attached: every one with why, in one text."""
    sig_changed = Signal()
    """A file was added, read or removed."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("attachments")
        self.setAccessibleName("Attached files")
        self.chips: list[AttachmentChip] = []
        self._holder = QWidget()
        self._flow = FlowLayout(self._holder)
        self._scroll = QScrollArea()
        self._scroll.setObjectName("attachments_scroll")
        self._scroll.setWidget(self._holder)
        self._scroll.setWidgetResizable(True)
        self._scroll.setFrameShape(QFrame.Shape.NoFrame)
        self._scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 2, 0, 2)
        lay.addWidget(self._scroll)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)  # its rows' height, no more
        self._held: list[PickedFile] | None = None  # the chips before an edit began
        self._fitting = QTimer(self)
        self._fitting.setSingleShot(True)
        self._fitting.timeout.connect(self._fit)  # once chips are laid out and the scroll bar has come or gone
        self.hide()

    def resizeEvent(self, e) -> None:
        super().resizeEvent(e)
        self._fit()
        self._fitting.start(0)

    def showEvent(self, e) -> None:
        super().showEvent(e)
        self._fitting.start(0)

    def _fit(self) -> None:
        """As tall as the rows of chips, up to ROWS_SHOWN of them (the rest scroll)."""
        width = self._scroll.viewport().width() or self.width()
        needed = self._flow.heightForWidth(max(width, 1))
        row = max((c.sizeHint().height() for c in self.chips), default=0)
        most = ROWS_SHOWN * row + (ROWS_SHOWN - 1) * self._flow.spacing()
        self._scroll.setFixedHeight(max(1, min(needed, most)))

    # -- what the person does ---------------------------------------------------------------------
    def add_paths(self, paths: Sequence[Path]) -> None:
        """Attach these files: a chip each at once, read on a pool thread; refusals remove their chips and are
        said together once every file of `paths` has been read."""
        batch = _Batch(len(paths))
        for path in paths:
            path = Path(path)
            chip = self._chip(path.name)
            run_in_background(lambda p=path: pick(p), lambda f, c=chip: self._read(c, f, batch),
                              lambda exc, c=chip: self._failed(c, exc, batch))

    def _read(self, chip: AttachmentChip, f: PickedFile, batch: _Batch) -> None:
        if chip in self.chips:  # not removed while it was read
            chip.set_file(f)
            self._fitting.start(0)  # its label changed width
            self.sig_changed.emit()
        self._settled(batch)

    def _failed(self, chip: AttachmentChip, exc: BaseException, batch: _Batch) -> None:
        if chip in self.chips:
            self._remove(chip)
            why = str(exc) if isinstance(exc, AttachmentError) else f"{chip.name} could not be read: {exc}"
            batch.refused.append(why + ".")  # it starts with the file's name, as it is spelt
        self._settled(batch)

    def _settled(self, batch: _Batch) -> None:
        batch.waiting -= 1
        if batch.waiting == 0 and batch.refused:
            self.sig_refused.emit(batch.said())

    def pick(self, parent: QWidget) -> None:
        """Attach the files chosen in the platform's file dialog."""
        paths, _ = QFileDialog.getOpenFileNames(parent, "Attach files", str(Path.home()), FILE_FILTER)
        if paths:
            self.add_paths([Path(p) for p in paths])

    # -- what the window asks -----------------------------------------------------------------------
    @property
    def any(self) -> bool:
        """Files are attached (read or being read)."""
        return bool(self.chips)

    @property
    def reading(self) -> list[str]:
        """Names of the files still being read."""
        return [c.name for c in self.chips if c.file is None]

    def files(self) -> list[PickedFile]:
        return [c.file for c in self.chips if c.file is not None]

    def attachments(self) -> tuple[Attachment, ...]:
        """The files to send, each as it is now (AttachmentError: one is still being read, or was moved,
        deleted or spoiled meanwhile)."""
        if self.reading:
            raise AttachmentError(f"{self.reading[0]} is still being read: send again in a moment")
        fresh = [as_sent(f) for f in self.files()]
        for chip, f in zip([c for c in self.chips if c.file is not None], fresh):
            if f is not chip.file:
                chip.set_file(f)
        return tuple(f.attachment for f in fresh)

    def set_attachments(self, attachments: Sequence[Attachment]) -> None:
        """Show these files (an earlier question's: they have no path) in place of the chips."""
        self.set_files([PickedFile(a) for a in attachments])

    def set_files(self, files: Sequence[PickedFile]) -> None:
        for chip in list(self.chips):
            self._remove(chip, quiet=True)
        for f in files:
            self._chip(f.attachment.name).set_file(f)
        self.sig_changed.emit()

    def clear(self) -> None:
        self.set_files([])

    def begin_edit(self, attachments: Sequence[Attachment] | None) -> None:
        """An earlier message is being edited: show its files (None: a reply, which has none); what was
        attached before comes back with `end_edit`."""
        if self._held is None:
            self._held = self.files()
        self.set_attachments(attachments or ())

    def end_edit(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self.set_files(held)

    # -- chips ------------------------------------------------------------------------------------------
    def _chip(self, name: str) -> AttachmentChip:
        chip = AttachmentChip(name, self._holder)
        chip.sig_remove.connect(self._remove)
        self.chips.append(chip)
        self._flow.addWidget(chip)
        self.show()
        self._fit()
        self._fitting.start(0)
        return chip

    def _remove(self, chip: AttachmentChip, quiet: bool = False) -> None:
        if chip not in self.chips:
            return
        self.chips.remove(chip)
        self._flow.removeWidget(chip)
        chip.hide()
        chip.deleteLater()
        self.setVisible(bool(self.chips))
        self._fit()
        self._fitting.start(0)
        if not quiet:
            self.sig_changed.emit()
