"""Hardware: what llama.cpp sees on this machine, offload and context settings, and whether the pair fits."""
from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (QFormLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton, QSpinBox, QVBoxLayout,
                               QWidget)

from engine.llama import cpu_weights
from engine.errors import EngineError

from app.core.background import run_in_background
from app.core.settings import N_CTX_RANGE
from app.control.controller import ChatController
from app.control.model_jobs import fast_copy_task
from app.control.model_scan import ModelEntry, entry_for, human_bytes
from app.control.tasks import TaskState
from app.models.task_row import TaskRow

#: What a person is told before choosing the copy; the figures are docs/benchmarks.md's (AMD EPYC Zen 5).
_FAST_COPY_TEXT = (
    "llama.cpp's CPU kernels check a block of drafted tokens fastest when every matrix is stored as Q4_0, "
    "so speculation pays far more often with such a copy of the target: on a 2-core Zen 5, prompt lookup + "
    "model with Auto ran 1.21x as fast as the copy's own plain decoding, against 1.03x with the original. "
    "<b>It is another model</b>: its weights are rounded once more, and its greedy choice matched the "
    "original's on 97 tokens in 100 in our tests. Replies stay exact for the copy that runs. "
    "The original stays in the Target list.")


class HardwareTab(QWidget):
    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        lay = QVBoxLayout(self)
        self.report = QLabel("Looking at this machine…")
        self.report.setWordWrap(True)
        box = QGroupBox("This machine")
        QVBoxLayout(box).addWidget(self.report)
        lay.addWidget(box)

        settings = QGroupBox("Loading")
        form = QFormLayout(settings)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        s = controller.settings
        self.n_ctx = QSpinBox()
        self.n_ctx.setRange(*N_CTX_RANGE)
        self.n_ctx.setSingleStep(1024)
        self.n_ctx.setValue(s.n_ctx or 4096)
        self.n_ctx.setSuffix(" tokens")
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(-1, 999)
        self.gpu_layers.setSpecialValueText("all")
        self.gpu_layers.setValue(s.n_gpu_layers)
        self.threads = QSpinBox()
        self.threads.setRange(0, 256)
        self.threads.setSpecialValueText("all cores")
        self.threads.setValue(s.n_threads or 0)
        form.addRow("Context length", self.n_ctx)
        form.addRow("Layers on the GPU", self.gpu_layers)
        form.addRow("CPU threads", self.threads)
        self.estimate = QLabel("")
        self.estimate.setObjectName("memory_estimate")
        self.estimate.setWordWrap(True)
        self.estimate.setMinimumWidth(480)
        form.addRow("Memory", self.estimate)
        self.apply_button = QPushButton("Apply and reload")
        for w, name in ((self.n_ctx, "Context length"), (self.gpu_layers, "Layers on the GPU"),
                        (self.threads, "CPU threads"), (self.apply_button, "Apply and reload")):
            w.setAccessibleName(name)
        form.addRow("", self.apply_button)
        lay.addWidget(settings)
        self.fast_copy = FastCopyBox(controller)
        lay.addWidget(self.fast_copy)
        lay.addStretch(1)
        self._debounce = QTimer(self, singleShot=True, interval=250)
        self._debounce.timeout.connect(self._estimate)
        for w in (self.n_ctx, self.gpu_layers):
            w.valueChanged.connect(lambda _v: self._debounce.start())
        self.apply_button.clicked.connect(self._apply)
        self._generation = 0
        run_in_background(self._read_report, self._show_report, lambda e: self.report.setText(str(e)))
        self._estimate()

    @staticmethod
    def _read_report():
        from engine.models.hardware import hardware_report

        return hardware_report()

    def _show_report(self, r) -> None:
        devices = "".join(
            f"<li>{html.escape(d.description or d.name)} ({html.escape(d.kind)}"
            + (f", {human_bytes(d.memory_free)} free of {human_bytes(d.memory_total)}" if d.memory_total else "")
            + ")</li>" for d in r.devices)
        offload = ("yes: layers can run on the GPU" if r.gpu_offload
                   else "no: this build of llama.cpp runs on the CPU only (install a CUDA, Metal or Vulkan build "
                        "of llama-cpp-python to use a GPU)")
        self.report.setText(
            f"llama.cpp backends: <b>{html.escape(', '.join(r.backends))}</b><br>"
            f"GPU offload: {offload}<br>{html.escape(r.threads_line)}<br>{html.escape(r.attention_line)}<br>"
            f"RAM: {human_bytes(r.ram_available)} free of {human_bytes(r.ram_total)}<br>Devices:<ul>{devices}</ul>"
            + (f"{html.escape(r.amx)}" if r.amx else "")
        )
        if not r.gpu_offload:
            self.gpu_layers.setEnabled(False)
            self.gpu_layers.setToolTip("No GPU offload in this build")

    def _estimate(self) -> None:
        s = self.controller.settings
        if not s.target or not Path(s.target).is_file():
            self.estimate.setText("Choose a target model to see what it needs.")
            return
        drafter = s.drafter.model
        n_ctx, ngl = self.n_ctx.value(), self.gpu_layers.value()
        self._generation += 1
        gen = self._generation

        def job():
            from engine.models.hardware import estimate_pair_memory

            return estimate_pair_memory(Path(s.target), drafter, n_ctx, ngl)

        def done(est) -> None:
            if gen == self._generation:
                mark = "✓" if est.fits else "⚠"
                # The engine words its advice for the command line; here the settings are above.
                message = est.message.replace(" (--gpu-layers)", "").replace(" (--ctx)", "")
                self.estimate.setText(f"{mark} {html.escape(message)}")

        run_in_background(job, done, lambda e: self.estimate.setText(html.escape(str(e))))

    def _apply(self) -> None:
        self.controller.update_settings(n_ctx=self.n_ctx.value(), n_gpu_layers=self.gpu_layers.value(),
                                        n_threads=self.threads.value() or None)


