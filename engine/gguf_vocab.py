"""What llama.cpp's vocabulary loader (llama-vocab.cpp, `llama_vocab::impl::load`) needs of a file's
tokenizer metadata, checked before it sees the file: where it would throw, the file can never load
(an import must refuse it); where it asserts, it aborts the whole process (two equal token texts).

Arrays are checked in place in the mapped file, never as Python lists: a crafted file's arrays
can hold tens of millions of entries.
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np
from gguf import GGUFValueType

from engine.errors import ModelFileError

#: Vocabularies of real models reach 262,144 tokens (Gemma 3); beyond this a count is damage.
MAX_VOCAB = 1_000_000
_NO_VOCAB = ("none", "no_vocab")
_INT_TYPES = (GGUFValueType.UINT8, GGUFValueType.INT8, GGUFValueType.UINT16, GGUFValueType.INT16,
              GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.UINT64, GGUFValueType.INT64)
_TYPE_NAMES = {t.value: t.name.lower() for t in GGUFValueType}


def _kind(entry: tuple[int, int, int, int]) -> str:
    vtype, etype, _count, _at = entry
    if vtype == GGUFValueType.ARRAY:
        return f"an array of {_TYPE_NAMES.get(etype, f'type {etype}')}"
    return f"a {_TYPE_NAMES.get(vtype, f'type {vtype}')}"


def check_vocab(name: str, buf: Any, meta: dict[str, Any], arrays: dict[str, tuple[int, int, int, int]]) -> None:
    """Raise ModelFileError for tokenizer metadata llama.cpp would refuse or abort on.

    `arrays`: per metadata key holding an array (and per other tokenizer key), (value type, element
    type, count, offset of the array's data) as the header walk found them."""
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise ModelFileError(f"{name} is not a usable model: it names no tokenizer (tokenizer.ggml.model)")
    if not isinstance(model, str):
        raise ModelFileError(f"{name} is damaged: tokenizer.ggml.model is {_kind(arrays[ 'tokenizer.ggml.model'])}, "
                             "not text")
    if model in _NO_VOCAB:
        return
    tokens = arrays.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ModelFileError(f"{name} is not a usable model: it has no token list (tokenizer.ggml.tokens)")
    if tokens[0] != GGUFValueType.ARRAY or tokens[1] != GGUFValueType.STRING:
        raise ModelFileError(f"{name} is damaged: its token list is {_kind(tokens)}, not an array of text")
    n_tokens = tokens[2]
    if not 1 <= n_tokens <= MAX_VOCAB:
        raise ModelFileError(f"{name} is damaged: its token list has {n_tokens:,} tokens")
    for key, allowed in (("tokenizer.ggml.scores", (GGUFValueType.FLOAT32, GGUFValueType.INT32)),
                         ("tokenizer.ggml.token_type", (GGUFValueType.INT32,))):
        entry = arrays.get(key)
        if entry is None:
            continue
        if entry[0] != GGUFValueType.ARRAY or entry[1] not in allowed:
            raise ModelFileError(f"{name} is damaged: {key} is {_kind(entry)}, which llama.cpp cannot read")
        if entry[2] < n_tokens:
            raise ModelFileError(f"{name} is damaged: {key} has {entry[2]:,} entries for {n_tokens:,} tokens")
    merges = arrays.get("tokenizer.ggml.merges")
    if merges is not None and (merges[0] != GGUFValueType.ARRAY or merges[1] != GGUFValueType.STRING):
        raise ModelFileError(f"{name} is damaged: tokenizer.ggml.merges is {_kind(merges)}, not an array of text")
    if model == "gpt2" and merges is None:
        raise ModelFileError(f"{name} is not a usable model: its BPE tokenizer has no merges (tokenizer.ggml.merges)")
    for key, value in meta.items():
        if key.startswith("tokenizer.ggml.") and key.endswith("_token_id"):
            entry = arrays.get(key)
            if entry is not None and entry[0] not in _INT_TYPES:
                raise ModelFileError(f"{name} is damaged: {key} is {_kind(entry)}, not a token id")
            if isinstance(value, int) and not 0 <= value < n_tokens:
                raise ModelFileError(f"{name} is damaged: {key} is {value:,}, outside its {n_tokens:,} tokens")
    _check_unique(name, buf, n_tokens, tokens[3])


def _texts(buf: Any, count: int, at: int):
    """(index, text bytes) of each token as llama.cpp names it: read as a C string, so up to its first NUL
    ('<\x00x35>' is '<', the same as the token '<'), and an empty one is '[EMPTY_i]'."""
    unpack = struct.unpack_from
    for i in range(count):
        (n,) = unpack("<Q", buf, at)
        text = bytes(buf[at + 8 : at + 8 + n]).split(b"\0", 1)[0]
        at += 8 + n
        yield i, text or f"[EMPTY_{i}]".encode()


def _check_unique(name: str, buf: Any, count: int, at: int) -> None:
    """Two tokens with the same text abort llama.cpp (GGML_ASSERT id_to_token.size() == token_to_id.size()).
    Hashes in a NumPy array (8 bytes a token), then the texts behind any repeated hash compared."""
    hashes = np.empty(count, dtype=np.int64)
    for i, text in _texts(buf, count, at):
        hashes[i] = hash(text)
    uniq, first, counts = np.unique(hashes, return_index=True, return_counts=True)
    if len(uniq) == count:
        return
    suspects = set(uniq[counts > 1].tolist())
    seen: dict[bytes, int] = {}
    for i, text in _texts(buf, count, at):
        if int(hashes[i]) in suspects:
            if text in seen:
                shown = text.decode("utf-8", "replace")[:40]
                raise ModelFileError(f"{name} is damaged: tokens {seen[text]:,} and {i:,} are both {shown!r} "
                                     "(llama.cpp needs every token text once)")
            seen[text] = i
