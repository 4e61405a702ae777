"""llama.cpp's AMX kernels, tried once per model file and build in a child process (engine.llama.amx_check).

Real processes throughout: the check's child is a real Python process that either runs llama.cpp or is
killed by a real signal. The reference for what the installed build does is a third process that loads
the file through llama-cpp-python's own high-level API (repacking on, its default) and decodes a batch.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from importlib import metadata
from pathlib import Path

import pytest

from engine.llama import amx_check, backend as llama_backend
from engine.llama.amx_check import AmxVerdict
from engine.llama.types import LoadSettings
from engine.llama.backend import quantize
from engine.decoding.session import GenerationSettings, Session
from engine.decoding.measure import LoadStage
from engine.errors import LoadCancelled
from engine.gguf_check import validate_gguf

CRASH = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
SUCCEED = [sys.executable, "-c", "pass"]
FAIL = [sys.executable, "-c", "import sys; print('no such thing', file=sys.stderr); sys.exit(3)"]
HANG = [sys.executable, "-c", "import time; time.sleep(60)"]
LLAMA_FTYPE_MOSTLY_Q8_0 = 7


@pytest.fixture(scope="module")
def q8_tiny(tiny, tmp_path_factory) -> Path:
    """The tiny target with its matrices in Q8_0, a type ggml's AMX kernels take (shapes of 64 and 128)."""
    info = validate_gguf(tiny["target"], read_tokens=False)
    types = {name: "Q8_0" for name, shape, _, _ in info.tensors
             if len([d for d in shape if d > 1]) == 2 and name != "token_embd.weight"}
    out = tmp_path_factory.mktemp("q8") / "tiny-q8.gguf"
    quantize(tiny["target"], out, types, LLAMA_FTYPE_MOSTLY_Q8_0)
    return out


@pytest.fixture(autouse=True)
def own_store(tmp_path, monkeypatch):
    """Each test starts with nothing kept (the run's shared store would carry one test's verdict into the next)."""
    monkeypatch.setenv("DRAFTLIGHT_AMX_CHECKS", str(tmp_path / "amx-check.json"))


def _child(monkeypatch, command: list[str]) -> list[list[str]]:
    """Run `command` as the check's child; returns the list of children started, to count them."""
    started: list[list[str]] = []

    def command_for(path):
        started.append(command)
        return command

    monkeypatch.setattr(amx_check, "_child_command", command_for)
    return started


def test_a_child_killed_by_a_signal_is_a_crash_kept_for_the_file_and_build(monkeypatch, q8_tiny):
    started = _child(monkeypatch, CRASH)
    first = amx_check.check(q8_tiny)
    assert first.verdict is AmxVerdict.CRASHES and first.detail == "killed by SIGSEGV"
    _child(monkeypatch, SUCCEED)  # kept: no child runs, whatever it would say now
    assert amx_check.check(q8_tiny).verdict is AmxVerdict.CRASHES
    assert len(started) == 1
    os.utime(q8_tiny, ns=(q8_tiny.stat().st_atime_ns, q8_tiny.stat().st_mtime_ns + 10**9))  # the file changed
    assert amx_check.check(q8_tiny).verdict is AmxVerdict.RUNS


def test_another_build_of_llama_cpp_is_checked_again(monkeypatch, q8_tiny, tmp_path):
    _child(monkeypatch, CRASH)
    assert amx_check.check(q8_tiny).verdict is AmxVerdict.CRASHES
    rebuilt = tmp_path / "lib"  # build_identity reads the library folder: another folder, another build
    rebuilt.mkdir()
    (rebuilt / "libggml-cpu.so").write_bytes(b"\0" * 10)
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(rebuilt))
    _child(monkeypatch, SUCCEED)
    assert amx_check.check(q8_tiny).verdict is AmxVerdict.RUNS
    (rebuilt / "libggml-cpu.so").write_bytes(b"\0" * 11)  # rebuilt in place with other flags
    _child(monkeypatch, CRASH)
    assert amx_check.check(q8_tiny).verdict is AmxVerdict.CRASHES


def test_a_child_that_fails_or_hangs_gives_no_verdict_and_nothing_is_kept(monkeypatch, q8_tiny):
    started = _child(monkeypatch, FAIL)
    failed = amx_check.check(q8_tiny)
    assert failed.verdict is AmxVerdict.UNKNOWN and failed.detail == "exit status 3: no such thing"
    assert amx_check.kept(q8_tiny) is None and not amx_check.store_path().exists()
    monkeypatch.setattr(amx_check, "TIMEOUT_S", 0.5)
    _child(monkeypatch, HANG)
    hung = amx_check.check(q8_tiny)
    assert hung.verdict is AmxVerdict.UNKNOWN and hung.detail == "no answer within 0.5 s"
    assert amx_check.kept(q8_tiny) is None and len(started) == 1


