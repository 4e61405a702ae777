#!/usr/bin/env bash
# Build Draftlight for macOS from a clean checkout: dist/Draftlight.app (PyInstaller, the BUNDLE in
# installers/draftlight.spec) in dist/Draftlight-<version>-macos-<arch>.dmg.
#
#   bash installers/macos/build.sh [--flavour metal|native] [--no-self-test]
#
# Flavour of llama.cpp (also DRAFTLIGHT_FLAVOUR=...); llama-cpp-python is compiled from source
# (Xcode command line tools and cmake needed):
#   metal   (default) GGML_METAL=on with the shaders embedded in the library, GGML_NATIVE=OFF so
#           the CPU code runs on every Apple Silicon Mac (M1 and later), not only the build
#           machine's chip. Models run on the GPU; the app's "GPU layers" setting 0 gives pure CPU.
#           (llama-cpp-python turns Metal on for every Apple build: there is no separate CPU flavour.)
#   native  llama-cpp-python's default build, reusing pip's wheel cache. Not for release.
# DRAFTLIGHT_CMAKE_ARGS replaces the flavour's CMake flags entirely.
#
# Other settings: PYTHON (>= 3.11, a python.org or Homebrew build; default python3), DRAFTLIGHT_VENV
# (default ~/Library/Caches/draftlight-build/venv-<flavour>-py3.X, kept between runs),
# DRAFTLIGHT_CODESIGN_IDENTITY (a "Developer ID Application: ..." identity: signs the .app with the
# hardened runtime; notarize the .dmg afterwards with `xcrun notarytool submit --wait` and staple
# it). Without it PyInstaller signs ad hoc: the app runs where it was built, and elsewhere after
# right-click > Open (Gatekeeper).
# The .app runs on the macOS version it was built on and newer (macos-14 in CI).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"

FLAVOUR="${DRAFTLIGHT_FLAVOUR:-metal}"
SELF_TEST=1
while [ $# -gt 0 ]; do
    case "$1" in
        --flavour) FLAVOUR="$2"; shift 2 ;;
        --flavour=*) FLAVOUR="${1#*=}"; shift ;;
        --no-self-test) SELF_TEST=0; shift ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

LLAMA_VERSION=0.3.36
case "$FLAVOUR" in
    metal) CMAKE_FLAGS="-DGGML_METAL=on -DGGML_METAL_EMBED_LIBRARY=on -DGGML_NATIVE=OFF" ;;
    native) CMAKE_FLAGS="" ;;
    *) echo "build.sh: flavour must be metal or native on macOS, not '$FLAVOUR'" >&2; exit 2 ;;
esac
CMAKE_FLAGS="${DRAFTLIGHT_CMAKE_ARGS:-$CMAKE_FLAGS}"

PYTHON="${PYTHON:-python3}"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "build.sh: $PYTHON is $("$PYTHON" --version 2>&1); Draftlight needs Python 3.11 or newer (set PYTHON=...)" >&2
    exit 2
}
VERSION="$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')"
ARCH="$(uname -m)"
NAME="Draftlight-$VERSION-macos-$ARCH"
echo "==> Draftlight $VERSION, flavour $FLAVOUR (CMAKE_ARGS='$CMAKE_FLAGS')"

# 1. A build environment of its own, kept between runs.
PYVER="$("$PYTHON" -c 'import sys; print(f"py{sys.version_info.major}.{sys.version_info.minor}")')"
VENV="${DRAFTLIGHT_VENV:-$HOME/Library/Caches/draftlight-build/venv-$FLAVOUR-$PYVER}"
mkdir -p "$(dirname "$VENV")"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$(cd "$VENV" && pwd)/bin/python"
"$PY" -m pip install -q --upgrade pip

# 2. llama-cpp-python in the chosen flavour; the stamp skips the compile when the flags are unchanged.
STAMP="$VENV/.llama-cpp-flags"
WANT="$LLAMA_VERSION $CMAKE_FLAGS"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    echo "==> Building llama-cpp-python $LLAMA_VERSION from source (several minutes)"
    if [ -z "$CMAKE_FLAGS" ]; then
        "$PY" -m pip install "llama-cpp-python==$LLAMA_VERSION"
    else
        "$PY" -m pip uninstall -q -y llama-cpp-python 2>/dev/null || true
        CMAKE_ARGS="$CMAKE_FLAGS" "$PY" -m pip install \
            --no-binary llama-cpp-python --no-cache-dir "llama-cpp-python==$LLAMA_VERSION"
    fi
    echo "$WANT" > "$STAMP"
fi

# 3. Draftlight and its dependencies, and PyInstaller.
"$PY" -m pip install -q "$ROOT" -r installers/requirements-build.txt

# 4. The build must be the flavour we asked for (metal: the MTL backend is there).
"$PY" installers/check_flavour.py "$FLAVOUR"

# 5. The .app.
echo "==> PyInstaller"
rm -rf dist/Draftlight dist/Draftlight.app
if [ -n "${DRAFTLIGHT_CODESIGN_IDENTITY:-}" ]; then
    export DRAFTLIGHT_CODESIGN_IDENTITY  # read by installers/draftlight.spec
fi
"$PY" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath dist --workpath build/pyinstaller installers/draftlight.spec

# 6. The bundle must work before it is packed.
if [ "$SELF_TEST" = 1 ]; then
    echo "==> Self-test of the bundle"
    env -u QT_QPA_PLATFORM dist/Draftlight.app/Contents/MacOS/Draftlight --self-test
fi

# 7. The disk image: the app and a link to /Applications to drag it onto.
STAGE="build/dmg/$NAME"
rm -rf "$STAGE"
mkdir -p "$STAGE"
cp -R dist/Draftlight.app "$STAGE/"
ln -s /Applications "$STAGE/Applications"
rm -f "dist/$NAME.dmg"
hdiutil create -volname "Draftlight $VERSION" -srcfolder "$STAGE" -fs HFS+ -format UDZO -ov "dist/$NAME.dmg"
echo "==> dist/$NAME.dmg ($(du -h "dist/$NAME.dmg" | cut -f1))"
