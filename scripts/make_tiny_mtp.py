"""A tiny Gemma 4 target and its assistant (the MTP drafter that rides the target), for tests and demos.

    python scripts/make_tiny_mtp.py OUT_DIR

writes OUT_DIR/gemma4-target.gguf (architecture `gemma4`, width 64, 4 layers) and
OUT_DIR/gemma4-assistant.gguf (`gemma4-assistant`, width 32, 2 layers, no KV of its own: it reads the
target's). Both share the tests' SentencePiece vocabulary with byte tokens (tests/tiny_models.py) and a
ChatML template. Deterministic: the same seed writes the same bytes.

How the weights make the assistant "often but not always right": the target's blocks write little into
the residual stream (small post-norm weights), so its next token depends mostly on the last one: about
argmax(out . norm(embd[t])). The output rows live mostly in a 32-dimensional subspace R, plus a part
outside it; the assistant sees the last token through R (its pre-projection) and scores with out's part
inside R, so it agrees with the target where the outside part does not change the winner. Its two
blocks read the target's KV (the last sliding and the last full layer) and the target's hidden state,
which nudge it as the target's own blocks nudge the target.

Loader facts (llama.cpp as vendored by llama-cpp-python 0.3.36, src/models/gemma4*.cpp): the target's
layer pattern must end [sliding, full] (the assistant's sliding layers read layer n-2, its full ones
n-1); head counts and key lengths must match between the two; `embedding_length_out` (the target's
width) must differ from the assistant's width; `rope_freqs` is required once a full layer exists;
`embedding_length_per_layer_input` is required on the target even when 0; `layer_output_scale`
multiplies the whole residual (kept at 1); Gemma norms use their weights as they are.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from tiny_models import CHATML, TARGET, vocabulary  # noqa: E402  (the tests' vocabulary, one definition)

TARGET_ARCH, ASSISTANT_ARCH = "gemma4", "gemma4-assistant"


@dataclass(frozen=True, slots=True)
class MtpSpec:
    """What the tiny pair is made of."""

    seed: int = 4242
    n_embd: int = 64
    """Target width (the assistant's embedding_length_out)."""
    n_embd_assistant: int = 32
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    n_ff_assistant: int = 64
    context_length: int = 1024
    sliding_window: int = 256
    logit_scale: float = 3.0
    """Spread of the output rows: sharper logits, fewer near-ties between the two models."""
    outside: float = 0.15
    """Share of the output rows outside the assistant's subspace: more disagreement as it grows."""
    block_weight: float = 0.4
    """Post-norm weight of the target's blocks against a residual of RMS ~8: how much context matters."""
    assistant_block_weight: float = 0.3


def _mat(rng: np.random.Generator, rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)


def _common(w: GGUFWriter, arch: str, spec: MtpSpec, name: str, width: int, blocks: int, ff: int,
            pattern: list[bool]) -> None:
    tokens, scores, types = vocabulary(TARGET)
    w.add_name(name)
    w.add_uint32(f"{arch}.context_length", spec.context_length)
    w.add_uint32(f"{arch}.embedding_length", width)
    w.add_uint32(f"{arch}.block_count", blocks)
    w.add_uint32(f"{arch}.feed_forward_length", ff)
    w.add_uint32(f"{arch}.attention.head_count", spec.n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", spec.n_head_kv)
    for key in ("key_length", "value_length", "key_length_swa", "value_length_swa"):
        w.add_uint32(f"{arch}.attention.{key}", spec.head_dim)
    w.add_uint32(f"{arch}.attention.sliding_window", spec.sliding_window)
    w.add_array(f"{arch}.attention.sliding_window_pattern", pattern)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{arch}.rope.freq_base", 1_000_000.0)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10_000.0)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_eot_token_id(4)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML)


def _finish(w: GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def weights(spec: MtpSpec) -> dict[str, np.ndarray]:
    """The matrices both files are cut from: token embeddings, output rows, the shared subspace R."""
    n_vocab = len(vocabulary(TARGET)[0])
    rng = np.random.default_rng(spec.seed)
    d, da = spec.n_embd, spec.n_embd_assistant
    embd = rng.standard_normal((n_vocab, d)).astype(np.float32)
    r = np.linalg.qr(rng.standard_normal((d, da)))[0].T.astype(np.float32)  # (da, d), orthonormal rows
    inside = rng.standard_normal((n_vocab, da)) @ r  # rows within R's span
    outside = rng.standard_normal((n_vocab, d))
    outside -= (outside @ r.T) @ r  # and rows orthogonal to it
    out = (inside * (1 - spec.outside) + outside * spec.outside) * spec.logit_scale / np.sqrt(d)
    out[5:261] *= 0.3  # byte tokens: possible but rarer than words (as the tests' tiny models)
    return {"embd": embd, "out": out.astype(np.float32), "r": r, "rng": rng}


def write_target(path: Path, spec: MtpSpec, m: dict) -> Path:
    d, hd, ff = spec.n_embd, spec.head_dim, spec.n_ff
    rng = np.random.default_rng(spec.seed + 1)
    pattern = [True, False] * (spec.n_layer // 2)  # ends [sliding, full], as the assistant needs
    w = GGUFWriter(str(path), TARGET_ARCH)
    _common(w, TARGET_ARCH, spec, "tiny-gemma4-target", d, spec.n_layer, ff, pattern)
    w.add_uint32(f"{TARGET_ARCH}.embedding_length_per_layer_input", 0)
    w.add_tensor("token_embd.weight", m["embd"])
    w.add_tensor("output.weight", m["out"])
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("rope_freqs.weight", np.ones(hd // 2, np.float32))
    for i in range(spec.n_layer):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(b + "attn_q.weight", _mat(rng, spec.n_head * hd, d))
        w.add_tensor(b + "attn_k.weight", _mat(rng, spec.n_head_kv * hd, d))
        w.add_tensor(b + "attn_v.weight", _mat(rng, spec.n_head_kv * hd, d))
        w.add_tensor(b + "attn_output.weight", _mat(rng, d, spec.n_head * hd))
        w.add_tensor(b + "attn_q_norm.weight", np.ones(hd, np.float32))
        w.add_tensor(b + "attn_k_norm.weight", np.ones(hd, np.float32))
        w.add_tensor(b + "post_attention_norm.weight", np.full(d, spec.block_weight, np.float32))
        w.add_tensor(b + "layer_output_scale.weight", np.ones(1, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(b + "ffn_gate.weight", _mat(rng, ff, d))
        w.add_tensor(b + "ffn_up.weight", _mat(rng, ff, d))
        w.add_tensor(b + "ffn_down.weight", _mat(rng, d, ff))
        w.add_tensor(b + "post_ffw_norm.weight", np.full(d, spec.block_weight, np.float32))
    _finish(w)
    return path


def write_assistant(path: Path, spec: MtpSpec, m: dict) -> Path:
    d, da, hd, ff = spec.n_embd, spec.n_embd_assistant, spec.head_dim, spec.n_ff_assistant
    rng = np.random.default_rng(spec.seed + 2)
    w = GGUFWriter(str(path), ASSISTANT_ARCH)
    _common(w, ASSISTANT_ARCH, spec, "tiny-gemma4-assistant", da, 2, ff, [True, False])
    w.add_uint32(f"{ASSISTANT_ARCH}.embedding_length_out", d)
    w.add_uint32(f"{ASSISTANT_ARCH}.nextn_predict_layers", 2)
    r = m["r"]
    # Its LM head (tied to token_embd): the output rows' part inside R, read in R's coordinates.
    w.add_tensor("token_embd.weight", (m["out"] @ r.T).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(da, np.float32))
    # [scaled token embedding ; target hidden state] -> R's coordinates of the token, a little of the state.
    pre = np.concatenate([r, 0.15 * _mat(rng, da, d, np.sqrt(d))], axis=1)
    w.add_tensor("nextn.pre_projection.weight", pre.astype(np.float32))
    w.add_tensor("nextn.post_projection.weight", np.ascontiguousarray(r.T * np.sqrt(d / da)).astype(np.float32))
    w.add_tensor("rope_freqs.weight", np.ones(hd // 2, np.float32))
    for i in range(2):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(da, np.float32))
        w.add_tensor(b + "attn_q.weight", _mat(rng, spec.n_head * hd, da))
        w.add_tensor(b + "attn_output.weight", _mat(rng, da, spec.n_head * hd))
        w.add_tensor(b + "attn_q_norm.weight", np.ones(hd, np.float32))
        w.add_tensor(b + "post_attention_norm.weight", np.full(da, spec.assistant_block_weight, np.float32))
        w.add_tensor(b + "layer_output_scale.weight", np.ones(1, np.float32))
        w.add_tensor(b + "ffn_norm.weight", np.ones(da, np.float32))
        w.add_tensor(b + "ffn_gate.weight", _mat(rng, ff, da))
        w.add_tensor(b + "ffn_up.weight", _mat(rng, ff, da))
        w.add_tensor(b + "ffn_down.weight", _mat(rng, da, ff))
        w.add_tensor(b + "post_ffw_norm.weight", np.full(da, spec.assistant_block_weight, np.float32))
    _finish(w)
    return path


def write_pair(folder: Path, spec: MtpSpec = MtpSpec()) -> tuple[Path, Path]:
    """(target, assistant) written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    m = weights(spec)
    return (write_target(folder / "gemma4-target.gguf", spec, m),
            write_assistant(folder / "gemma4-assistant.gguf", spec, m))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    for p in write_pair(Path(argv[0])):
        print(f"{p} ({p.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
