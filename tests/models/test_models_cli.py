"""`python -m engine models ...` as a person or a script runs it: real processes, real files, and a
real HTTP server on 127.0.0.1 in place of the Hugging Face hub."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fake_hub import FakeHub
from tiny_models import TinySpec, write_tiny_model
from tree import ROOT

LLAMA_3B = ("bartowski/Llama-3.2-3B-Instruct-GGUF", "Llama-3.2-3B-Instruct-Q4_K_M.gguf")
LLAMA_1B = ("bartowski/Llama-3.2-1B-Instruct-GGUF", "Llama-3.2-1B-Instruct-Q4_K_M.gguf")


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}  # DRAFTLIGHT_HOME comes from isolated_home


def models(*args: str, **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "models", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env(**extra_env), timeout=120)


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def test_verify_a_good_file_prints_a_summary(tiny):
    r = models("verify", str(tiny["target"]))
    assert r.returncode == 0 and r.stderr == ""
    assert "ok: tiny-target.gguf is a valid GGUF model" in r.stdout
    for line in ("architecture:  llama", "quantization:  F32", "context:       1,024", "vocabulary:    523 tokens",
                 "chat template: yes"):
        assert line in r.stdout
    j = json.loads(models("verify", "--json", "--sha256", str(tiny["drafter"])).stdout)
    assert j["name"] == "tiny-drafter" and j["layers"] == 2 and len(j["sha256"]) == 64


@pytest.mark.parametrize("case", ["truncated", "random", "missing", "directory"])
def test_verify_a_bad_file_exits_2_with_one_line(case, tiny, tmp_path):
    path = tmp_path / "bad.gguf"
    if case == "truncated":
        path.write_bytes(tiny["target"].read_bytes()[:400_000])
    elif case == "random":
        path.write_bytes(os.urandom(10_000))
    elif case == "directory":
        path.mkdir()
    line = one_error_line(models("verify", str(path)))
    expected = {"truncated": "bad.gguf is truncated", "random": "bad.gguf is not a GGUF model",
                "missing": "model file not found", "directory": "not a file"}[case]
    assert expected in line


def test_import_list_and_pair(tiny):
    for p in tiny.values():
        r = models("import", str(p))
        assert r.returncode == 0 and r.stdout.startswith("imported: "), r.stderr
    r = models("list")
    assert r.returncode == 0
    for name in ("tiny-target.gguf", "tiny-drafter.gguf", "tiny-other-vocab.gguf"):
        assert name in r.stdout
    listing = json.loads(models("list", "--json").stdout)
    assert {m["name"] for m in listing["models"]} == {"tiny-target", "tiny-drafter", "tiny-other-vocab"}
    assert all(m["source"] == "imported" for m in listing["models"]) and listing["partial_downloads"] == []

    r = models("pair", "tiny-target.gguf")  # a name in the model folder
    assert r.returncode == 0, r.stderr
    assert "ok       tiny-drafter.gguf" in r.stdout and "warning: tiny-drafter has" in r.stdout
    assert "no       tiny-other-vocab.gguf: token 261 differs" in r.stdout
    pairing = json.loads(models("pair", "--json", "tiny-target.gguf").stdout)
    assert [(o["drafter"]["name"], o["compatible"]) for o in pairing["options"]] == [
        ("tiny-drafter", True), ("tiny-other-vocab", False)]


def test_import_of_a_bad_file_is_refused(tmp_path):
    notes = tmp_path / "notes.gguf"
    notes.write_text("just text\n" * 100)
    assert "notes.gguf is not a GGUF model" in one_error_line(models("import", str(notes)))
    assert "no models installed" in models("list").stdout


def test_catalog_lists_every_pair():
    r = models("catalog")
    assert r.returncode == 0
    for pid in ("qwen2.5-coder-1.5b", "qwen2.5-coder-7b", "llama-3.2-3b", "llama-3.1-8b", "gemma-3-4b"):
        assert pid in r.stdout
    pairs = json.loads(models("catalog", "--json").stdout)
    assert len(pairs) >= 5 and all(p["target"]["installed"] is None for p in pairs)


def test_download_of_an_unknown_pair_names_the_known_ones():
    line = one_error_line(models("download", "no-such-pair"))
    assert "no pair 'no-such-pair' in the catalog (known: qwen2.5-coder-1.5b," in line


@pytest.fixture
def hub():
    h = FakeHub()
    yield h
    h.close()


def test_download_shows_progress_and_installs_the_pair(hub, tiny):
    hub.add(*LLAMA_3B, tiny["target"].read_bytes())
    hub.add(*LLAMA_1B, tiny["drafter"].read_bytes())
    r = models("download", "llama-3.2-3b", "--endpoint", hub.endpoint)
    assert r.returncode == 0, r.stderr
    assert f"{LLAMA_3B[1]}: " in r.stderr and "(100%)" in r.stderr  # progress goes to stderr
    assert r.stdout.splitlines()[0].endswith(LLAMA_3B[1])
    listing = json.loads(models("list", "--json").stdout)
    assert {m["source"] for m in listing["models"]} == {"catalog:llama-3.2-3b"}
    assert "[installed]" in models("catalog").stdout


def test_download_offline_is_one_clear_line(hub):
    line = one_error_line(models("download", "llama-3.2-3b", "--endpoint", hub.endpoint, HF_HUB_OFFLINE="1"))
    assert "offline mode is on" in line and hub.seen == []


def test_ctrl_c_cancels_cleanly_and_keeps_the_bytes(hub, tmp_path, isolated_home):
    big = write_tiny_model(tmp_path / "medium.gguf", TinySpec(name="m", n_embd=512, n_head=8, n_ff=1024, n_layer=3))
    hub.add(*LLAMA_3B, big.read_bytes())
    hub.knobs.stall_after = 12 * 1024 * 1024  # the transfer hangs after the first 10 MB chunk has been written
    proc = subprocess.Popen([sys.executable, "-m", "engine", "models", "download", "llama-3.2-3b", "--endpoint",
                             hub.endpoint], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=env())
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
    reader.start()
    try:
        def wait_for(text: str) -> None:
            while text not in lines.get(timeout=60):
                pass

        wait_for("MB / ")  # progress with megabytes on disk: the first chunk arrived
        proc.send_signal(signal.SIGINT)
        wait_for("cancelling")
        hub.knobs.release.set()  # bytes flow again; the next chunk meets the cancel
        code = proc.wait(timeout=60)
        assert code == 130, "".join(lines.get() for _ in range(lines.qsize()))
    finally:
        proc.kill()
    reader.join(timeout=60)  # every line the process wrote is in the queue before it is read
    rest = []
    while not lines.empty():
        rest.append(lines.get())
    assert any("download of Llama-3.2-3B-Instruct-Q4_K_M.gguf cancelled: " in line for line in rest), rest
    assert not any("Traceback" in line for line in rest)
    partial = list((isolated_home / "data" / "models" / ".partial").glob("*.part"))
    assert len(partial) == 1 and partial[0].stat().st_size >= 10 * 1024 * 1024
    assert "no models installed" in models("list").stdout


def test_hardware_reports_backends_and_estimates(tiny):
    r = models("hardware")
    assert r.returncode == 0 and "llama.cpp backends: " in r.stdout and "CPU threads: " in r.stdout
    j = json.loads(models("hardware", "--json", "--target", str(tiny["target"]), "--draft", str(tiny["drafter"]),
                          "--ctx", "512").stdout)
    assert "CPU" in j["backends"] and j["cpu_threads"] >= 1 and j["ram_total"] >= j["ram_available"] > 0
    assert j["estimate"]["fits"] and j["estimate"]["needed_bytes"] > 0
