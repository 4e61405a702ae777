"""What the machine offers, and the memory a pair needs, from GGUF metadata before anything loads."""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.gguf_check import validate_gguf
from engine.models.hardware import (
    DeviceInfo,
    HardwareReport,
    estimate_pair_memory,
    hardware_report,
    kv_cache_bytes,
    model_memory,
)

MiB = 1024 * 1024


def test_the_report_describes_this_machine():
    rep = hardware_report()
    assert "CPU" in rep.backends and rep.devices and rep.cpu_threads >= 1
    assert 0 < rep.ram_available <= rep.ram_total
    assert rep.gpus or not rep.gpu_offload  # offload is only offered with a GPU to offload to
    load = rep.default_load(2048)
    assert load.n_ctx == 2048 and load.n_gpu_layers == (-1 if rep.gpu_offload else 0)


def test_kv_cache_follows_layers_context_and_kv_heads(tiny):
    info = validate_gguf(tiny["target"], read_tokens=False)
    # 3 layers x 4 KV heads x (16 + 16) key/value width x 2 bytes, per position
    assert kv_cache_bytes(info, 1024) == 1024 * 3 * 4 * 32 * 2
    assert kv_cache_bytes(info, 2048) == 2 * kv_cache_bytes(info, 1024)


def test_kv_cache_matches_what_llama_cpp_allocates_for_the_real_drafter(real_pair):
    # llama.cpp logs "llama_kv_cache: size = 48.00 MiB (4096 cells, 24 layers ...)" for this file at n_ctx 4096
    assert kv_cache_bytes(validate_gguf(real_pair[1], read_tokens=False), 4096) == 48 * MiB
    mm = model_memory(real_pair[1], 4096)
    # and "CPU compute buffer size = 300.25 MiB": the estimate stays within 10% of it
    assert abs((mm.compute - 64 * MiB) - 300.25 * MiB) < 30 * MiB


def _cpu_report(ram: int) -> HardwareReport:
    return HardwareReport(("CPU",), (DeviceInfo("CPU", "test cpu", "cpu", ram, ram),), False, 4, ram, ram)


def _gpu_report(vram: int, ram: int = 64 * 1024 * MiB) -> HardwareReport:
    gpu = DeviceInfo("CUDA0", "Test GPU", "gpu", vram, vram)
    return HardwareReport(("CUDA", "CPU"), (gpu,), True, 8, ram, ram)


def test_a_pair_that_fits_in_ram(tiny):
    est = estimate_pair_memory(tiny["target"], tiny["drafter"], 1024, report=_cpu_report(8 * 1024 * MiB))
    assert est.fits and est.where == "RAM" and est.vram_bytes == 0
    alone = estimate_pair_memory(tiny["target"], None, 1024, report=_cpu_report(8 * 1024 * MiB))
    assert est.needed_bytes > alone.needed_bytes > 0
    assert est.message.startswith("the pair needs about") and alone.message.startswith("the model needs about")


def test_a_pair_that_does_not_fit_is_flagged_before_loading(tiny):
    est = estimate_pair_memory(tiny["target"], tiny["drafter"], 1024, report=_cpu_report(64 * MiB))
    assert not est.fits and est.needed_bytes > est.available_bytes
    assert "only 0.1 GB is free" in est.message and "--ctx" in est.message


def test_a_longer_context_needs_more(tiny):
    rep = _cpu_report(8 * 1024 * MiB)
    short, long = (estimate_pair_memory(tiny["target"], tiny["drafter"], n, report=rep) for n in (512, 8192))
    assert long.needed_bytes - short.needed_bytes == (
        kv_cache_bytes(validate_gguf(tiny["target"]), 8192 - 512) + kv_cache_bytes(validate_gguf(tiny["drafter"]), 8192 - 512))


def test_offloaded_layers_count_against_the_gpu(tiny):
    rep = _gpu_report(vram=8 * 1024 * MiB)
    full = estimate_pair_memory(tiny["target"], tiny["drafter"], 1024, n_gpu_layers=-1, report=rep)
    assert full.fits and full.where == "Test GPU" and full.vram_bytes > 0 and full.ram_bytes == 0
    cpu = estimate_pair_memory(tiny["target"], tiny["drafter"], 1024, n_gpu_layers=0, report=rep)
    assert cpu.where == "RAM" and cpu.vram_bytes == 0
    split = estimate_pair_memory(tiny["target"], tiny["drafter"], 1024, n_gpu_layers=-1, draft_gpu_layers=0, report=rep)
    assert 0 < split.vram_bytes < full.vram_bytes and split.ram_bytes > 0


def test_a_gpu_too_small_says_to_offload_fewer_layers(tiny):
    est = estimate_pair_memory(tiny["target"], tiny["drafter"], 1024, report=_gpu_report(vram=16 * MiB))
    assert not est.fits and est.where == "Test GPU" and "--gpu-layers" in est.message


@pytest.mark.parametrize("n_ctx", [0, -1])
def test_context_zero_means_the_trained_length(tiny, n_ctx):
    rep = _cpu_report(8 * 1024 * MiB)
    assert estimate_pair_memory(tiny["target"], None, n_ctx, report=rep).needed_bytes == \
        estimate_pair_memory(tiny["target"], None, 1024, report=rep).needed_bytes


def test_no_gpu_offload_means_ram_even_when_layers_are_asked_for(tiny):
    rep = replace(_gpu_report(vram=8 * 1024 * MiB), gpu_offload=False)
    est = estimate_pair_memory(tiny["target"], None, 1024, n_gpu_layers=-1, report=rep)
    assert est.where == "RAM" and est.vram_bytes == 0


def test_the_report_says_threads_follow_the_load_and_how_flash_attention_is_set():
    """On a CPU with two or more threads: fewer while other programs keep cores busy, and the drafter
    without flash attention; with a GPU, or one thread, neither (texts written here)."""
    ram = 8 << 30
    cpu = HardwareReport(("CPU",), (DeviceInfo("CPU", "test cpu", "cpu", ram, ram),), False, 2, ram, ram,
                         drafter_flash_attn=False)
    assert cpu.threads_line.startswith("CPU threads: 2, fewer while other programs keep cores busy")
    assert cpu.attention_line.startswith("Flash attention: as llama.cpp chooses for the target; off for the drafter")
    assert cpu.summary()["drafter_flash_attn"] is False
    one = replace(cpu, cpu_threads=1)
    assert one.threads_line == "CPU threads: 1"
    gpu = HardwareReport(("CUDA", "CPU"), (), True, 8, ram, ram, drafter_flash_attn=None)
    assert gpu.threads_line == "CPU threads: 8" and gpu.attention_line == "Flash attention: as llama.cpp chooses"
