"""A progress bar, a line of detail and a Cancel button that follow one Task."""
from __future__ import annotations

from PySide6.QtCore import Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.core.errors import explain
from app.control.tasks import Progress, Task, TaskState


class TaskRow(QWidget):
    """Hidden until it follows a task; stays to show how the task ended."""

    def __init__(self, parent: QWidget | None = None, cancellable: bool = True) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setVisible(cancellable)
        self.cancel_button.setAccessibleName("Cancel")
        self.bar.setAccessibleName("Progress")
        row.addWidget(self.bar, 1)
        row.addWidget(self.cancel_button)
        lay.addLayout(row)
        self.label = QLabel()
        self.label.setWordWrap(True)
        lay.addWidget(self.label)
        self.task: Task | None = None
        self.cancellable = cancellable
        self.cancel_button.clicked.connect(self._cancel)
        self.hide()

    def follow(self, task: Task) -> None:
        if self.task is not None:
            try:
                self.task.sig_progress.disconnect(self._progress)
                self.task.sig_finished.disconnect(self._finished)
            except (RuntimeError, TypeError):
                pass
        self.task = task
        self.show()
        self.cancel_button.setEnabled(True)
        self.label.setText(task.title + "…")
        self.bar.setRange(0, 0)  # busy until the first report
        task.sig_progress.connect(self._progress)
        task.sig_finished.connect(self._finished)
        if task.last is not None:
            self._progress(task.last)
        if task.state != TaskState.RUNNING:
            self._finished(task)

    @Slot(object)
    def _progress(self, p: Progress) -> None:
        if p.fraction is None:
            self.bar.setRange(0, 0)
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(p.fraction * 1000))
        self.label.setText(f"{self.task.title if self.task else ''}: {p.what}" + (f" — {p.detail}" if p.detail else ""))

    @Slot(object)
    def _finished(self, task: Task) -> None:
        self.cancel_button.setEnabled(False)
        self.bar.setRange(0, 1000)
        if task.state == TaskState.DONE:
            self.bar.setValue(1000)
            self.label.setText(f"{task.title}: done.")
        elif task.state == TaskState.CANCELLED:
            kept = " What was downloaded is kept; starting again resumes it." if task.key.startswith("download:") else ""
            self.label.setText(f"{task.title}: cancelled.{kept}")
        else:
            self.label.setText(f"{task.title} failed: {explain(task.error).text if task.error else 'unknown error'}")

    def _cancel(self) -> None:
        if self.task is not None:
            self.task.cancel.set()
            self.cancel_button.setEnabled(False)
            self.label.setText(f"{self.task.title}: cancelling…")
