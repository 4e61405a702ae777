"""Tiny, deterministic GGUF models that real llama.cpp loads in milliseconds.

They are real `llama`-architecture files written with ggml's own `gguf` writer: a
SentencePiece-style vocabulary (byte fallback, so any text tokenizes), a ChatML chat
template and random but seeded weights. The drafter is the target without its last
block, so it agrees with the target often but not always: the
tests see accepted drafts and corrections. `other-vocab` differs in token text.

Regenerate the copies bundled for `--self-test` with:
    python tests/tiny_models.py resources/test-models
"""
from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, TokenType

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: Qwen3's chat template as it treats thinking (tools left out): an assistant message's thinking comes
#: from its `reasoning_content` (or from tags in its content), and only turns after the last question
#: keep it; `enable_thinking=false` writes an empty thinking block into the generation prompt.
QWEN3_STYLE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}{%- endif %}"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}"
    "{%- for message in messages[::-1] %}{%- set index = (messages|length - 1) - loop.index0 %}"
    "{%- if ns.multi_step_tool and message.role == 'user' %}"
    "{%- set ns.multi_step_tool = false %}{%- set ns.last_query_index = index %}{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- set content = message.content if message.content is string else '' %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{%- set reasoning_content = '' %}"
    "{%- if message.reasoning_content is string %}{%- set reasoning_content = message.reasoning_content %}"
    "{%- elif '</think>' in content %}"
    "{%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\n') %}{%- endif %}"
    "{%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}"
    "{{- '<|im_start|>assistant\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}"
    "{%- else %}{{- '<|im_start|>assistant\n' + content }}{%- endif %}"
    "{{- '<|im_end|>\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %}"
    "{%- endif %}"
)
#: A template that always thinks (as Qwen3's thinking-only releases do): the generation prompt opens the
#: block, so the reply starts inside it and only the close tag comes.
THINKING_OPEN = QWEN3_STYLE.replace("{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}",
                                    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n<think>\n' }}")

_WORDS = (
    "the of and to in is that it for on with as was at by be this are from or have an not "
    "but they which one you were all we her she there can their what if will so about when "
    "def return class import self print for while None True False int str list dict "
    "hello world code model token draft target fast slow speculative decoding python"
).split()


@dataclass(frozen=True)
class TinySpec:
    """What a tiny model is made of."""

    n_layer: int = 3
    n_embd: int = 64
    n_head: int = 4
    n_ff: int = 128
    context_length: int = 1024
    seed: int = 1234
    #: how many leading blocks to take from `seed` before switching to `layer_seed`
    shared_layers: int = 99
    layer_seed: int = 0
    #: "upper" gives every word token other text: an incompatible vocabulary
    vocab_variant: str = "base"
    extra_tokens: int = 0
    bos_id: int = 1
    logit_scale: float = 2.5
    #: blocks from `quiet_from` on write only this share into the residual stream, so a drafter
    #: made of the first blocks agrees with the target most of the time
    quiet_from: int = 99
    quiet_scale: float = 1.0
    chat_template: str | None = CHATML
    #: writes the vocabulary arrays instead of the usual ones: (writer, tokens, scores, types) -> None
    #: (the validation tests write what a stranger's file might hold: repeated tokens, short arrays)
    vocab_writer: object = None
    name: str = "tiny"
    #: when >= 0, the end-of-sequence token's output row is this token's, a little stronger:
    #: wherever the model would say that token it ends the text instead
    eos_like: int = -1
    #: pieces added to the vocabulary (a tag split oddly, a piece holding a newline and more)
    extra_pieces: tuple[str, ...] = ()
    #: of them, those added as user-defined tokens (one token however the text around them reads,
    #: as Qwen3 writes <think> and </think>)
    user_pieces: tuple[str, ...] = ()
    #: a chain of pieces the model follows greedily, each to the next, the last to end-of-sequence
    #: (with `quiet_from=0, quiet_scale=0` the next token depends on the last one only): text
    #: written in a test. A piece may occur once (it has one successor).
    script: tuple[str, ...] = ()


def vocabulary(spec: TinySpec) -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL, TokenType.CONTROL]
    if spec.bos_id != 1:  # swap ids 1 and 2 so BOS/EOS ids differ from the base vocabulary
        tokens[1], tokens[2] = tokens[2], tokens[1]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [TokenType.BYTE] * 256
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789.,:;!?()[]{}=+-*/\"'#_<>")
    # SentencePiece merges pairs bottom-up, so every prefix of a word must be a token too.
    pieces += ["\u2581" + w[:i] for w in _WORDS for i in range(1, len(w) + 1)]
    pieces += ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    pieces += ["\u2581", "\n", "\u2581\u2581", "\u2581\u2581\u2581\u2581"]
    if spec.vocab_variant == "upper":
        pieces = [p.upper() if p.islower() or p[1:].islower() else p + "\u00b7" for p in pieces]
    pieces += [f"\u2581extra{i}" for i in range(spec.extra_tokens)]
    pieces += list(spec.extra_pieces) + list(spec.user_pieces)
    seen: set[str] = set(tokens)
    uniq = [p for p in pieces if not (p in seen or seen.add(p))]
    tokens += uniq
    types += [TokenType.USER_DEFINED if p in spec.user_pieces else TokenType.NORMAL for p in uniq]
    # SentencePiece merges by score: longer pieces first so words stay whole.
    scores = [0.0] * (5 + 256) + [float(len(p)) - i * 1e-4 for i, p in enumerate(uniq)]
    return tokens, scores, [int(t) for t in types]


