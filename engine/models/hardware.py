"""What this machine offers (llama.cpp backends, devices, threads, memory) and whether a pair fits.

The estimate reads only GGUF metadata: weights (the tensors' bytes), the KV cache (f16 keys and
values for every layer and context position) and llama.cpp's compute buffer, which is dominated
by one batch of logits (n_batch x n_vocab floats: 300 MiB for a Qwen2.5 model at n_batch 512).
Offloaded layers count against the GPU's free memory, the rest against free RAM.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from engine.llama.threads import default_threads
from engine.gguf_check import GGUFInfo, validate_gguf

#: Fixed overhead per loaded model beyond the parts computed below (context, graph, scratch).
MODEL_OVERHEAD_BYTES = 64 * 1024 * 1024
#: Keep this share of memory free for the rest of the system and the app.
HEADROOM = 0.10
_KV_BYTES = 2  # f16
_GB = 1e9


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """A compute device llama.cpp can use."""

    name: str
    """Backend device name, e.g. "CUDA0", "Metal", "CPU"."""
    description: str
    """The hardware, e.g. "NVIDIA GeForce RTX 4070"."""
    kind: str
    """"cpu", "gpu", "igpu" or "accel"."""
    memory_free: int
    """Free memory in bytes, as the backend reports it."""
    memory_total: int
    """Total memory in bytes."""


@dataclass(frozen=True, slots=True)
class HardwareReport:
    """What this build of llama.cpp and this machine offer."""

    backends: tuple[str, ...]
    """Backends compiled into llama.cpp, e.g. ("CPU",) or ("CUDA", "CPU")."""
    devices: tuple[DeviceInfo, ...]
    """Compute devices, GPUs first as llama.cpp lists them."""
    gpu_offload: bool
    """Whether layers can be offloaded to a GPU (a CUDA, Metal or Vulkan build with a device)."""
    cpu_threads: int
    """CPU threads available to this process."""
    ram_total: int
    """Installed RAM in bytes."""
    ram_available: int
    """RAM available without swapping, in bytes."""
    amx: str | None = None
    """Where this build of llama.cpp has AMX kernels: whether they run here (engine.llama.amx_check)."""
    drafter_flash_attn: bool | None = None
    """Flash attention for drafters (llama_backend.drafter_flash_attn: off on a CPU; None: llama.cpp's choice)."""

    @property
    def threads_line(self) -> str:
        """The CPU threads, and that replies run on fewer while other programs take cores."""
        if self.gpu_offload or self.cpu_threads < 2:
            return f"CPU threads: {self.cpu_threads}"
        return (f"CPU threads: {self.cpu_threads}, fewer while other programs keep cores busy "
                "(llama.cpp's threads wait for each other: one taken away slows them all many times over)")

    @property
    def attention_line(self) -> str:
        if self.drafter_flash_attn is None:
            return "Flash attention: as llama.cpp chooses"
        return ("Flash attention: as llama.cpp chooses for the target; off for the drafter (on a CPU its kernel "
                "makes drafting deep in a long chat 2-3x dearer, and a drafter's numbers never change a reply)")

    @property
    def gpus(self) -> tuple[DeviceInfo, ...]:
        return tuple(d for d in self.devices if d.kind in ("gpu", "igpu"))

    def default_load(self, n_ctx: int = 4096):
        """LoadSettings with all layers on the GPU when there is one, none otherwise; every CPU thread."""
        from engine.llama.types import LoadSettings

        return LoadSettings(n_ctx=n_ctx, n_gpu_layers=-1 if self.gpu_offload else 0, n_threads=self.cpu_threads)

    def summary(self) -> dict:
        return {
            "backends": list(self.backends),
            "devices": [
                {"name": d.name, "description": d.description, "kind": d.kind,
                 "memory_free": d.memory_free, "memory_total": d.memory_total}
                for d in self.devices
            ],
            "gpu_offload": self.gpu_offload,
            "cpu_threads": self.cpu_threads,
            "ram_total": self.ram_total,
            "ram_available": self.ram_available,
            "amx": self.amx,
            "drafter_flash_attn": self.drafter_flash_attn,
        }


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """Whether a target (+ drafter) will fit, estimated before loading."""

    needed_bytes: int
    """Memory the pair needs where the binding limit is (see `where`)."""
    available_bytes: int
    """Memory free there."""
    where: str
    """"RAM", or the GPU's name when the pair is offloaded."""
    fits: bool
    """False when loading would probably fail or swap."""
    message: str
    """One line for a person: what it needs, what is free, what to change when it does not fit."""
    ram_bytes: int = 0
    """Part of the need in system RAM."""
    vram_bytes: int = 0
    """Part of the need on the GPU."""


# -- machine -------------------------------------------------------------------------------------
def cpu_threads() -> int:
    """Threads the engine uses by default (physical cores within affinity and quota)."""
    return default_threads()


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[key] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def _windows_memory() -> tuple[int, int] | None:
    class MemoryStatus(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                    ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                    ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                    ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                    ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]

    stat = MemoryStatus()
    stat.dwLength = ctypes.sizeof(MemoryStatus)
    if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(stat)):  # type: ignore[attr-defined]
        return int(stat.ullTotalPhys), int(stat.ullAvailPhys)
    return None