class FastCopyBox(QGroupBox):
    """A faster copy of the target for this CPU: what it is, and one button to make it and use it, use
    it, or go back to the original. Hidden where none is offered (a GPU build, another CPU kind)."""

    def __init__(self, controller: ChatController, parent: QWidget | None = None) -> None:
        super().__init__("A faster copy for this CPU", parent)
        self.setObjectName("fast_copy")
        self.controller = controller
        lay = QVBoxLayout(self)
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.button = QPushButton()
        self.button.setObjectName("fast_copy_button")
        self.delete_button = QPushButton("Delete the copy")
        self.delete_button.setObjectName("fast_copy_delete")
        self.delete_button.setAccessibleName("Delete the fast copy")
        self.row = TaskRow()
        lay.addWidget(self.text)
        buttons = QHBoxLayout()
        buttons.addWidget(self.button)
        buttons.addWidget(self.delete_button)
        buttons.addStretch(1)
        lay.addLayout(buttons)
        lay.addWidget(self.row)
        self.button.clicked.connect(self._act)
        self.delete_button.clicked.connect(self._delete)
        self._action: tuple[str, str] | None = None  # ('make' | 'use', target path)
        self._copy: Path | None = None  # a copy made and not in use: it can be deleted
        controller.sig_models.connect(self.show_for)
        for task in controller.tasks.values():
            if task.key.startswith("fast-copy:"):
                self.row.follow(task)
        self.show_for(controller.models, controller.settings.target)

    def show_for(self, models: list[ModelEntry], current: str) -> None:
        entry = entry_for(models, current)
        copy = next((m for m in models if entry is not None and m.copy_of is not None
                     and str(m.copy_of) == str(entry.path)), None)
        self._action, self._copy = None, None
        if entry is not None and entry.copy_of is not None:
            self.text.setText(f"The target is the fast copy of <b>{html.escape(entry.copy_of.name)}</b> made for "
                              f"this CPU. {_FAST_COPY_TEXT}")
            self._action, label = ("use", str(entry.copy_of)), "Use the original"
        elif copy is not None:
            self.text.setText(f"A fast copy of <b>{html.escape(entry.path.name)}</b> is made. {_FAST_COPY_TEXT}")
            self._action, label = ("use", str(copy.path)), "Use the fast copy"
            self._copy = copy.path
        elif entry is not None and entry.copyable:
            self.text.setText(f"{_FAST_COPY_TEXT} Made once from <b>{html.escape(entry.path.name)}</b>, in seconds "
                              f"to a minute; at most {human_bytes(entry.size_bytes)} more on disk.")
            self._action, label = ("make", str(entry.path)), "Make the fast copy and use it"
        self.setVisible(self._action is not None)
        self.delete_button.setVisible(self._copy is not None)
        if self._copy is not None:
            self.delete_button.setToolTip(f"{self._copy}\n{human_bytes(copy.size_bytes)}; it can be made again")
        if self._action is not None:
            self.button.setText(label)
            self.button.setAccessibleName(label)
            running = any(t.key.startswith("fast-copy:") and t.state == TaskState.RUNNING
                          for t in self.controller.tasks.values())
            self.button.setEnabled(not running)

    def _delete(self) -> None:
        if self._copy is None:
            return
        try:
            cpu_weights.remove(self._copy)
        except (EngineError, OSError) as exc:
            self.row.hide()
            self.text.setText(f"The copy could not be deleted: {html.escape(str(exc))}")
            return
        self.controller.refresh_models()

    def _act(self) -> None:
        if self._action is None:
            return
        kind, path = self._action
        if kind == "use":
            self.controller.update_settings(target=path)
            return
        self.button.setEnabled(False)
        task = self.controller.start_task(fast_copy_task(Path(path), self.controller.settings.drafter), use_pair=True)
        self.row.follow(task)
