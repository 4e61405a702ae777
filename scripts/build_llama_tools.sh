#!/usr/bin/env bash
# Build llama.cpp's own `llama-bench` and `llama-speculative-simple` from the SAME vendored
# llama.cpp as the installed llama-cpp-python, for head-to-head benchmarks
# (engine/frontends/native.py runs them). The draftless modes (`--spec-type ngram-simple`,
# `ngram-map-k`, `ngram-map-k4v`, `ngram-mod`, `ngram-cache`) are all in llama-speculative-simple.
#
#   scripts/build_llama_tools.sh [OUT_DIR]        (default: .native/ in the repository)
#
# CPU build, Release, llama.cpp's default CPU flags (GGML_NATIVE, i.e. -march=native), which is
# what `pip install llama-cpp-python` compiles when CMAKE_ARGS is unset. If the wheel was built
# with CMAKE_ARGS, export the same CMAKE_ARGS here. Compiling takes 12 CPU-minutes: about 7 minutes
# on 2 idle cores, 18.5 measured on 2 busy shared ones. Re-running after a change takes seconds.
#
# Environment: PYTHON (the interpreter whose llama-cpp-python to match; default .venv/bin/python),
# LLAMA_CPP_SDIST (a llama_cpp_python-X.tar.gz to use instead of `pip download`),
# JOBS (parallel compile jobs, default 2), CMAKE_ARGS (extra CMake flags).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:-$ROOT/.native}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
JOBS="${JOBS:-2}"
TOOLS=(llama-bench llama-speculative-simple)

start=$(date +%s)

VERSION="$("$PY" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')" || {
    echo "error: llama-cpp-python is not installed for $PY (set PYTHON=...)" >&2; exit 1; }
echo "==> llama-cpp-python $VERSION (from $PY)"

# 1. The sdist: it carries vendor/llama.cpp exactly as the wheel was compiled from.
SRC="$OUT/src"
mkdir -p "$SRC"
SDIST="${LLAMA_CPP_SDIST:-$SRC/llama_cpp_python-$VERSION.tar.gz}"
if [ ! -f "$SDIST" ]; then
    echo "==> Downloading the llama-cpp-python $VERSION source distribution"
    "$PY" -m pip download -q --no-deps --no-binary llama-cpp-python -d "$SRC" "llama-cpp-python==$VERSION"
    SDIST="$SRC/llama_cpp_python-$VERSION.tar.gz"
fi
LLAMA="$SRC/llama_cpp_python-$VERSION/vendor/llama.cpp"
if [ ! -f "$LLAMA/CMakeLists.txt" ]; then
    echo "==> Unpacking $SDIST"
    # All of it: vendor/llama.cpp's commit (printed by the tools) is read from the sdist's .git.
    tar -xzf "$SDIST" -C "$SRC"
fi

# llama-speculative-simple prints its reply and its summary through llama.cpp's asynchronous log,
# which is leaked, never flushed, at exit (see ggml-org/llama.cpp#22142): one run in six, under
# load, lost its last lines here. Flush it at exit; nothing else in llama.cpp is changed.
SPEC_MAIN="$LLAMA/examples/speculative-simple/speculative-simple.cpp"
if ! grep -q "common_log_flush" "$SPEC_MAIN"; then
    "$PY" - "$SPEC_MAIN" <<'PATCH'
import sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
anchor = "    common_init();\n"
if text.count(anchor) != 1:
    sys.exit(f"error: unexpected {path}: cannot add the log flush")
flush = "    std::atexit([] { common_log_flush(common_log_main()); }); // added by Draftlight's build script\n"
open(path, "w", encoding="utf-8").write(text.replace(anchor, anchor + flush))
PATCH
fi

# GCC 12's AMX header lets dead-store elimination drop ggml's tile configuration, and the AMX kernels
# then crash (engine/llama/amx_check.py): on an AMX CPU, build with -fno-dse, as scripts/install.sh
# does for llama-cpp-python, unless CMAKE_ARGS already sets the C++ flags.
amx_flags="$(bash "$ROOT/scripts/amx_cxx_flags.sh")"
[ -z "$amx_flags" ] || CMAKE_ARGS="${CMAKE_ARGS:-} $amx_flags"

# 2. Configure: static libraries, so the two binaries need nothing beside them.
BUILD="$OUT/build"
# SOURCE_DATE_EPOCH would switch GGML_NATIVE off (llama.cpp treats it as a reproducible build).
unset SOURCE_DATE_EPOCH
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags
cmake -S "$LLAMA" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF ${CMAKE_ARGS:-} >"$OUT/configure.log" 2>&1 || {
    tail -n 30 "$OUT/configure.log" >&2; echo "error: CMake configure failed (full log: $OUT/configure.log)" >&2; exit 1; }

# 3. Compile, politely: the machine may be shared.
echo "==> Compiling ${TOOLS[*]} with $JOBS jobs (log: $OUT/build.log)"
nice -n 10 cmake --build "$BUILD" --config Release -j "$JOBS" --target "${TOOLS[@]}" >"$OUT/build.log" 2>&1 || {
    tail -n 40 "$OUT/build.log" >&2; echo "error: build failed (full log: $OUT/build.log)" >&2; exit 1; }

for t in "${TOOLS[@]}"; do
    cp -f "$BUILD/bin/$t" "$OUT/$t"
done

# 4. Record what was built, beside the wheel's CPU features (none of the tools prints its own).
COMMIT="$(git -C "$LLAMA" rev-parse --short HEAD 2>/dev/null || echo unknown)"
WHEEL_FEATURES="$("$PY" -c 'import llama_cpp; print(llama_cpp.llama_print_system_info().decode())' 2>/dev/null || true)"
{
    echo "llama-cpp-python $VERSION, vendored llama.cpp $COMMIT"
    echo "cmake: -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF ${CMAKE_ARGS:-}"
    grep -o "CPU backend variant.*" "$OUT/configure.log" || true
    echo "wheel CPU features: ${WHEEL_FEATURES:-unknown}"
} >"$OUT/BUILD_INFO"
cat "$OUT/BUILD_INFO"

elapsed=$(( $(date +%s) - start ))
printf '==> Built %s in %dm%02ds\n' "${TOOLS[*]}" $((elapsed / 60)) $((elapsed % 60))
echo "    Use with: python -m engine bench --native $OUT"
