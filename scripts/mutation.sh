#!/usr/bin/env bash
# Mutation testing: do the tests notice when the code changes? One command:
#
#   scripts/mutation.sh FILE... [-- TEST...]
#
# e.g. scripts/mutation.sh engine/sampling.py
#      scripts/mutation.sh engine/drafting/policy.py -- tests/engine/drafting/test_policy.py tests/engine/drafting/test_replay.py
#
# mutmut (3.x: pip install -e '.[mutation]') mutates each FILE (operators, constants, strings,
# arguments), runs the TESTs that reach the mutated function, and counts a mutant killed when a
# test fails. Without TESTs, a file's own tests are used (table below). It all happens in
# a scratch copy of the working tree ($MUTATION_DIR, default /tmp/draftlight-mutation), so the
# tree and pyproject.toml are untouched. Prints the score and every surviving mutant with its
# diff; `cd $MUTATION_DIR && python -m mutmut show NAME` shows one again. On 2 cores: about
# 4 minutes for sampling.py (368 mutants); much longer for a file whose tests include the
# sampled-distribution tests (35 s a run). MUTATION_JOBS sets the parallel workers; MUTANTS, globs
# over mutant names, mutates only what matches and scores that (the functions a change touched),
# e.g. MUTANTS='engine.drafting.base.xǁLookupDrafterǁfind__mutmut_*'.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-$here/.venv/bin/python}"
work="${MUTATION_DIR:-/tmp/draftlight-mutation}"
jobs="${MUTATION_JOBS:-$(nproc)}"

files=() tests=()
while (($#)); do
    if [ "$1" = "--" ]; then shift; tests=("$@"); break; fi
    files+=("$1"); shift
done
if [ ${#files[@]} -eq 0 ]; then
    sed -n '2,16p' "$0"; exit 2
fi
if [ ${#tests[@]} -eq 0 ]; then
    for f in "${files[@]}"; do
        case "$f" in
            engine/sampling.py) tests+=(tests/engine/decoding/test_exactness_sampling_rules.py tests/engine/decoding/test_sampling_oracle.py) ;;
            # the loop and the drafters: their own unit tests and the greedy edges first (fast), then
            # the sampled distributions (slow)
            engine/decoding/speculative.py)
                tests+=(tests/engine/decoding/test_mutation_kills_loop.py tests/engine/decoding/test_exactness_greedy.py tests/engine/decoding/test_loop_edges.py tests/engine/decoding/test_speculative_loop.py tests/engine/decoding/test_sampling_exactness.py) ;;
            engine/drafting/base.py)
                tests+=(tests/engine/drafting/test_mutation_kills_drafters.py tests/engine/decoding/test_exactness_greedy.py tests/engine/decoding/test_loop_edges.py tests/engine/decoding/test_speculative_loop.py tests/engine/drafting/test_history_index.py tests/engine/decoding/test_sampling_exactness.py) ;;
            engine/drafting/policy.py|engine/drafting/acceptance.py) tests+=(tests/engine/drafting/test_policy_units.py tests/engine/drafting/test_policy.py tests/engine/drafting/test_replay.py) ;;
            engine/decoding/verdict.py) tests+=(tests/engine/decoding/test_verdict.py tests/engine/decoding/test_control_rounds.py) ;;
            *) echo "no default tests for $f: name them after --" >&2; exit 2 ;;
        esac
    done
fi

# A scratch copy: tracked and untracked-but-not-ignored files, as they are now.
rm -rf "$work" && mkdir -p "$work"
(cd "$here" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work" 2>/dev/null || true)

toml_list() { local out="" x; for x in "$@"; do out+="\"$x\", "; done; echo "[${out%, }]"; }
cat >> "$work/pyproject.toml" <<TOML

[tool.mutmut]
source_paths = ["engine"]
# the recorded benchmark traces that tests/engine/drafting/test_replay.py replays
also_copy = ["resources/bench"]
only_mutate = $(toml_list "${files[@]}")
pytest_add_cli_args_test_selection = $(toml_list "${tests[@]}")
# the real model pair is slow to load and adds nothing the tiny models do not catch
pytest_add_cli_args = ["-q", "-x", "-p", "no:cacheprovider", "-k", "not real_target and not real_pair"]
use_git_change_detection = false
# workers fork from a server that never loaded a model: llama.cpp's threads do not survive a fork
process_isolation = "forkserver"
TOML

cd "$work"
start=$SECONDS
read -r -a only <<<"${MUTANTS:-}"
"$py" -m mutmut run --max-children "$jobs" "${only[@]}" >mutmut-run.log 2>&1 || { tail -30 mutmut-run.log; exit 1; }
"$py" - "$((SECONDS - start))" "${only[@]}" <<'PY'
import collections, fnmatch, subprocess, sys
mutmut = [sys.executable, "-m", "mutmut"]
globs = sys.argv[2:] or ["*"]
rows = [line.strip().rsplit(": ", 1) for line in
        subprocess.run([*mutmut, "results", "--all", "true"], capture_output=True, text=True).stdout.splitlines()]
status = {name: st for name, st in (r for r in rows if len(r) == 2) if any(fnmatch.fnmatch(name, g) for g in globs)}
n = collections.Counter(status.values())
killed = n["killed"] + n["timeout"]
tested = killed + n["survived"]
print(f"mutants: {len(status)}, killed {killed}, survived {n['survived']}, no tests {n['no tests']}, "
      f"not checked {n['not checked']}, score {100 * killed / max(tested, 1):.1f}% ({sys.argv[1]} s)")
for name in sorted(k for k, st in status.items() if st == "survived"):
    print(subprocess.run([*mutmut, "show", name], capture_output=True, text=True).stdout)
PY