def _macos_available(page: int) -> int | None:
    """Free + inactive + speculative pages, as Activity Monitor counts them."""
    try:
        text = subprocess.run(["vm_stat"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    pages = 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Pages free", "Pages inactive", "Pages speculative"):
            pages += int(value.strip().rstrip(".") or 0)
    return pages * page if pages else None


def ram() -> tuple[int, int]:
    """(total, available) bytes: /proc/meminfo MemAvailable, else the OS's own count."""
    info = _meminfo()
    if "MemTotal" in info:
        return info["MemTotal"], info.get("MemAvailable", info.get("MemFree", info["MemTotal"]))
    if sys.platform == "win32":
        got = _windows_memory()
        if got:
            return got
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
    except (AttributeError, ValueError, OSError):
        return 0, 0
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * page
    except (AttributeError, ValueError, OSError):
        avail = (_macos_available(page) if sys.platform == "darwin" else None) or total
    return total, avail


def hardware_report() -> HardwareReport:
    from engine.llama import amx_check, backend as llama_backend

    devs = tuple(DeviceInfo(d.name, d.description, d.kind, d.memory_free, d.memory_total)
                 for d in llama_backend.devices())
    total, avail = ram()
    has_gpu = any(d.kind in ("gpu", "igpu") for d in devs)
    return HardwareReport(
        backends=tuple(llama_backend.backends()),
        devices=devs,
        gpu_offload=bool(llama_backend.supports_gpu_offload()) and has_gpu,
        cpu_threads=cpu_threads(),
        ram_total=total,
        ram_available=avail,
        amx=amx_check.for_this_build() if llama_backend.amx_compiled() else None,
        drafter_flash_attn=llama_backend.drafter_flash_attn(None, -1 if has_gpu else 0),
    )


# -- estimate ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ModelMemory:
    """Memory one model needs at a given context, split by where it lives."""

    weights: int
    """Bytes of tensor data."""
    kv_cache: int
    """Bytes of the f16 KV cache for n_ctx positions."""
    compute: int
    """llama.cpp's compute buffer (one batch of logits and activations) plus fixed overhead."""
    gpu_share: float
    """Share of the layers offloaded to the GPU (0..1)."""

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.compute


def _per_layer(value, n_layers: int) -> list[int]:
    if isinstance(value, tuple):  # one per layer
        return [int(v) for v in value][:n_layers] or [0] * n_layers
    return [int(value or 0)] * n_layers


def kv_cache_bytes(info: GGUFInfo, n_ctx: int) -> int:
    """2 (K and V) x layers x n_ctx x KV width x 2 bytes (f16); widths from the GGUF's attention keys."""
    m, arch = info.metadata, info.architecture
    n_layers = int(m.get(f"{arch}.block_count") or 0)
    n_embd = int(m.get(f"{arch}.embedding_length") or 0)
    heads = _per_layer(m.get(f"{arch}.attention.head_count", 0), n_layers)
    heads_kv = _per_layer(m.get(f"{arch}.attention.head_count_kv", m.get(f"{arch}.attention.head_count", 0)), n_layers)
    total = 0
    for h, h_kv in zip(heads, heads_kv):
        head_dim = n_embd // h if h else 0
        k_len = int(m.get(f"{arch}.attention.key_length") or head_dim)
        v_len = int(m.get(f"{arch}.attention.value_length") or head_dim)
        total += n_ctx * h_kv * (k_len + v_len) * _KV_BYTES
    return total


def model_memory(path: Path, n_ctx: int, n_gpu_layers: int = -1, n_batch: int = 512) -> ModelMemory:
    info = validate_gguf(path, read_tokens=False)
    m, arch = info.metadata, info.architecture
    if n_ctx <= 0:
        n_ctx = info.context_length or 4096
    n_layers = info.n_layers or 1
    n_ff = m.get(f"{arch}.feed_forward_length") or 0
    n_ff = max(n_ff) if isinstance(n_ff, tuple) else int(n_ff)
    weights = sum(nbytes for *_, nbytes in info.tensors)
    compute = n_batch * 4 * (info.vocab_size + n_ff) + MODEL_OVERHEAD_BYTES
    share = 1.0 if n_gpu_layers < 0 else min(n_gpu_layers, n_layers) / n_layers
    return ModelMemory(weights, kv_cache_bytes(info, n_ctx), compute, share)


def gigabytes(n: int) -> str:
    """Bytes as decimal gigabytes with one decimal, '2.5 GB': memory and file sizes read alike everywhere."""
    return f"{n / _GB:.1f} GB"


def estimate_pair_memory(target: Path, drafter: Path | None, n_ctx: int, n_gpu_layers: int = -1, *,
                         draft_gpu_layers: int | None = None, draft_n_ctx: int | None = None,
                         report: HardwareReport | None = None) -> MemoryEstimate:
    """Estimate what loading target (+ drafter) needs against free RAM, or free VRAM when offloading."""
    report = report or hardware_report()
    gpu = max(report.gpus, key=lambda d: d.memory_free, default=None) if report.gpu_offload else None
    specs = [(Path(target), n_ctx, n_gpu_layers)]
    if drafter is not None:
        specs.append((Path(drafter), draft_n_ctx or n_ctx,
                      n_gpu_layers if draft_gpu_layers is None else draft_gpu_layers))
    ram_need = vram_need = 0
    for path, ctx, ngl in specs:
        mm = model_memory(path, ctx, ngl if gpu is not None else 0)
        on_gpu = int((mm.weights + mm.kv_cache) * mm.gpu_share) + (mm.compute if mm.gpu_share > 0 else 0)
        vram_need += on_gpu
        ram_need += mm.total - on_gpu
    ram_free = int(report.ram_available * (1 - HEADROOM))
    what = "the pair" if drafter is not None else "the model"
    if gpu is not None and vram_need > 0:
        vram_free = int(gpu.memory_free * (1 - HEADROOM))
        fits = vram_need <= vram_free and ram_need <= ram_free
        where = gpu.description or gpu.name
        if fits:
            msg = f"{what} needs about {gigabytes(vram_need)} of {gigabytes(gpu.memory_free)} free on {where}"
            if ram_need:
                msg += f" and {gigabytes(ram_need)} of {gigabytes(report.ram_available)} free RAM"
        elif vram_need > vram_free:
            msg = (f"{what} needs about {gigabytes(vram_need)} on {where} but only {gigabytes(gpu.memory_free)} is free: "
                   f"offload fewer layers (--gpu-layers), shorten the context (--ctx) or pick a smaller pair")
        else:
            msg = (f"{what} needs about {gigabytes(ram_need)} of RAM besides the GPU but only "
                   f"{gigabytes(report.ram_available)} is free: close other programs or shorten the context (--ctx)")
        if fits or vram_need > vram_free:
            return MemoryEstimate(vram_need, gpu.memory_free, where, fits, msg, ram_need, vram_need)
        return MemoryEstimate(ram_need, report.ram_available, "RAM", fits, msg, ram_need, vram_need)
    fits = ram_need <= ram_free
    if fits:
        msg = f"{what} needs about {gigabytes(ram_need)} of {gigabytes(report.ram_available)} free RAM"
    else:
        msg = (f"{what} needs about {gigabytes(ram_need)} of RAM but only {gigabytes(report.ram_available)} is free: "
               f"shorten the context (--ctx), close other programs or pick a smaller pair")
    return MemoryEstimate(ram_need, report.ram_available, "RAM", fits, msg, ram_need, 0)