def _follow(out: np.ndarray, embd: np.ndarray, chain: list[int]) -> None:
    """Each token of `chain` makes the next one the clear favourite: with blocks that write nothing the
    final norm sees the token's own embedding, so its direction added to the next token's output row
    gives that token about 4 * sqrt(n_embd) more logit, several times the random rows' spread."""
    if len(set(chain[:-1])) != len(chain) - 1:
        raise ValueError("a scripted piece may occur once: it has one successor")
    for a, b in zip(chain, chain[1:]):
        out[b] += 4.0 * embd[a] / np.linalg.norm(embd[a])


def scripted(name: str, script: Sequence[str], chat_template: str | None = None, extra_pieces: Sequence[str] = (),
             user_pieces: Sequence[str] = ()) -> TinySpec:
    """A model that writes `script` (vocabulary pieces; the first is the prompt's last token)."""
    return replace(BIGRAM, name=name, script=tuple(script), chat_template=chat_template,
                   extra_pieces=tuple(extra_pieces), user_pieces=tuple(user_pieces))


def write_tiny_model(path: Path, spec: TinySpec = TinySpec()) -> Path:
    tokens, scores, types = vocabulary(spec)
    n_vocab, d, ff = len(tokens), spec.n_embd, spec.n_ff
    base = np.random.default_rng(spec.seed)
    other = np.random.default_rng(spec.layer_seed)

    def mat(rng: np.random.Generator, rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    w = GGUFWriter(str(path), "llama")
    w.add_name(spec.name)
    w.add_context_length(spec.context_length)
    w.add_embedding_length(d)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head)
    w.add_rope_dimension_count(d // spec.n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(0)  # all F32
    w.add_tokenizer_model("llama")
    if spec.vocab_writer is not None:
        spec.vocab_writer(w, tokens, scores, types)
    else:
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
    w.add_bos_token_id(spec.bos_id)
    w.add_eos_token_id(2 if spec.bos_id == 1 else 1)
    w.add_unk_token_id(0)
    w.add_eot_token_id(4)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if spec.chat_template:
        w.add_chat_template(spec.chat_template)

    embd = mat(base, n_vocab, d, np.sqrt(d))
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    out = mat(base, n_vocab, d, spec.logit_scale)
    out[5 : 5 + 256] *= 0.3  # byte tokens: possible (UTF-8 paths get exercised) but rarer than words
    eos = 2 if spec.bos_id == 1 else 1
    if spec.eos_like >= 0:
        out[eos] = out[spec.eos_like] * 1.2
    if spec.script:
        _follow(out, embd, [tokens.index(p) for p in spec.script] + [eos])
    w.add_tensor("output.weight", out)
    for i in range(spec.n_layer):
        rng = base if i < spec.shared_layers else other
        blk = f"blk.{i}."
        w.add_tensor(blk + "attn_norm.weight", np.ones(d, dtype=np.float32))
        quiet = spec.quiet_scale if i >= spec.quiet_from else 1.0
        for name in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(blk + name + ".weight", mat(rng, d, d))
        w.add_tensor(blk + "attn_output.weight", mat(rng, d, d, quiet))
        w.add_tensor(blk + "ffn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(blk + "ffn_gate.weight", mat(rng, ff, d))
        w.add_tensor(blk + "ffn_up.weight", mat(rng, ff, d))
        w.add_tensor(blk + "ffn_down.weight", mat(rng, d, ff, 0.5 * quiet))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


#: Three blocks; the last one only nudges the residual stream.
TARGET = TinySpec(name="tiny-target", quiet_from=2, quiet_scale=0.3)
#: The target without its last block: cheaper, and right about 50-80% of the time, which is
#: what a drafter is.
DRAFTER = replace(TARGET, name="tiny-drafter", n_layer=2)
OTHER_VOCAB = replace(TARGET, name="tiny-other-vocab", vocab_variant="upper", seed=7)

STANDARD = {"target": TARGET, "drafter": DRAFTER, "other-vocab": OTHER_VOCAB}

#: Sharper logits (entropy ~1.6 nats a token instead of ~4): replies of many seeds share their
#: first tokens, so statistical tests can group them by prefix several positions deep.
SHARP_TARGET = replace(TARGET, name="tiny-sharp-target", logit_scale=5.0)
SHARP_DRAFTER = replace(SHARP_TARGET, name="tiny-sharp-drafter", n_layer=2)
SHARP = {"sharp-target": SHARP_TARGET, "sharp-drafter": SHARP_DRAFTER}
#: Blocks that write nothing into the residual stream: the next token depends on the last one
#: only, never on what came before it, so prompt lookup of the model's own text is always right.
BIGRAM = replace(SHARP_TARGET, name="tiny-bigram", quiet_from=0, quiet_scale=0.0)


def write_set(folder: Path, specs: dict[str, TinySpec]) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return {key: write_tiny_model(folder / f"tiny-{key}.gguf", spec) for key, spec in specs.items()}


def write_tiny_mamba(path: Path, seed: int = 5) -> Path:
    """A recurrent (Mamba) model: its state cannot be rolled back, so it cannot verify drafts."""
    tokens, scores, types = vocabulary(TARGET)
    n_vocab, d = len(tokens), 64
    d_inner, d_state, d_conv, dt_rank = 128, 8, 4, 4
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(np.float32)

    w = GGUFWriter(str(path), "mamba")
    w.add_name("tiny-mamba")
    w.add_context_length(1024)
    w.add_embedding_length(d)
    w.add_block_count(2)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(dt_rank)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML)
    w.add_tensor("token_embd.weight", mat(n_vocab, d, np.sqrt(d)))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("output.weight", mat(n_vocab, d, 2.5))
    for i in range(2):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(b + "ssm_in.weight", mat(2 * d_inner, d))
        w.add_tensor(b + "ssm_conv1d.weight", mat(d_inner, d_conv))
        w.add_tensor(b + "ssm_conv1d.bias", np.zeros(d_inner, np.float32))
        w.add_tensor(b + "ssm_x.weight", mat(dt_rank + 2 * d_state, d_inner))
        w.add_tensor(b + "ssm_dt.weight", mat(d_inner, dt_rank))
        w.add_tensor(b + "ssm_dt.bias", np.zeros(d_inner, np.float32))
        w.add_tensor(b + "ssm_a", -np.exp(rng.standard_normal((d_inner, d_state))).astype(np.float32))
        w.add_tensor(b + "ssm_d", np.ones(d_inner, np.float32))
        w.add_tensor(b + "ssm_out.weight", mat(d, d_inner, 0.5))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_standard_set(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return {key: write_tiny_model(folder / f"tiny-{key}.gguf", spec) for key, spec in STANDARD.items()}


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "resources/test-models")
    for key, p in write_standard_set(out).items():
        print(f"{key}: {p} ({p.stat().st_size} bytes)")
