"""scripts/install.sh decides, by itself, how llama-cpp-python is built: on an AMX CPU built by GCC (what
scripts/amx_cxx_flags.sh says) it builds it afresh with the flag, never from pip's cached wheel, and only once.

The script runs for real (bash) in a copy of the project; `python3` on its PATH is a stand-in that makes a
.venv whose python writes each call and its CMAKE_ARGS to a log: pip's downloads and a 10-minute compile are
not what is tested, the script's choices are.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tree import ROOT

FAKE_PY = """#!/usr/bin/env bash
echo "$* | CMAKE_ARGS=${CMAKE_ARGS:-}" >> "$LOG"
"""
FAKE_PYTHON3 = """#!/usr/bin/env bash
# python3 -m venv .venv: a venv whose python logs what it is asked to do
mkdir -p "$3/bin"
cp "$FAKE_PY" "$3/bin/python"
chmod +x "$3/bin/python"
"""


def project(tmp_path: Path, amx_flag: str) -> tuple[Path, dict]:
    proj = tmp_path / "proj"
    (proj / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "install.sh", proj / "scripts" / "install.sh")
    shutil.copy(ROOT / "pyproject.toml", proj / "pyproject.toml")
    (proj / "scripts" / "amx_cxx_flags.sh").write_text(f'echo "{amx_flag}"\n' if amx_flag else "true\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "fake_py").write_text(FAKE_PY)
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"),
           "FAKE_PY": str(tmp_path / "fake_py")}
    env.pop("CMAKE_ARGS", None)
    return proj, env


def run(proj: Path, env: dict, *args: str) -> list[str]:
    subprocess.run(["bash", "scripts/install.sh", *args], cwd=proj, env=env, check=True, capture_output=True)
    log = Path(env["LOG"])
    lines = log.read_text().splitlines()
    log.unlink()
    return lines


def test_on_an_amx_cpu_llama_cpp_is_built_afresh_with_the_flag_once(tmp_path):
    proj, env = project(tmp_path, "-DCMAKE_CXX_FLAGS=-fno-dse")
    first = run(proj, env)
    build = [line for line in first if "--no-binary llama-cpp-python" in line]
    assert build == ["-m pip install -q --no-cache-dir --force-reinstall --no-deps --no-binary llama-cpp-python "
                     "llama-cpp-python==0.3.36 | CMAKE_ARGS= -DCMAKE_CXX_FLAGS=-fno-dse"]
    assert first.index(build[0]) < next(i for i, x in enumerate(first) if x.startswith("-m pip install -q -e .[models]"))
    assert first[-1].startswith("-m engine models install-default")
    again = run(proj, env)  # the stamp says it was built with the flag: not again
    assert not any("--no-binary" in line for line in again)
    assert any(line.startswith("-m pip install -q -e .[models]") for line in again)


def test_elsewhere_pip_installs_as_usual_and_test_adds_the_test_extra(tmp_path):
    proj, env = project(tmp_path, "")
    lines = run(proj, env, "--test")
    assert not any("--no-binary" in line or "--no-cache-dir" in line for line in lines)
    assert any(line.startswith("-m pip install -q -e .[models,test] | CMAKE_ARGS=") for line in lines)
    assert lines[-1].startswith("-m engine models install-default")


def test_an_unknown_option_is_refused():
    r = subprocess.run(["bash", str(ROOT / "scripts" / "install.sh"), "--fast"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown option --fast" in r.stderr
