"""`draftlight --self-test` in a real subprocess: real llama.cpp on the bundled tiny models, real Qt offscreen."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tree import ROOT

BUNDLED = ROOT / "resources" / "test-models"


def self_test(env_extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "app", "--self-test"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=120,
    )


def test_bundled_test_models_are_the_tiny_pair():
    """resources/test-models holds tests/tiny_models.py's target and drafter (same names, shapes and
    vocabulary), so the self-test checks the pair the engine tests use."""
    import tiny_models

    from engine.gguf_check import validate_gguf

    for spec in (tiny_models.TARGET, tiny_models.DRAFTER):
        shipped = BUNDLED / f"{spec.name}.gguf"
        info = validate_gguf(shipped)
        assert (info.name, info.architecture) == (spec.name, "llama"), f"regenerate {shipped}: it is {info.name!r} ({info.architecture})"
        assert list(info.tokens) == tiny_models.vocabulary(spec)[0], (
            f"{shipped} has another vocabulary than tiny_models.py: regenerate with "
            "`python tests/tiny_models.py resources/test-models` (then delete tiny-other-vocab.gguf)"
        )
    assert sorted(p.name for p in BUNDLED.iterdir()) == ["tiny-drafter.gguf", "tiny-target.gguf"]


def test_self_test_passes_offscreen_without_a_platform_set():
    proc = self_test(drop=("QT_QPA_PLATFORM",))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("self-test passed: CPU backend, speculative reply identical to plain decoding")
    assert "Traceback" not in proc.stdout + proc.stderr
    out = proc.stdout
    assert "started on the 'offscreen' platform" in out
    assert "backends CPU" in out
    spec = next(line for line in lines if line.strip().startswith("speculative:"))
    assert "32 tokens" in spec and "accepted" in spec
    assert "plain:" in out and "identical" in out


def test_damaged_model_fails_with_a_clear_line(tmp_path):
    shutil.copy(BUNDLED / "tiny-drafter.gguf", tmp_path)
    data = (BUNDLED / "tiny-target.gguf").read_bytes()
    (tmp_path / "tiny-target.gguf").write_bytes(data[: len(data) // 2])  # cut in half, as by a broken copy
    proc = self_test({"DRAFTLIGHT_SELFTEST_MODELS": str(tmp_path)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("self-test FAILED: speculative decoding: ")
    assert "tiny-target.gguf" in last and "truncated" in last.lower()
    assert "Traceback" not in proc.stdout + proc.stderr


def test_missing_model_names_the_file(tmp_path):
    shutil.copy(BUNDLED / "tiny-target.gguf", tmp_path)
    proc = self_test({"DRAFTLIGHT_SELFTEST_MODELS": str(tmp_path)})
    assert proc.returncode == 1
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("self-test FAILED: speculative decoding: test model ")
    assert "tiny-drafter.gguf is missing" in last


@pytest.mark.parametrize("platform", ["nosuchplatform"])
def test_missing_qt_platform_plugin_is_reported_not_a_core_dump(platform):
    """What a bundle without its Qt plugins looks like: Qt would abort(); the self-test says why first."""
    proc = self_test({"QT_QPA_PLATFORM": platform})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"self-test FAILED: Qt: Qt platform plugin '{platform}' is not in this installation")
    assert "reinstall Draftlight" in last


def test_installer_files_check_out():
    """Workflow YAML, build scripts' syntax, and every path the spec, the .iss and the workflow name."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "installers" / "check_installers.py")],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "installer files check out"


def test_the_flavour_check_reads_this_build():
    """installers/check_flavour.py, which every build script runs before PyInstaller, on this llama.cpp."""
    proc = subprocess.run([sys.executable, str(ROOT / "installers" / "check_flavour.py"), "native"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("==> llama.cpp backends [") and "'CPU'" in proc.stdout.splitlines()[0]
