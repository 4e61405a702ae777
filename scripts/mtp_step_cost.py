"""What a Gemma 4 assistant's draft step costs against its target's passes, on random-weight files of E2B-like shapes.

    python scripts/mtp_step_cost.py OUT_DIR [--threads N] [--depth D] [--repeats R]

Writes (once) OUT_DIR/e2b-like-target.gguf and OUT_DIR/e2b-like-assistant.gguf, Q4_0 weights with random
nibbles and a small fixed scale (a pass's cost does not depend on the values), then times through the engine
(engine.llama.backend / engine.llama.mtp): the target's single-token step and its verification of 4 and 8
tokens at a depth of D tokens, and the assistant's draft step there. Prints one JSON line.

Shapes (Gemma 4 E2B's text decoder as its GGUF describes it, simplified): width 1536, 35 layers (4 sliding,
1 full, repeated), 8 query heads and 1 KV head of 256, FFN 6144, vocabulary 262,144; no per-layer
embeddings and no shared-KV layers (E2B has both: they add to the target's step, not the assistant's).
Assistant: width 256, 4 layers [3 sliding, 1 full], 8 query heads of 256, FFN 2048, the same vocabulary
(~77M parameters, as E2B's assistant).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VOCAB = 262_144
D, LAYERS, HEADS, KV_HEADS, HEAD, FF = 1536, 35, 8, 1, 256, 6144
DA, A_LAYERS, A_FF = 256, 4, 2048
QK = 32  # Q4_0 block: an f16 scale and 16 bytes of nibbles


def q4_0(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """rows x cols weights as Q4_0 bytes: scale 0.01, random nibbles."""
    blocks = rows * cols // QK
    out = np.empty((blocks, 18), dtype=np.uint8)
    out[:, :2] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    out[:, 2:] = rng.integers(0, 256, size=(blocks, 16), dtype=np.uint8)
    return out.reshape(rows, cols // QK * 18)


def _vocab(w: GGUFWriter) -> None:
    w.add_tokenizer_model("llama")
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(VOCAB - 3)])
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types([2, 3, 3] + [1] * (VOCAB - 3))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def _keys(w: GGUFWriter, arch: str, width: int, blocks: int, ff: int, pattern: list[bool]) -> None:
    w.add_uint32(f"{arch}.context_length", 8192)
    w.add_uint32(f"{arch}.embedding_length", width)
    w.add_uint32(f"{arch}.block_count", blocks)
    w.add_uint32(f"{arch}.feed_forward_length", ff)
    w.add_uint32(f"{arch}.attention.head_count", HEADS)
    w.add_uint32(f"{arch}.attention.head_count_kv", KV_HEADS)
    for key in ("key_length", "value_length", "key_length_swa", "value_length_swa"):
        w.add_uint32(f"{arch}.attention.{key}", HEAD)
    w.add_uint32(f"{arch}.attention.sliding_window", 512)
    w.add_array(f"{arch}.attention.sliding_window_pattern", pattern)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{arch}.rope.freq_base", 1_000_000.0)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10_000.0)
    w.add_file_type(2)  # Q4_0
    _vocab(w)


def _q(w: GGUFWriter, rng, name: str, rows: int, cols: int) -> None:
    w.add_tensor(name, q4_0(rng, rows, cols), raw_dtype=GGMLQuantizationType.Q4_0)


def _ones(w: GGUFWriter, name: str, n: int, value: float = 1.0) -> None:
    w.add_tensor(name, np.full(n, value, np.float32))


def write_target(path: Path, rng) -> None:
    w = GGUFWriter(str(path), "gemma4")
    w.add_name("e2b-like-target")
    _keys(w, "gemma4", D, LAYERS, FF, ([True] * 4 + [False]) * (LAYERS // 5))
    w.add_uint32("gemma4.embedding_length_per_layer_input", 0)
    _q(w, rng, "token_embd.weight", VOCAB, D)
    _ones(w, "output_norm.weight", D)
    _ones(w, "rope_freqs.weight", HEAD // 2)
    for i in range(LAYERS):
        b = f"blk.{i}."
        for name, rows, cols in (("attn_q", HEADS * HEAD, D), ("attn_k", KV_HEADS * HEAD, D), ("attn_v", KV_HEADS * HEAD, D),
                                 ("attn_output", D, HEADS * HEAD), ("ffn_gate", FF, D), ("ffn_up", FF, D), ("ffn_down", D, FF)):
            _q(w, rng, b + name + ".weight", rows, cols)
        for name, n in (("attn_norm", D), ("attn_q_norm", HEAD), ("attn_k_norm", HEAD), ("post_attention_norm", D),
                        ("ffn_norm", D), ("post_ffw_norm", D), ("layer_output_scale", 1)):
            _ones(w, b + name + ".weight", n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_assistant(path: Path, rng) -> None:
    w = GGUFWriter(str(path), "gemma4-assistant")
    w.add_name("e2b-like-assistant")
    _keys(w, "gemma4-assistant", DA, A_LAYERS, A_FF, [True] * (A_LAYERS - 1) + [False])
    w.add_uint32("gemma4-assistant.embedding_length_out", D)
    w.add_uint32("gemma4-assistant.nextn_predict_layers", A_LAYERS)
    _q(w, rng, "token_embd.weight", VOCAB, DA)
    _ones(w, "output_norm.weight", DA)
    _q(w, rng, "nextn.pre_projection.weight", DA, 2 * D)
    _q(w, rng, "nextn.post_projection.weight", D, DA)
    _ones(w, "rope_freqs.weight", HEAD // 2)
    for i in range(A_LAYERS):
        b = f"blk.{i}."
        for name, rows, cols in (("attn_q", HEADS * HEAD, DA), ("attn_output", DA, HEADS * HEAD), ("ffn_gate", A_FF, DA),
                                 ("ffn_up", A_FF, DA), ("ffn_down", DA, A_FF)):
            _q(w, rng, b + name + ".weight", rows, cols)
        for name, n in (("attn_norm", DA), ("attn_q_norm", HEAD), ("post_attention_norm", DA), ("ffn_norm", DA),
                        ("post_ffw_norm", DA), ("layer_output_scale", 1)):
            _ones(w, b + name + ".weight", n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    target_path, assistant_path = args.out / "e2b-like-target.gguf", args.out / "e2b-like-assistant.gguf"
    rng = np.random.default_rng(7)
    if not target_path.exists():
        write_target(target_path, rng)
    if not assistant_path.exists():
        write_assistant(assistant_path, rng)

    from engine.llama.backend import LlamaModel
    from engine.llama.mtp import Assistant
    from engine.llama.types import LoadSettings, Logits

    load = LoadSettings(n_ctx=args.depth + 64, n_threads=args.threads, n_threads_batch=args.threads)
    target = LlamaModel(target_path, load)
    assistant = Assistant(assistant_path, target, load)
    context = [int(t) for t in np.random.default_rng(1).integers(3, VOCAB, size=args.depth + 16)]
    target.decode(context[: args.depth], Logits.NONE)

    def verify(n: int):
        def run():
            target.truncate(args.depth)
            target.decode(context[args.depth : args.depth + n], Logits.ALL)
        return run

    out = {"threads": args.threads, "depth": args.depth,
           "target_step_s": _median(verify(1), args.repeats),
           "verify_4_s": _median(verify(4), args.repeats), "verify_8_s": _median(verify(8), args.repeats)}
    target.truncate(args.depth)
    target.decode([context[args.depth]], Logits.NONE)  # its hidden state at the last position, as after a round
    pos = args.depth + 1

    def step():
        assert assistant.target_state(pos - 1)
        assistant.step(context[pos], pos)
        assistant.forget_from(pos)

    out["assistant_step_s"] = _median(step, args.repeats * 4)
    out["assistant_step_per_target_step"] = out["assistant_step_s"] / out["target_step_s"]
    out["files_mb"] = {p.name: round(p.stat().st_size / 1e6, 1) for p in (target_path, assistant_path)}
    print(json.dumps(out))
    assistant.close()
    target.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
