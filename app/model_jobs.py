"""The long model jobs, as plain functions for a Task (no Qt): download a pair, install the default, import."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from engine.models import catalog

from engine.models import default_pair

from engine.models import download

from engine.models import modelstore
from .tasks import Report, Task, rate_detail


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

        return modelstore.import_model(src, copy=copy, progress=progress)

    return Task(f"import:{src}", f"Importing {src.name}", job)


def catalog_installed(pair: catalog.CatalogPair) -> tuple[Path | None, Path | None]:
    """Where the pair's files are in the model folder (None for a missing one)."""
    return download.installed_path(pair.target), download.installed_path(pair.drafter)
