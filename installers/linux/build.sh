#!/usr/bin/env bash
# Build Draftlight for Linux from a clean checkout: a PyInstaller one-folder bundle, packed as
# dist/Draftlight-<version>-linux-x86_64[-cuda].tar.gz with a .desktop file, the icon and install.sh.
#
#   bash installers/linux/build.sh [--flavour cpu|cuda|native] [--no-self-test]
#
# Flavour of llama.cpp (also DRAFTLIGHT_FLAVOUR=...); llama-cpp-python is compiled from source:
#   cpu     (default) portable x86-64: GGML_NATIVE=OFF with AVX, AVX2, FMA, F16C, BMI2 (x86-64-v3:
#           Intel Haswell 2013+, AMD Excavator/Zen 2015+). Never -march=native: a binary built that
#           way on a new CPU dies with SIGILL on an older one.
#   cuda    the cpu flags plus GGML_CUDA=on (needs the CUDA toolkit, nvcc on PATH). GGML_NATIVE=OFF
#           also makes ggml build its list of GPU architectures (Maxwell to Blackwell) instead of
#           only the build machine's GPU. The bundle needs the NVIDIA driver on the user's machine.
#   native  llama-cpp-python's default build (-march=native), reusing pip's wheel cache: quick,
#           but for this machine only. Not for release.
# DRAFTLIGHT_CMAKE_ARGS replaces the flavour's CMake flags entirely.
#
# Other settings: PYTHON (interpreter for the build venv, >= 3.11; default python3),
# DRAFTLIGHT_VENV (default ~/.cache/draftlight-build/venv-<flavour>-py3.X, outside the checkout and
# kept between runs and clones, so llama-cpp-python is only recompiled when its flags change;
# delete it to start from nothing).
#
# Build on the oldest distribution you want to support: the bundle carries its own Python, Qt and
# libraries, but needs a glibc at least as new as the build machine's (CI uses Ubuntu 22.04).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"

FLAVOUR="${DRAFTLIGHT_FLAVOUR:-cpu}"
SELF_TEST=1
while [ $# -gt 0 ]; do
    case "$1" in
        --flavour) FLAVOUR="$2"; shift 2 ;;
        --flavour=*) FLAVOUR="${1#*=}"; shift ;;
        --no-self-test) SELF_TEST=0; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

LLAMA_VERSION=0.3.36
PORTABLE_CPU="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
case "$FLAVOUR" in
    cpu) CMAKE_FLAGS="$PORTABLE_CPU"; SUFFIX="" ;;
    cuda) CMAKE_FLAGS="$PORTABLE_CPU -DGGML_CUDA=on"; SUFFIX="-cuda" ;;
    native) CMAKE_FLAGS=""; SUFFIX="-native" ;;
    *) echo "build.sh: flavour must be cpu, cuda or native, not '$FLAVOUR'" >&2; exit 2 ;;
esac
CMAKE_FLAGS="${DRAFTLIGHT_CMAKE_ARGS:-$CMAKE_FLAGS}"

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "build.sh: $PYTHON is $("$PYTHON" --version 2>&1); Draftlight needs Python 3.11 or newer (set PYTHON=...)" >&2
    exit 2
}
VERSION="$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
ARCH="$(uname -m)"
NAME="Draftlight-$VERSION-linux-$ARCH$SUFFIX"
echo "==> Draftlight $VERSION, flavour $FLAVOUR (CMAKE_ARGS='$CMAKE_FLAGS')"

# 1. A build environment of its own.
PYVER="$("$PYTHON" -c 'import sys; print(f"py{sys.version_info.major}.{sys.version_info.minor}")')"
VENV="${DRAFTLIGHT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/draftlight-build/venv-$FLAVOUR-$PYVER}"
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$(cd "$VENV" && pwd)/bin/python"
"$PY" -m pip install -q --upgrade pip

# 2. llama-cpp-python in the chosen flavour (compiles llama.cpp: minutes). The stamp records the
# flags it was built with, so a rerun with the same flags skips the compile.
STAMP="$VENV/.llama-cpp-flags"
WANT="$LLAMA_VERSION $CMAKE_FLAGS"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "==> Building llama-cpp-python $LLAMA_VERSION from source (several minutes)"
    if [ -z "$CMAKE_FLAGS" ]; then
        "$PY" -m pip install "llama-cpp-python==$LLAMA_VERSION"  # pip's cached wheel is fine here
    else
        # --no-cache-dir: never reuse a wheel that pip built earlier with other flags.
        "$PY" -m pip uninstall -q -y llama-cpp-python 2>/dev/null || true
        CMAKE_ARGS="$CMAKE_FLAGS" "$PY" -m pip install \
            --no-binary llama-cpp-python --no-cache-dir "llama-cpp-python==$LLAMA_VERSION"
    fi
    echo "$WANT" > "$STAMP"
fi

# 3. Draftlight and its dependencies (llama-cpp-python is already satisfied), and PyInstaller.
"$PY" -m pip install -q "$ROOT" -r installers/requirements-build.txt

# 4. The build must be the flavour we asked for (a portable CPU build reports no AVX-512 or AMX).
"$PY" installers/check_flavour.py "$FLAVOUR"

# 5. The bundle.
echo "==> PyInstaller"
rm -rf dist/Draftlight
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath dist --workpath build/pyinstaller installers/draftlight.spec
# The interpreter's own libraries from pyenv or python.org builds carry debug symbols (~25 MB).
# Only those: stripping numpy's OpenBLAS (patched by auditwheel) breaks it.
if command -v strip >/dev/null; then
    strip --strip-unneeded dist/Draftlight/_internal/libpython3*.so* \
        dist/Draftlight/_internal/python3*/lib-dynload/*.so 2>/dev/null || true
fi

# 6. The bundle must work before it is packed. A CUDA bundle needs the NVIDIA driver to start.
if [ "$SELF_TEST" = 1 ] && { [ "$FLAVOUR" != cuda ] || command -v nvidia-smi >/dev/null; }; then
    echo "==> Self-test of the bundle"
    env -u QT_QPA_PLATFORM dist/Draftlight/draftlight --self-test
fi

# 7. The tarball: the bundle, the menu entry, the icon, the installer.
STAGE="build/$NAME"
rm -rf "$STAGE"
mkdir -p "$STAGE"
cp -a dist/Draftlight "$STAGE/Draftlight"
cp installers/linux/draftlight.desktop resources/icons/draftlight.svg "$STAGE/"
cp resources/icons/draftlight-512.png "$STAGE/draftlight.png"
install -m 755 installers/linux/install.sh "$STAGE/install.sh"
cat > "$STAGE/README.txt" <<EOF
Draftlight $VERSION for Linux ($ARCH, llama.cpp flavour: $FLAVOUR)

Install for your user:   ./install.sh          (remove again: ./install.sh --uninstall)
Or run it in place:      ./Draftlight/draftlight
Check an installation:   draftlight --self-test

Models are not included: Draftlight offers to download a pair on first start, or imports a GGUF file.
EOF
tar -C build -czf "dist/$NAME.tar.gz" "$NAME"
echo "==> dist/$NAME.tar.gz ($(du -h "dist/$NAME.tar.gz" | cut -f1); bundle $(du -sh dist/Draftlight | cut -f1))"
