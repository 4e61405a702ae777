"""Steps 2-5 of scripts/gpu_check.sh: what speculation would give on this machine, measured in minutes.

    python scripts/gpu_check.py --out DIR --tools BUILD/bin [--work DIR] [--backend cuda|metal|cpu]

2. GGUF files of the default pair's exact tensor shapes and quantization types
   (resources/gpu/default_pair_shapes.json, read off the real files) with random weights: the
   cost of a decode does not depend on the weights' values. The quantized blocks hold random bits
   with their scales set small, so every value is finite.
3. V(n), the target scoring a block of n = 1..16 tokens with logits for every row (what verifying
   a draft costs), at a reply's depth in the context; the drafter's single step; its batched read.
4. Every recorded trace (resources/bench/traces.jsonl: one greedy reply per prompt, which tokens
   the 0.5B drafter and prompt lookup got right) replayed through the real Auto policy under those
   costs: predicted Auto / plain and Auto / best fixed k in hindsight, per category and drafter.
5. Draftlight's plain decoding (the engine's loop on the target file) against llama.cpp's own
   llama-bench tg on the same file, same offload, from the same depth.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = ROOT / "resources" / "gpu" / "default_pair_shapes.json"
TRACES = [ROOT / "resources" / "bench" / "zen5_traces.jsonl", ROOT / "resources" / "bench" / "chat_traces.jsonl"]
DEPTH = 256  # tokens already in the context when a reply's rounds are timed (a short chat)
SIZES = range(1, 17)
REPEATS = 7


# -- 2. the files ------------------------------------------------------------------------------------------
def _small_f16() -> bytes:
    return np.float16(0.002).tobytes()


def _random_blocks(qtype, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random quantized blocks of `qtype` whose fp16 scales are small and finite."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q

    _, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    scale = np.frombuffer(_small_f16(), dtype=np.uint8)
    # Where each block keeps its fp16 scale(s) (ggml-common.h).
    at = {Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q2_K: [size - 4, size - 2],
          Q.Q3_K: [size - 2], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [size - 2], Q.Q8_K: []}.get(qtype)
    if at is None:
        raise SystemExit(f"gpu_check: no block layout for {qtype.name}")
    for a in at:
        raw[:, a:a + 2] = scale
    if qtype == Q.Q8_K:  # an fp32 scale
        raw[:, 0:4] = np.frombuffer(np.float32(0.002).tobytes(), dtype=np.uint8)
    return raw


def write_model(role: str, spec: dict, path: Path, seed: int) -> Path:
    """A GGUF file with the spec's metadata and tensors (random weights) and a made-up vocabulary
    of the right size (llama.cpp's cost per token does not depend on the token texts)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter, TokenType

    rng = np.random.default_rng(seed)
    meta = spec["metadata"]
    w = GGUFWriter(str(path), meta["general.architecture"])
    for key, value in meta.items():
        if key == "general.architecture":
            continue
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
    w.add_name(f"gpu-check {role} (random weights, {spec['file']} shapes)")
    n_vocab = next(s[1] for name, s, _ in spec["tensors"] if name == "token_embd.weight")
    tokens = [f"<0x{i:02X}>" for i in range(256)] + [f"t{i}" for i in range(n_vocab - 259)] + ["<s>", "</s>", "<unk>"]
    types = [TokenType.BYTE] * 256 + [TokenType.NORMAL] * (n_vocab - 259) + [TokenType.CONTROL] * 3
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types(types)
    w.add_bos_token_id(n_vocab - 3)
    w.add_eos_token_id(n_vocab - 2)
    w.add_unk_token_id(n_vocab - 1)
    for name, shape, tname in spec["tensors"]:
        qtype = GGMLQuantizationType[tname]
        rows = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        if qtype == GGMLQuantizationType.F32:
            data = (np.ones if "norm" in name else rng.standard_normal)(tuple(reversed(shape))).astype(np.float32)
            if "norm" not in name:
                data *= 0.02
            w.add_tensor(name, data)
            continue
        block, size = GGML_QUANT_SIZES[qtype]
        per_row = shape[0] // block
        raw = _random_blocks(qtype, rows * per_row, rng).reshape(*reversed(shape[1:]), per_row * size)
        w.add_tensor(name, raw, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- 3. the costs ------------------------------------------------------------------------------------------
def _timed_blocks(model, sizes, repeats: int, depth: int) -> dict[int, float]:
    from engine.llama.types import Logits

    rng = np.random.default_rng(7)
    context = rng.integers(300, model.n_vocab - 10, size=depth).tolist()
    model.clear()
    model.decode(context, Logits.NONE)
    model.decode(context[:1], Logits.ALL)  # warm-up: the first pass of each shape allocates its graph
    model.truncate(depth)
    out = {}
    for n in sizes:
        block = rng.integers(300, model.n_vocab - 10, size=n).tolist()
        model.decode(block, Logits.ALL)  # warm-up for this size
        model.truncate(depth)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            model.decode(block, Logits.ALL)
            times.append(time.perf_counter() - t)
            model.truncate(depth)
        out[n] = statistics.median(times)
    return out


def measure(target: Path, drafter: Path, gpu_layers: int) -> dict:
    from engine.llama.backend import LlamaModel
    from engine.llama.types import LoadSettings

    load = LoadSettings(n_ctx=2048, n_gpu_layers=gpu_layers)
    t = LlamaModel(target, load)
    d = LlamaModel(drafter, load)
    try:
        verify = _timed_blocks(t, SIZES, REPEATS, DEPTH)
        draft = _timed_blocks(d, (1, 16, 64), REPEATS, DEPTH)
    finally:
        t.close()
        d.close()
    return {"verify_ms": {n: s * 1000 for n, s in verify.items()}, "draft_ms": draft[1] * 1000,
            "catchup_ms": {n: draft[n] * 1000 for n in (16, 64)}}


# -- 4. the replay -----------------------------------------------------------------------------------------
def replay(costs: dict) -> dict:
    from engine.decoding.replay import compare, load_traces, measured_profile

    profile = measured_profile("this machine", costs["verify_ms"], costs["draft_ms"], costs["catchup_ms"])
    rows: dict[tuple[str, str], list] = {}
    for path in TRACES:
        if not path.exists():
            continue
        _, traces = load_traces(path)
        for trace in traces:
            for drafter in ("model", "lookup", "lookup+model"):
                if drafter != "lookup" and not trace.model_match:
                    continue
                c = compare("this machine", profile, trace, drafter)
                rows.setdefault((trace.category, drafter), []).append(c)
                rows.setdefault(("all", drafter), []).append(c)

    def geomean(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    return {f"{cat} | {drafter}": {"traces": len(cs), "auto_vs_plain": geomean([c.vs_plain for c in cs]),
                                   "auto_vs_best_fixed": geomean([c.vs_best for c in cs]),
                                   "best_k_median": statistics.median(c.best_k for c in cs)}
            for (cat, drafter), cs in sorted(rows.items(), key=lambda kv: (kv[0][0] == "all", kv[0]))}


# -- 5. plain decoding against llama-bench -----------------------------------------------------------------
def plain_vs_llama_bench(target: Path, tools: Path, gpu_layers: int, n_gen: int = 128) -> dict:
    from engine.decoding.events import DoneEvent
    from engine.llama.types import LoadSettings
    from engine.decoding.session import GenerationSettings, Session
    from engine.frontends import native

    s = Session(target, None, target_load=LoadSettings(n_ctx=2048, n_gpu_layers=gpu_layers), calibrate=False)
    try:
        rng = np.random.default_rng(11)
        prompt = rng.integers(300, s.target.n_vocab - 10, size=DEPTH).tolist()
        rates = []
        for _ in range(3):
            s.reset_state()
            done = [e for e in s.generate_tokens(prompt, GenerationSettings(draft_max=0, max_tokens=n_gen))
                    if isinstance(e, DoneEvent)][0]
            rates.append(done.stats.tokens_per_s)
        engine_tps, threads, repack = statistics.median(rates), s.target.n_threads, s.target.extra_buffers
        flash_attn = s.target.flash_attn
    finally:
        s.close()
    try:
        rep = native.llama_bench(native.locate(tools), target, threads=threads, n_gen=n_gen, repeats=3,
                                 repack=repack, depth=DEPTH, flash_attn=flash_attn)
    except Exception as exc:  # noqa: BLE001 - reported, the rest of the check stands
        return {"engine_tokens_per_s": engine_tps, "llama_bench_error": str(exc)[-800:]}
    tg = rep.tg
    return {"engine_tokens_per_s": engine_tps, "llama_bench_tg": tg.tokens_per_s, "ratio": engine_tps / tg.tokens_per_s,
            "command": " ".join(Path(c).name if "/" in c else c for c in rep.command)}


# -- the report ----------------------------------------------------------------------------------------------
def device_text(backend: str) -> str:
    from engine.llama.backend import backends, devices

    parts = [f"backend {backend}", f"llama.cpp backends {', '.join(backends())}"]
    parts += [f"{d.description or d.name} ({d.kind}, {d.memory_total / 2**30:.0f} GiB)" for d in devices()]
    return "; ".join(parts) + f"; {platform.processor() or platform.machine()}"


def markdown(r: dict) -> str:
    v = r["costs"]["verify_ms"]
    lines = ["# Draftlight GPU check", "", f"- machine: {r['device']}", f"- files: {r['files']}",
             f"- depth: {DEPTH} tokens in the context; medians of {REPEATS} passes", f"- took {r['seconds']:.0f} s", "",
             "## What verifying a block costs", "",
             "| n | " + " | ".join(str(n) for n in SIZES) + " |", "|---|" + "---|" * len(SIZES),
             "| V(n) ms | " + " | ".join(f"{v[n]:.2f}" for n in SIZES) + " |",
             "| V(n) / V(1) | " + " | ".join(f"{v[n] / v[1]:.2f}" for n in SIZES) + " |", "",
             f"Drafter step: {r['costs']['draft_ms']:.2f} ms = {r['costs']['draft_ms'] / v[1]:.2f} of a target step; "
             f"reading 64 tokens: {r['costs']['catchup_ms'][64]:.1f} ms.", "",
             "## Auto, replayed on the recorded traces under these costs", "",
             "| category | drafter | traces | Auto / plain | Auto / best fixed k | best k (median) |",
             "|---|---|---|---|---|---|"]
    for key, row in r["replay"].items():
        cat, drafter = key.split(" | ")
        lines.append(f"| {cat} | {drafter} | {row['traces']} | {row['auto_vs_plain']:.2f}x | "
                     f"{row['auto_vs_best_fixed']:.2f}x | {row['best_k_median']:g} |")
    p = r["plain"]
    lines += ["", "## Plain decoding against llama.cpp's own llama-bench", ""]
    if "ratio" in p:
        lines.append(f"Draftlight plain decoding {p['engine_tokens_per_s']:.1f} tok/s, llama-bench tg "
                     f"{p['llama_bench_tg']:.1f} tok/s (`{p['command']}`): ratio {p['ratio']:.2f}.")
    else:
        lines.append(f"Draftlight plain decoding {p['engine_tokens_per_s']:.1f} tok/s; llama-bench failed: "
                     f"{p.get('llama_bench_error', '')}")
    lines += ["", "Predictions replay real acceptance (which tokens the drafter and prompt lookup got right on "
              "the bench's prompts) under the costs measured here; speed is what this machine's costs make of it."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tools", type=Path, required=True, help="folder with llama-bench")
    ap.add_argument("--work", type=Path, default=Path("/tmp/draftlight-gpu-check"))
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--gpu-layers", type=int, default=-1)
    args = ap.parse_args()
    t0 = time.perf_counter()
    spec = json.loads(SHAPES.read_text(encoding="utf-8"))
    args.work.mkdir(parents=True, exist_ok=True)
    files = {}
    for seed, role in enumerate(("target", "drafter")):
        path = args.work / f"gpu-check-{role}.gguf"
        if not path.exists():
            print(f"writing {path.name} ({spec[role]['file']} shapes)", flush=True)
            write_model(role, spec[role], path.with_suffix(".tmp"), seed).rename(path)
        files[role] = path
    gpu_layers = 0 if args.backend == "cpu" else args.gpu_layers
    print("measuring V(n) and the drafter", flush=True)
    costs = measure(files["target"], files["drafter"], gpu_layers)
    print("replaying the recorded traces", flush=True)
    predicted = replay(costs)
    print("plain decoding against llama-bench", flush=True)
    plain = plain_vs_llama_bench(files["target"], args.tools, gpu_layers)
    report = {"device": device_text(args.backend), "files": {k: spec[k]["file"] for k in files}, "costs": costs,
              "replay": predicted, "plain": plain, "seconds": time.perf_counter() - t0}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    (args.out / "gpu_check.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
