"""Refuse to bundle a llama.cpp build that is not the flavour asked for (used by the build scripts).

    python installers/check_flavour.py cpu|cuda|metal|native

cpu and cuda must be portable: no AVX-512, AVX-VNNI or AMX compiled in (those mean -march=native on
the build machine, and SIGILL on the user's older CPU). cuda must have the CUDA backend, metal Metal.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's engine
from engine.llama import backend as llama_backend  # noqa: E402

NOT_PORTABLE = ("AVX512", "AVX_VNNI", "AMX_INT8")
NEEDS_BACKEND = {"cuda": "CUDA", "metal": "MTL"}


def main(flavour: str) -> int:
    info, backends = llama_backend.system_info().strip(), llama_backend.backends()
    print(f"==> llama.cpp backends {backends}: {info}")
    native = [k for k in NOT_PORTABLE if f"{k} = 1" in info]
    if flavour in ("cpu", "cuda") and native:
        print(f"check_flavour: llama.cpp was compiled for the build machine's CPU ({', '.join(native)} on): "
              "not portable; build with GGML_NATIVE=OFF", file=sys.stderr)
        return 1
    want = NEEDS_BACKEND.get(flavour)
    if want and not any(b.upper().startswith(want) for b in backends):
        print(f"check_flavour: the {flavour} flavour has no {want} backend (backends: {backends}): "
              "is the toolkit installed and CMAKE_ARGS passed?", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "cpu"))
