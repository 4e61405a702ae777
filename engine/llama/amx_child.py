"""The child process of engine.llama.amx_check: load a model file with weight repacking on and
decode a batch, as verification does, then one token. Exit 0 if it ran; a crash kills only this process."""
from __future__ import annotations

import sys

from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings, Logits


def main(argv: list[str]) -> int:
    model = LlamaModel(argv[0], LoadSettings(n_ctx=256, extra_buffers=True, n_gpu_layers=0))
    tokens = model.tokenize("def f(x):\n    return x * 2\n") or [0]
    model.decode((tokens * 8)[:8], Logits.ALL)
    model.decode(tokens[:1], Logits.LAST)
    model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
