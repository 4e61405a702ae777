#!/usr/bin/env bash
# Does speculation pay on this GPU (or Mac, or CPU)? One run, no network, about 8 minutes on an H200:
#   1. build llama-cpp-python's vendored llama.cpp for this machine (CUDA for the card it finds,
#      Metal with --metal, plain CPU with --cpu) from .gpu/ (scripts/gpu_pack.sh makes it here);
#   2. write GGUF files of the default pair's exact tensor shapes and quantization types with
#      random weights (a decode's cost does not depend on the weights' values);
#   3. measure V(n), the target's cost to verify a block of n = 1..16 tokens, and the drafter's step;
#   4. replay the recorded acceptance traces through the real Auto policy under those costs;
#   5. time Draftlight's plain decoding against llama.cpp's own llama-bench on the same files.
# Report: OUT/gpu_check.md and OUT/gpu_check.json (scripts/gpu_check.py does steps 2-5).
#
#   bash scripts/gpu_check.sh --out DIR [--cpu | --metal] [--jobs N] [--reuse-build DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="" BACKEND=cuda JOBS="$(nproc 2>/dev/null || sysctl -n hw.ncpu)" REUSE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --out) OUT="$2"; shift 2 ;;
        --cpu) BACKEND=cpu; shift ;;
        --metal) BACKEND=metal; shift ;;
        --jobs) JOBS="$2"; shift 2 ;;
        --reuse-build) REUSE="$2"; shift 2 ;;  # an existing build folder (a rehearsal on this CPU)
        *) echo "usage: $0 --out DIR [--cpu|--metal] [--jobs N] [--reuse-build DIR]" >&2; exit 2 ;;
    esac
done
[ -n "$OUT" ] || { echo "error: --out DIR is required" >&2; exit 2; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PY="${PYTHON:-$(command -v python3)}"
PACK="$ROOT/.gpu"
[ -f "$PACK/llama-src.tar.gz" ] || { echo "error: $PACK/llama-src.tar.gz missing: run scripts/gpu_pack.sh first" >&2; exit 1; }
WORK="${GPU_CHECK_WORK:-/tmp/draftlight-gpu-check}"
mkdir -p "$WORK"
t0=$(date +%s)
stamp() { echo "==> [$(( $(date +%s) - t0 ))s] $*"; }

# Python packages that travel as wheels (the image has numpy, jinja2, markdown-it-py, ...).
stamp "installing $(ls "$PACK"/wheels/*.whl | wc -l) wheels"
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$PACK"/wheels/*.whl
VERSION="$(cat "$PACK/VERSION")"
SRC="$WORK/llama_cpp_python-$VERSION"
[ -d "$SRC" ] || tar -xzf "$PACK/llama-src.tar.gz" -C "$WORK"
LLAMA="$SRC/vendor/llama.cpp"

# 1. Build: shared libraries for the Python package, and llama-bench / llama-speculative-simple.
flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON
       -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF)
case "$BACKEND" in
    cuda)
        cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')"
        [ -n "$cap" ] || { echo "error: nvidia-smi found no GPU (use --cpu to rehearse)" >&2; exit 1; }
        flags+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cap")  # one architecture: the card's (Hopper: 90)
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader >"$OUT/device.txt" ;;
    metal) flags+=(-DGGML_METAL=ON) ;;
    cpu) flags+=(-DGGML_CUDA=OFF) ;;
esac
# On an AMX CPU, GCC 12 miscompiles ggml's AMX tile setup (engine/llama/amx_check.py): -fno-dse.
amx_flags="$(bash "$ROOT/scripts/amx_cxx_flags.sh")"
[ -z "$amx_flags" ] || flags+=("$amx_flags")
BUILD="${REUSE:-$WORK/build-$BACKEND}"
if [ -z "$REUSE" ]; then
    stamp "configuring llama.cpp ($BACKEND): ${flags[*]}"
    unset SOURCE_DATE_EPOCH
    cmake -S "$LLAMA" -B "$BUILD" "${flags[@]}" >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
    stamp "compiling with $JOBS jobs"
    cmake --build "$BUILD" --config Release -j "$JOBS" --target llama llama-bench llama-speculative-simple \
        >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    # The Python package loads libllama and libggml from its lib/ folder.
    rm -rf "$SRC/llama_cpp/lib"
    ln -s "$BUILD/bin" "$SRC/llama_cpp/lib"
    export PYTHONPATH="$SRC:$WORK/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
    stamp "reusing the build in $BUILD and the installed llama-cpp-python"
    export PYTHONPATH="$WORK/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
stamp "built; measuring"

# 2-5. Files, costs, replay, plain decoding against llama-bench.
PYTHONUNBUFFERED=1 "$PY" "$ROOT/scripts/gpu_check.py" --out "$OUT" --tools "$BUILD/bin" --work "$WORK" --backend "$BACKEND"
stamp "done: $OUT/gpu_check.md"
