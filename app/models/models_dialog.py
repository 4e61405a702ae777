"""Models…: what is installed and what pairs with what, the catalog, the default pair, hardware."""
from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.background import run_in_background
from app.core.window_fit import resize_within
from app.models.catalog_tab import CatalogTab
from app.control.controller import ChatController
from app.models.hardware_tab import HardwareTab
from app.control.model_scan import DrafterOption, ModelEntry, drafter_options, human_bytes, human_params, shown_name
from app.models.task_row import TaskRow


class InstalledTab(QWidget):
    """The model folder, importing a file, and for a chosen target which drafters fit and why not."""

    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        lay = QVBoxLayout(self)
        from app.control.model_scan import models_folder

        folder = QLabel(f"Model folder: <code>{html.escape(str(models_folder()))}</code>")
        folder.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(folder)
        self.table = QTableWidget(0, 5)
        self.table.setObjectName("installed_models")
        self.table.setHorizontalHeaderLabels(["Model", "Parameters", "Quantization", "Architecture", "Size"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        lay.addWidget(self.table, 2)
        self.table.setAccessibleName("Installed models")
        row = QHBoxLayout()
        self.import_button = QPushButton("Import a GGUF file…")
        self.import_button.setToolTip("Check the file, then copy it into the model folder")
        self.use_button = QPushButton("Use as target")
        self.import_button.setAccessibleName("Import a GGUF file")
        self.use_button.setAccessibleName("Use the selected model as target")
        row.addWidget(self.import_button)
        row.addWidget(self.use_button)
        row.addStretch(1)
        lay.addLayout(row)
        self.import_row = TaskRow()
        lay.addWidget(self.import_row)

        pairs = QHBoxLayout()
        pairs.addWidget(QLabel("<b>What pairs with</b>"))
        self.pair_target = QComboBox()
        self.pair_target.setObjectName("pair_target")
        self.pair_target.setAccessibleName("Target to find drafters for")
        pairs.addWidget(self.pair_target, 1)
        lay.addLayout(pairs)
        self.pairs = QTreeWidget()
        self.pairs.setObjectName("pair_options")
        self.pairs.setAccessibleName("Drafters and whether they pair")
        self.pairs.setHeaderLabels(["Drafter", "Pairs?", "Why / note"])
        self.pairs.setRootIsDecorated(False)
        self.pairs.setWordWrap(True)
        self.pairs.header().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        lay.addWidget(self.pairs, 2)
        self.pair_detail = QLabel("")
        self.pair_detail.setObjectName("pair_detail")
        self.pair_detail.setWordWrap(True)
        lay.addWidget(self.pair_detail)
        self.pairs.currentItemChanged.connect(self._pair_detail)

        self.import_button.clicked.connect(self._import)
        self.use_button.clicked.connect(self._use)
        self.pair_target.currentIndexChanged.connect(self._pairs_for_target)
        controller.sig_models.connect(self.show_models)
        self._generation = 0
        self.show_models(controller.models, controller.settings.target)
        for task in controller.tasks.values():
            if task.key.startswith("import:"):
                self.import_row.follow(task)

    def show_models(self, models: list[ModelEntry], current: str) -> None:
        self.models = list(models)
        self.table.setRowCount(len(models))
        for i, m in enumerate(models):
            for j, text in enumerate((shown_name(m.name), human_params(m.n_params), m.quantization, m.architecture,
                                      human_bytes(m.size_bytes))):
                item = QTableWidgetItem(text)
                item.setToolTip(str(m.path))
                item.setData(Qt.ItemDataRole.UserRole, str(m.path))
                self.table.setItem(i, j, item)
        self.pair_target.blockSignals(True)
        keep = self.pair_target.currentData() or current
        self.pair_target.clear()
        for m in models:
            self.pair_target.addItem(m.label, str(m.path))
        i = self.pair_target.findData(keep)
        self.pair_target.setCurrentIndex(max(0, i))
        self.pair_target.blockSignals(False)
        self._pairs_for_target()

    def _pairs_for_target(self, *_args) -> None:
        target = self.pair_target.currentData()
        self.pairs.clear()
        if not target:
            return
        self._generation += 1
        gen, models = self._generation, list(self.models)

        def done(options: list[DrafterOption]) -> None:
            if gen == self._generation:
                self.show_pairs(options)

        run_in_background(lambda: drafter_options(Path(target), models), done,
                          lambda exc: self.show_pairs([], str(exc)))

    def show_pairs(self, options: list[DrafterOption], error: str = "") -> None:
        self.pairs.clear()
        if error:
            QTreeWidgetItem(self.pairs, ["–", "", error])
        if not options and not error:
            QTreeWidgetItem(self.pairs, ["(no other model installed)", "", "Prompt lookup needs no second model."])
        for o in options:
            verdict = "yes" if o.compatible and not o.warning else ("yes, but" if o.compatible else "no")
            why = o.warning or "; ".join(o.reasons) or "same vocabulary: llama.cpp's pairing rules pass"
            item = QTreeWidgetItem(self.pairs, [o.model.label, ("✓ " if o.compatible else "✗ ") + verdict, why])
            item.setToolTip(2, why)
            item.setToolTip(0, str(o.model.path))
            item.setData(0, Qt.ItemDataRole.UserRole, str(o.model.path))
        for col in (0, 1):
            self.pairs.resizeColumnToContents(col)
        if self.pairs.topLevelItemCount():
            self.pairs.setCurrentItem(self.pairs.topLevelItem(self.pairs.topLevelItemCount() - 1))

    def _pair_detail(self, item: QTreeWidgetItem | None, _prev=None) -> None:
        if item is None:
            self.pair_detail.setText("")
            return
        self.pair_detail.setText(f"<b>{html.escape(item.text(0))}</b>: {html.escape(item.text(1))} — "
                                 f"{html.escape(item.text(2))}")

    def _import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", str(Path.home()), "GGUF models (*.gguf)")
        if path:
            self.import_file(Path(path))

    def import_file(self, path: Path) -> None:
        from app.control.model_jobs import import_task

        self.import_row.follow(self.controller.start_task(import_task(path)))

    def _use(self) -> None:
        row = self.table.currentRow()
        if row >= 0:
            self.controller.update_settings(target=self.table.item(row, 0).data(Qt.ItemDataRole.UserRole))


class ModelsDialog(QDialog):
    """Tabs: Installed · Catalog (with the default pair) · Hardware."""

    def __init__(self, controller: ChatController, parent: QWidget | None = None, tab: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        lay = QVBoxLayout(self)
        self.tabs = QTabWidget()
        self.tabs.setAccessibleName("Model sections")
        self.installed = InstalledTab(controller)
        self.catalog = CatalogTab(controller)
        self.hardware = HardwareTab(controller)
        self.tabs.addTab(self.installed, "Installed")
        self.tabs.addTab(self.catalog, "Get models")
        self.tabs.addTab(self.hardware, "Hardware")
        lay.addWidget(self.tabs)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.button(QDialogButtonBox.StandardButton.Close).setAccessibleName("Close")
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        resize_within(self, 900, 640)
        if tab == "catalog" or (not controller.models and not tab):
            self.tabs.setCurrentWidget(self.catalog)
        elif tab in ("hardware", "fast-copy"):
            self.tabs.setCurrentWidget(self.hardware)
            if tab == "fast-copy":  # from the target picker: the button that makes it is the next step
                self.hardware.fast_copy.button.setFocus()