def test_cancel_ends_the_check_and_its_child(monkeypatch, q8_tiny, tmp_path):
    pid_file = tmp_path / "pid"
    _child(monkeypatch, [sys.executable, "-c",
                         f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"])
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    with pytest.raises(LoadCancelled):
        amx_check.check(q8_tiny, cancel)
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    assert amx_check.kept(q8_tiny) is None


def test_a_damaged_store_costs_a_check_and_is_written_anew(monkeypatch, q8_tiny):
    amx_check.store_path().parent.mkdir(parents=True, exist_ok=True)
    amx_check.store_path().write_text("{not json", encoding="utf-8")
    started = _child(monkeypatch, SUCCEED)
    assert amx_check.check(q8_tiny).verdict is AmxVerdict.RUNS and len(started) == 1
    assert amx_check.check(q8_tiny).verdict is AmxVerdict.RUNS and len(started) == 1


def _reference_runs(path: Path) -> bool:
    """Whether llama-cpp-python's own Llama class, repacking on as it is by default, decodes a batch of
    the file in a process of its own (exit 0) or dies."""
    code = textwrap.dedent(f"""
        import llama_cpp
        llm = llama_cpp.Llama(model_path={str(path)!r}, n_ctx=256, n_threads=1, verbose=False)
        assert llm.model_params.use_extra_bufts
        llm.eval(llm.tokenize(b"def f(x): return x", add_bos=True)[:8])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert out.returncode == 0 or out.returncode < 0, out.stderr.decode()[-500:]
    return out.returncode == 0


def test_the_real_check_agrees_with_llama_cpp_python_itself_on_this_build(q8_tiny, tiny):
    """No stand-in: the engine's own child on this machine's build, against the reference process.
    (On a GCC 12 build for an AMX CPU both die on the Q8_0 file; elsewhere both run it.)"""
    for path in (q8_tiny, tiny["target"]):
        found = amx_check.run_check(path)
        assert found.verdict is not AmxVerdict.UNKNOWN, found.detail
        assert (found.verdict is AmxVerdict.RUNS) == _reference_runs(path), (path.name, found)


def test_a_file_with_nothing_to_repack_is_never_tried(monkeypatch, tiny, q8_tiny):
    started = _child(monkeypatch, CRASH)
    monkeypatch.delenv("DRAFTLIGHT_ALLOW_AMX", raising=False)
    monkeypatch.setattr(llama_backend, "amx_compiled", lambda: True)  # as on an AMX CPU
    assert llama_backend.repacking_decided(None, tiny["target"]) is False  # F32 only
    assert llama_backend.repacking_decided(None, q8_tiny) is None
    assert llama_backend.repacking_decided(True, q8_tiny) is True
    monkeypatch.setenv("DRAFTLIGHT_ALLOW_AMX", "0")
    assert llama_backend.use_extra_buffers(None, q8_tiny) is False
    monkeypatch.setattr(llama_backend, "amx_compiled", lambda: False)  # a build without AMX kernels
    monkeypatch.delenv("DRAFTLIGHT_ALLOW_AMX")
    assert llama_backend.use_extra_buffers(None, q8_tiny) is True
    assert started == []


def test_a_session_on_a_file_whose_kernels_crash_loads_without_repacking_and_says_so(monkeypatch, q8_tiny):
    started = _child(monkeypatch, CRASH)
    monkeypatch.delenv("DRAFTLIGHT_ALLOW_AMX", raising=False)
    monkeypatch.setattr(llama_backend, "amx_compiled", lambda: True)  # as on an AMX CPU (this one may be one)
    stages: list[LoadStage] = []
    load = LoadSettings(n_ctx=512, n_threads=1)
    s = Session(q8_tiny, None, target_load=load, calibrate=False, progress=lambda st, _v: stages.append(st))
    try:
        assert stages[0] is LoadStage.CHECKING_KERNELS and stages.count(LoadStage.CHECKING_KERNELS) == 1
        assert s.target.extra_buffers is False
        assert any("AMX kernels crash in this build" in n and "-fno-dse" in n and "tiny-q8.gguf" in n for n in s.notes)
        done = list(s.generate_tokens(s.target.tokenize("hello world"), GenerationSettings(draft_max=0, max_tokens=8)))
        assert done[-1].stats.tokens == 8
    finally:
        s.close()
    stages.clear()
    again = Session(q8_tiny, None, target_load=load, calibrate=False, progress=lambda st, _v: stages.append(st))
    try:  # kept: no check, no stage, the same note
        assert LoadStage.CHECKING_KERNELS not in stages and again.target.extra_buffers is False
        assert any("AMX kernels crash" in n for n in again.notes)
    finally:
        again.close()
    assert len(started) == 1


def test_calibrations_with_and_without_repacking_are_kept_apart(monkeypatch, q8_tiny):
    """The key is what the model was loaded with, not what was asked: the same settings (None) on a
    build whose kernels run and on one where they crash measure different machines."""
    from engine.llama import calibration

    monkeypatch.setattr(llama_backend, "amx_compiled", lambda: True)
    monkeypatch.delenv("DRAFTLIGHT_ALLOW_AMX", raising=False)
    _child(monkeypatch, CRASH)
    load = LoadSettings(n_ctx=512, n_threads=1)
    s = Session(q8_tiny, None, target_load=load, calibrate=False)
    try:
        key = s._key(s.target)
        expected = calibration.key_for(q8_tiny, {"n_threads": s.target.n_threads, "n_threads_batch": None,
                                                 "n_gpu_layers": load.n_gpu_layers, "n_batch": s.target.n_batch,
                                                 "extra_buffers": False, "flash_attn": s.target.flash_attn})
        assert key == expected
    finally:
        s.close()


def test_the_crash_is_named_with_what_fixes_it():
    note = amx_check.crash_note(Path("/x/model.gguf"))
    assert "model.gguf" in note and "CMAKE_ARGS=-DCMAKE_CXX_FLAGS=-fno-dse" in note
    assert f"llama-cpp-python=={metadata.version('llama_cpp_python')}" in note


def test_the_hardware_report_says_what_the_checks_of_this_build_found(monkeypatch, q8_tiny, tiny):
    from engine.models.hardware import hardware_report

    monkeypatch.setattr(llama_backend, "amx_compiled", lambda: True)
    assert "not tried yet" in hardware_report().amx
    _child(monkeypatch, SUCCEED)
    amx_check.check(tiny["target"])
    assert hardware_report().amx.startswith("llama.cpp's AMX kernels run in this build (checked on 1 model file(s))")
    _child(monkeypatch, CRASH)
    amx_check.check(q8_tiny)
    line = hardware_report().amx
    assert "crash in this build" in line and "(checked on tiny-q8.gguf)" in line and "-fno-dse" in line
    monkeypatch.setattr(llama_backend, "amx_compiled", lambda: False)  # no AMX kernels: nothing to say
    assert hardware_report().amx is None


def test_what_is_kept_reads_back_whole_and_the_store_keeps_the_newest(monkeypatch, q8_tiny, tiny, tmp_path):
    _child(monkeypatch, CRASH)
    amx_check.check(q8_tiny)
    assert amx_check.kept(q8_tiny) == amx_check.Check(AmxVerdict.CRASHES, "killed by SIGSEGV")
    _child(monkeypatch, SUCCEED)
    assert amx_check.check(tiny["target"]) == amx_check.Check(AmxVerdict.RUNS, "a batch decoded with repacking on")
    monkeypatch.setattr(amx_check, "MAX_ENTRIES", 3)
    files = []
    for i in range(4):
        f = tmp_path / f"m{i}.gguf"
        f.write_bytes(q8_tiny.read_bytes())
        files.append(f)
        amx_check.check(f)
    store = json.loads(amx_check.store_path().read_text(encoding="utf-8"))
    assert len(store) == 3 and amx_check.kept(files[0]) is None and all(amx_check.kept(f) for f in files[1:])
    assert not [p.name for p in amx_check.store_path().parent.iterdir() if p.name.startswith(".amx-check-")]  # no temp left


def test_the_installed_app_does_not_check(monkeypatch, q8_tiny):
    started = _child(monkeypatch, SUCCEED)
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # as PyInstaller's bundle sets it
    found = amx_check.check(q8_tiny)
    assert found == amx_check.Check(AmxVerdict.UNKNOWN, "not checked in the installed app") and started == []
    assert amx_check.kept(q8_tiny) is None


def test_a_build_is_known_by_the_library_files_of_the_installed_llama_cpp(monkeypatch):
    import llama_cpp

    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    lib = Path(llama_cpp.__file__).resolve().parent / "lib"
    ident = amx_check.build_identity()
    assert ident.startswith(f"{metadata.version('llama_cpp_python')}|{lib}|")
    cpu = next(f for f in sorted(lib.iterdir()) if f.name.startswith("libggml-cpu") and not f.is_symlink())
    assert f"{cpu.name}:{cpu.stat().st_size}:{cpu.stat().st_mtime_ns}" in ident.split("|")[2].split(",")
