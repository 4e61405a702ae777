"""Models and pairing: what is installed, which drafters fit the target, which pair is loaded.

The load state machine is small: `wanted_load()` is what the settings name, `loading` what the
engine thread is loading now, `loaded` what it holds. `ensure_loaded()` asks for the wanted pair
when it is neither; when a load ends it looks again, since the settings may have moved on. Long
model jobs (downloads, installs, imports) are Tasks that run on their own threads; when one
brings a pair, the pair is chosen once the model listing has it.

It knows nothing of conversations or replies: a switch that must stop running work calls
`interrupt`, which the controller wires to the replies.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal

from engine.errors import LoadCancelled, ModelFileError
from engine.drafting.draft_choice import DraftSpec
from engine.llama.types import LoadSettings
from engine.decoding.measure import LoadStage

from app.control.model_scan import DrafterOption, ModelEntry, drafter_options, list_models
from app.control.preferences import Preferences
from app.control.tasks import Task, TaskState
from app.core.background import disconnect_all, run_in_background
from app.core.drafter_names import drafter_label
from app.core.errors import Action, Level, Notice, explain
from app.core.settings import AppSettings
from app.core.engine_thread.worker import EngineWorker, LoadedInfo, LoadRequest


@dataclass(frozen=True, slots=True)
class LoadState:
    """What the status bar says about the models."""

    text: str
    """The line shown."""
    progress: float | None = None
    """How far a load is, 0-1; None: no progress bar."""


def pair_problem(target: str, drafter: DraftSpec | str) -> str | None:
    """Why this pair cannot be loaded as it is named (a file gone), or None."""
    if not target:
        return "no target model is named"
    if not Path(target).is_file():
        return f"{Path(target).name} is not installed any more ({target})"
    model = DraftSpec.parse(drafter).model
    if model is not None and not model.is_file():
        return f"the drafter {model.name} is not installed any more ({model})"
    return None


# What the status bar says in each load stage; a busy bar for the stages without a fraction.
_STAGE_TEXT = {LoadStage.TARGET: "Loading the target…", LoadStage.DRAFTER: "Loading the drafter…",
               LoadStage.MEASURING: "Measuring this machine's speed…",
               LoadStage.DRAFTER_CPU_COPY: "Making a faster copy of the drafter for this CPU (once, about 30 s)…",
               LoadStage.CHECKING_KERNELS: "Checking llama.cpp's AMX kernels on this CPU (once per model, a few seconds)…"}


class Pairing(QObject):
    """Installed models, drafter options, the loaded pair, and long model jobs (GUI thread)."""

    sig_notice = Signal(object)
    """Show a Notice above the chat."""
    sig_load_state = Signal(object)
    """Model state for the status bar (LoadState)."""
    sig_models = Signal(object, str)
    """Installed models (list[ModelEntry]) and the current target path."""
    sig_drafters = Signal(object, object)
    """Drafter options for the target (list[DrafterOption]) and the current drafter choice (DraftSpec)."""
    sig_no_models = Signal()
    """No model is installed and none is chosen: offer the ways to get one."""
    sig_loaded = Signal(object)
    """A pair finished loading (LoadedInfo)."""
    sig_task_started = Signal(object)
    """A long model job (tasks.Task) started; its own signals report progress."""
    _request_load = Signal(object)

    def __init__(self, prefs: Preferences, worker: EngineWorker, interrupt: Callable[[], str | None],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.prefs = prefs
        self.interrupt = interrupt
        """Stops whatever runs on the engine thread; returns what it stopped ('The reply', 'Compare') or None."""
        self.models: list[ModelEntry] = []
        self.drafters: list[DrafterOption] = []
        self.loaded: LoadedInfo | None = None
        self.loading: LoadRequest | None = None
        self.load_error: BaseException | None = None
        self.tasks: dict[str, Task] = {}
        self.closed = False
        self._scan_generation = 0
        self._drafters_generation = 0
        self._pending_pair: tuple[str, DraftSpec] | None = None
        self.worker = worker
        # Directly, on this thread as it queues: a conversation being read ahead gives way at once.
        self._request_load.connect(worker.interrupt_read_ahead, Qt.ConnectionType.DirectConnection)
        self._request_load.connect(worker.load)
        self._links = ((worker.sig_load_progress, self._on_load_progress), (worker.sig_loaded, self._on_loaded),
                       (worker.sig_load_failed, self._on_load_failed))
        for sig, slot in self._links:
            sig.connect(slot)

    @property
    def settings(self) -> AppSettings:
        return self.prefs.settings

    def settings_changed(self, old: AppSettings, new: AppSettings) -> None:
        """A person changed the settings: follow a new target or a new pair."""
        if new.target != old.target:
            self.sig_models.emit(self.models, new.target)  # the pickers show it, wherever it was chosen
            self.refresh_drafters(then_load=True)
        elif (new.drafter, new.n_ctx, new.n_gpu_layers, new.n_threads) != (old.drafter, old.n_ctx, old.n_gpu_layers, old.n_threads):
            self.ensure_loaded()

    def use_pair(self, target: str, drafter: DraftSpec | str) -> None:
        """Switch to this pair now, as if the person chose it; its load is queued before anything
        asked for after this call."""
        old = self.prefs.update(target=target, drafter=drafter)
        if old is not None:
            self.settings_changed(old, self.settings)
        self.ensure_loaded()

    # -- models ---------------------------------------------------------------------------
    def refresh_models(self, then_load: bool = False) -> None:
        """Read the model folder off the GUI thread; then the drafters for the target."""
        self._scan_generation += 1
        gen = self._scan_generation
        s = self.settings
        extra = [p for p in (s.target, s.drafter.model) if p]
        if then_load and self._saved_pair_loads_now():
            self.ensure_loaded()  # beside the scans; when they end, ensure_loaded() keeps it or moves on

        def done(result) -> None:
            if gen != self._scan_generation or self.closed:
                return
            self.models, problems = result
            if self._pending_pair is not None:
                target, drafter = self._pending_pair
                self._pending_pair = None
                self.prefs.adopt(announce=True, target=target, drafter=drafter)
            for p in problems:
                self.sig_notice.emit(Notice(f"A file in the model folder cannot be used: {p}", Level.WARNING,
                                            Action.OPEN_MODELS))
            if not self.settings.target and self.models:
                self.prefs.adopt(target=str(self.models[0].path))
            self.sig_models.emit(self.models, self.settings.target)
            if not self.models and not self.settings.target:
                self.sig_load_state.emit(LoadState("No model installed"))
                self.sig_no_models.emit()
                return
            self.refresh_drafters(then_load=then_load)

        run_in_background(lambda: list_models(extra), done, lambda exc: self.sig_notice.emit(explain(exc)))

    def refresh_drafters(self, then_load: bool = False) -> None:
        target = self.settings.target
        self._drafters_generation += 1
        gen = self._drafters_generation
        if not target:
            return
        if not Path(target).is_file():
            self.sig_drafters.emit([], self.settings.drafter)
            self.sig_notice.emit(explain(ModelFileError(f"{Path(target).name} is not there any more ({target})")))
            return
        models = list(self.models)

        def done(options: list[DrafterOption]) -> None:
            if gen != self._drafters_generation or self.closed:
                return
            self.drafters = options
            compatible = [Path(o.model.path) for o in options if o.compatible]
            drafter = self.settings.drafter
            if drafter.model is not None and drafter.model not in compatible:
                # The chosen drafter cannot pair with this target: take the smallest that can, else lookup.
                drafter = DraftSpec(compatible[0], drafter.lookup) if compatible else DraftSpec.LOOKUP
                self.prefs.adopt(drafter=drafter)
            elif drafter == DraftSpec.LOOKUP and compatible and not self.settings.drafter_chosen:
                # Nobody chose: start in the fastest mode (prompt lookup + the model, under Auto).
                drafter = DraftSpec.with_lookup(compatible[0])
                self.prefs.adopt(drafter=drafter)
            self.sig_drafters.emit(options, drafter)
            if then_load:
                self.ensure_loaded()

        def failed(exc: BaseException) -> None:
            if gen == self._drafters_generation:
                self.sig_drafters.emit([], self.settings.drafter)
                self.sig_notice.emit(explain(exc))

        run_in_background(lambda: drafter_options(Path(target), models), done, failed)

    # -- loading ----------------------------------------------------------------------------
    def _saved_pair_loads_now(self) -> bool:
        """Whether the pair the settings name can start loading before the model folder and the drafters
        are read (0.8 s at a launch here): nothing is loaded or on its way, its files are there, and its
        drafter is not the unchosen default that the drafter scan turns into lookup + model."""
        s = self.settings
        if self.loading is not None or self.loaded is not None or self._pending_pair is not None or not s.target:
            return False
        if s.drafter == DraftSpec.LOOKUP and not s.drafter_chosen:
            return False
        return all(Path(p).is_file() for p in (s.target, s.drafter.model) if p)

    def wanted_load(self) -> LoadRequest | None:
        s = self.settings
        if not s.target:
            return None
        return LoadRequest(Path(s.target), s.drafter, LoadSettings(n_ctx=s.n_ctx, n_gpu_layers=s.n_gpu_layers,
                                                                   n_threads=s.n_threads))

    def ensure_loaded(self) -> None:
        """Load the pair the settings name, unless it is loaded or on its way."""
        want = self.wanted_load()
        if want is None or self.closed:
            return
        if self.loading is not None:
            if self.loading != want:  # another pair was picked mid-load: stop loading the old one
                self.worker.cancel_load(self.loading)
            return  # _on_loaded / _on_load_failed look again
        if self.loaded is not None and self.loaded.request == want:
            return
        # A running reply (or Compare) ends within one round; the load is queued behind it.
        stopped = self.interrupt()
        if stopped:
            self.sig_notice.emit(Notice(f"{stopped} was stopped to switch models.", Level.INFO))
        self.loading = want
        self.load_error = None
        self.sig_load_state.emit(LoadState(f"Loading {want.target.name}…", 0.0))
        self._request_load.emit(want)

    def _on_load_progress(self, which: LoadStage, fraction: float) -> None:
        self.sig_load_state.emit(LoadState(_STAGE_TEXT[which], fraction if which.has_fraction else None))

    def _on_loaded(self, info: LoadedInfo) -> None:
        self.loading = None
        self.loaded = info
        self.sig_loaded.emit(info)
        notes = f" — {'; '.join(info.notes)}" if info.notes else ""
        self.sig_load_state.emit(LoadState(f"Ready: {info.request.target.name} + {drafter_label(info.request.drafter)} "
                                           f"(context {info.n_ctx}, loaded in {info.seconds:.1f} s){notes}"))
        self.ensure_loaded()  # the settings may have moved on while this loaded

    def _on_load_failed(self, req: LoadRequest, exc: BaseException, still: LoadedInfo | None) -> None:
        self.loading = None
        self.loaded = still
        self.load_error = exc
        if not isinstance(exc, LoadCancelled):  # asked for (a switch): the state line says enough
            self.sig_notice.emit(explain(exc))
        self.sig_load_state.emit(LoadState("Not loaded" if still is None else
                                           f"Still using {still.request.target.name} + {drafter_label(still.request.drafter)}"))
        want = self.wanted_load()
        if want is not None and want != req:
            self.ensure_loaded()

    def loaded_or_wanted(self) -> LoadRequest | None:
        """The pair the next reply will run on: the loaded one, or the one on its way."""
        return self.loaded.request if self.loaded is not None else self.wanted_load()

    # -- long model jobs -------------------------------------------------------------------------
    def start_task(self, task: Task, use_pair: bool = False) -> Task:
        """Run a download / install / import; when `use_pair`, choose its (target, drafter) once done."""
        running = self.tasks.get(task.key)
        if running is not None and running.state == TaskState.RUNNING:
            return running
        task.use_pair = use_pair
        self.tasks[task.key] = task
        task.sig_finished.connect(self._task_finished)
        task.start()
        self.sig_task_started.emit(task)
        return task

    def _task_finished(self, task: Task) -> None:
        if self.closed:
            return
        if task.state == TaskState.DONE:
            result = task.result
            pair = result if isinstance(result, tuple) and len(result) == 2 else None
            if pair is not None and (task.use_pair or not self.settings.target):
                # Chosen once the listing has them; a drafter model starts with prompt lookup in front.
                drafter = DraftSpec.parse(str(pair[1]))
                self._pending_pair = (str(pair[0]), DraftSpec.with_lookup(drafter.model) if drafter.model else drafter)
            self.sig_notice.emit(Notice(f"{task.title}: done.", Level.INFO))
        elif task.state == TaskState.FAILED and task.error is not None:
            self.sig_notice.emit(explain(task.error))
        self.refresh_models(then_load=True)

    # -- closing ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop listening; downloads are told to stop (they keep their bytes and resume next time)."""
        self.closed = True
        for task in self.tasks.values():
            task.cancel.set()

    def disconnect_worker(self) -> None:
        disconnect_all(self._links)
