"""The long model jobs, as plain functions for a Task (no Qt): download a pair, install the default, import,
make a fast copy for this CPU."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from engine.llama import cpu_weights
from engine.drafting.draft_choice import DraftSpec
from engine.errors import EngineError, LoadCancelled
from engine.models import catalog, default_pair, download, modelstore

from app.control.tasks import Report, Task, rate_detail


def download_task(pair: catalog.CatalogPair, endpoint: str | None = None) -> Task:
    """`endpoint`: another hub (a mirror); None = HF_ENDPOINT when set, else huggingface.co."""
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None

    def job(report: Report, cancel: threading.Event) -> tuple[Path, Path]:
        def progress(p: download.DownloadProgress) -> None:
            report(p.filename, p.fraction, rate_detail(p.done_bytes, p.total_bytes, p.bytes_per_s))

        return download.download_pair(pair, progress=progress, cancel=cancel, endpoint=endpoint)

    return Task(f"download:{pair.id}", f"Downloading {pair.title}", job, (download.DownloadCancelled,))


def default_pair_task() -> Task:
    def job(report: Report, cancel: threading.Event) -> tuple[Path, ...]:
        return default_pair.install_default(progress=lambda name, fraction: report(name, fraction, "joining and checking"),
                                            cancel=cancel)

    return Task("install-default", "Installing the offline default pair", job, (default_pair.InstallCancelled,))


def import_task(src: Path, copy: bool = True) -> Task:
    def job(report: Report, cancel: threading.Event) -> modelstore.ModelRecord:
        def progress(done: int, total: int) -> None:
            report(src.name, done / total if total else None, rate_detail(done, total, 0))

        return modelstore.import_model(src, copy=copy, progress=progress, cancel=cancel)

    return Task(f"import:{src}", f"Importing {src.name}", job, (modelstore.CopyCancelled,))


def fast_copy_task(target: Path, drafter: DraftSpec) -> Task:
    """Make the fast copy of `target` for this CPU (engine.llama.cpu_weights); the result is the pair
    it makes with the same drafter, for the caller to switch to."""
    def job(report: Report, cancel: threading.Event) -> tuple[Path, str]:
        report(target.name, None, "llama.cpp's quantizer, once: seconds to a minute")
        return cpu_weights.make(target, cpu_weights.Role.FAST_TARGET, cancel), drafter.text

    return Task(f"fast-copy:{target}", f"Making a fast copy of {target.name} for this CPU", job, (LoadCancelled,))


class ImportedPair(tuple):
    """(target, drafter) chosen among imported files; `problems` names the files that were refused."""

    problems: tuple[str, ...] = ()


class ImportCancelled(EngineError):
    """Importing several files was cancelled; the files imported before stay."""


def import_many_task(sources: list[Path], copy: bool = True) -> Task:
    """Import several GGUF files (a selection, or a folder's); the result is the pair they make:
    the largest as target, the smallest compatible as drafter (else prompt lookup)."""
    sources = sorted(sources)

    def job(report: Report, cancel: threading.Event) -> ImportedPair:
        imported, problems = [], []
        for i, src in enumerate(sources):
            if cancel.is_set():
                raise ImportCancelled("importing was cancelled")

            def progress(done: int, total: int, i: int = i, src: Path = src) -> None:
                report(src.name, (i + (done / total if total else 0)) / len(sources), f"file {i + 1} of {len(sources)}")

            try:
                imported.append(modelstore.import_model(src, copy=copy, progress=progress, cancel=cancel).path)
            except modelstore.CopyCancelled:
                raise ImportCancelled("importing was cancelled") from None
            except EngineError as exc:
                problems.append(f"{src.name}: {exc}")
        if not imported:
            raise EngineError("no usable GGUF model among the files: " + "; ".join(problems) if problems
                              else "no .gguf files were found")
        pair = ImportedPair(_pair_of(imported))
        pair.problems = tuple(problems)
        return pair

    what = f"{len(sources)} files" if len(sources) != 1 else sources[0].name
    verb = "Importing" if copy else "Adding"
    return Task(f"import-many:{sources[0] if sources else ''}", f"{verb} {what}", job, (ImportCancelled,))


def _pair_of(paths: list[Path]) -> tuple[Path, str]:
    from app.control.model_scan import drafter_options, list_models

    entries = [e for e in list_models(paths)[0] if e.path.resolve() in {p.resolve() for p in paths}]
    target = entries[0]  # largest first
    # Compatible ones, the warning-free first (a drafter too close in size to the target still works,
    # and the person chose these files); prompt lookup when none can pair.
    options = sorted((o for o in drafter_options(target.path, entries[1:]) if o.compatible),
                     key=lambda o: bool(o.warning))
    return target.path, (str(options[0].model.path) if options else "lookup")


def catalog_installed(pair: catalog.CatalogPair) -> tuple[Path | None, Path | None]:
    """Where the pair's files are in the model folder (None for a missing one)."""
    return download.installed_path(pair.target), download.installed_path(pair.drafter)


def pair_memory(pair: catalog.CatalogPair, n_ctx: int, n_gpu_layers: int) -> int | None:
    """Bytes the pair needs loaded, from its files' headers by the estimate the Hardware tab shows (so the two
    say the same figure), or None while its files are not in the model folder (runs off the GUI thread)."""
    from engine.models.hardware import estimate_pair_memory

    t, d = catalog_installed(pair)
    if t is None or d is None:
        return None
    return estimate_pair_memory(t, d, n_ctx, n_gpu_layers).needed_bytes
