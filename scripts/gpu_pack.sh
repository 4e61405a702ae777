#!/usr/bin/env bash
# Pack what scripts/gpu_check.sh needs on a machine with no network into .gpu/ (ignored by git,
# carried by the device tool; at most 64 MiB in all): llama-cpp-python's sdist cut down to its
# Python package and the vendored llama.cpp sources that build (no model vocabularies, docs,
# tests, web UI), and wheels of the pure-Python packages a stock CUDA image lacks.
#
#   scripts/gpu_pack.sh            then, on the GPU machine:  bash scripts/gpu_check.sh --out DIR
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
OUT="$ROOT/.gpu"
VERSION="$("$PY" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))')"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/draftlight/native-$VERSION/src"
mkdir -p "$OUT/wheels" "$CACHE"
SDIST="$CACHE/llama_cpp_python-$VERSION.tar.gz"
[ -f "$SDIST" ] || "$PY" -m pip download -q --no-deps --no-binary llama-cpp-python -d "$CACHE" "llama-cpp-python==$VERSION"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xzf "$SDIST" -C "$work"
src="llama_cpp_python-$VERSION"
v="$src/vendor/llama.cpp"
# What never builds: vocabularies, docs, media, tests, benches, the web UI and server (off in the build).
rm -rf "$work/$v"/{models,docs,media,tests,benches,.git,gguf-py,conversion} "$work/$v/tools/ui" "$work/$v/tools/server" \
    "$work/$src/.git" "$work/$src/examples" "$work/$src/docker" "$work/$v/tools/mtmd"/*.mp4
tar -czf "$OUT/llama-src.tar.gz" -C "$work" "$src"
echo "$VERSION" >"$OUT/VERSION"
# Pure-Python wheels the CUDA image does not have (numpy, jinja2, markdown-it-py... it has).
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUT/wheels" gguf diskcache platformdirs
du -sh "$OUT"/* | sed 's/^/  /'
total=$(du -sm "$OUT" | cut -f1)
[ "$total" -le 60 ] || { echo "error: .gpu/ is ${total} MB, over what the device tool carries" >&2; exit 1; }
echo "packed .gpu/ (${total} MB): llama-cpp-python $VERSION sources and $(ls "$OUT/wheels" | wc -l) wheels"
