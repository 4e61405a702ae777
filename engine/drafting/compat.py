"""llama.cpp's rules for pairing a drafter with a target (common/speculative.cpp).

Same vocabulary type, same BOS/EOS use and ids, vocabulary sizes within 128, and identical
token text from id 5 up to the smaller vocabulary. The same rules run on a loaded model
(`LlamaModel`) or on file metadata alone (`engine.gguf_check.GGUFInfo`, no weights loaded).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.errors import IncompatiblePairError

MAX_VOCAB_SIZE_DIFFERENCE = 128
CHECK_START_TOKEN_ID = 5


@dataclass(frozen=True, slots=True)
class Vocab:
    """The facts compared, plus a way to read token text."""

    vocab_type: str
    n_vocab: int
    add_bos: bool
    add_eos: bool
    bos: int | None
    eos: int | None
    text: Callable[[int], str | bytes]


def incompatibilities(target: Vocab, draft: Vocab) -> list[str]:
    """Every rule the pair breaks, in words; an empty list means they pair."""
    why: list[str] = []
    if target.vocab_type != draft.vocab_type:
        why.append(f"vocabulary type differs (target {target.vocab_type}, drafter {draft.vocab_type})")
    if target.add_bos != draft.add_bos:
        why.append(f"BOS use differs (target adds BOS: {target.add_bos}, drafter: {draft.add_bos})")
    if target.add_eos != draft.add_eos:
        why.append(f"EOS use differs (target adds EOS: {target.add_eos}, drafter: {draft.add_eos})")
    if target.add_bos and target.bos != draft.bos:
        why.append(f"BOS token id differs (target {target.bos}, drafter {draft.bos})")
    if target.add_eos and target.eos != draft.eos:
        why.append(f"EOS token id differs (target {target.eos}, drafter {draft.eos})")
    diff = abs(target.n_vocab - draft.n_vocab)
    if diff > MAX_VOCAB_SIZE_DIFFERENCE:
        why.append(
            f"vocabulary sizes differ by {diff} (target {target.n_vocab}, drafter {draft.n_vocab}; at most "
            f"{MAX_VOCAB_SIZE_DIFFERENCE} allowed)"
        )
    if why:  # token text only matters once the basic facts agree
        return why
    for i in range(CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        a, b = target.text(i), draft.text(i)
        if a != b:
            why.append(f"token {i} differs (target {a!r}, drafter {b!r})")
            break
    return why


def check_pair(target: Vocab, draft: Vocab, target_name: str = "target", draft_name: str = "drafter") -> None:
    why = incompatibilities(target, draft)
    if why:
        raise IncompatiblePairError(f"{draft_name} cannot draft for {target_name}: " + "; ".join(why))


def vocab_of_model(model) -> Vocab:  # engine.llama.backend.LlamaModel
    f = model.vocab_facts()
    return Vocab(f.vocab_type, f.n_vocab, f.add_bos, f.add_eos, f.bos, f.eos, model.token_text)


_TOKENIZER_TYPES = {"llama": "spm", "gpt2": "bpe", "bert": "wpm", "t5": "ugm", "rwkv": "rwkv", "plamo2": "plamo2"}
# llama.cpp's defaults when a file does not say (llama-vocab.cpp).
_DEFAULT_ADD_BOS = {"spm": True, "bpe": False, "wpm": True, "ugm": False}
_DEFAULT_ADD_EOS = {"spm": False, "bpe": False, "wpm": False, "ugm": True}


def vocab_of_file(info) -> Vocab:  # engine.gguf_check.GGUFInfo, read with tokens
    m = info.metadata
    vtype = _TOKENIZER_TYPES.get(str(m.get("tokenizer.ggml.model", "none")), str(m.get("tokenizer.ggml.model")))
    tokens = info.tokens
    return Vocab(
        vocab_type=vtype,
        n_vocab=len(tokens),
        add_bos=bool(m.get("tokenizer.ggml.add_bos_token", _DEFAULT_ADD_BOS.get(vtype, False))),
        add_eos=bool(m.get("tokenizer.ggml.add_eos_token", _DEFAULT_ADD_EOS.get(vtype, False))),
        bos=m.get("tokenizer.ggml.bos_token_id"),
        eos=m.get("tokenizer.ggml.eos_token_id"),
        text=lambda i: tokens[i].encode("utf-8"),
    )
