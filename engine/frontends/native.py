"""llama.cpp's own tools, run as processes, for head-to-head numbers on the same flags.

`llama-bench` gives plain decoding (tg) and prompt (pp) speed; `llama-speculative-simple` runs
llama.cpp's speculative decoding with a draft model (`draft-simple`) or one of its draftless
n-gram types. Both are built by scripts/build_llama_tools.sh from the same vendored llama.cpp as
the installed llama-cpp-python. Nothing here imports llama_cpp: a tool that crashes (AMX weight
repacking segfaults on batched Q4_K decodes, ggml-org/llama.cpp#20824) is reported, not shared.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.assistant_fit import is_assistant
from engine.errors import EngineError
from engine.gguf_check import validate_gguf

BUILD_SCRIPT = "scripts/build_llama_tools.sh"
BENCH = "llama-bench"
SPECULATIVE = "llama-speculative-simple"
DRAFT_SIMPLE = "draft-simple"
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
#: A drafter that rides the target (`-md` a Gemma 4 assistant): it reads the target's hidden state and KV cache.
DRAFT_MTP = "draft-mtp"
SPEC_TYPES = (DRAFT_SIMPLE, DRAFT_MTP, *NGRAM_TYPES)
#: Each type's own flag for its longest draft, and llama.cpp's default for it (common/common.h).
#: ngram-cache has no flag: it always drafts up to 8 tokens (common/speculative.cpp).
_DRAFT_MAX_FLAGS = {
    DRAFT_SIMPLE: ("--spec-draft-n-max", 3),
    DRAFT_MTP: ("--spec-draft-n-max", 3),
    "ngram-simple": ("--spec-ngram-simple-size-m", 48),
    "ngram-map-k": ("--spec-ngram-map-k-size-m", 48),
    "ngram-map-k4v": ("--spec-ngram-map-k4v-size-m", 48),
    "ngram-mod": ("--spec-ngram-mod-n-max", 64),
    "ngram-cache": (None, 8),
}
_NGRAM_MOD_N_MIN = 48
_STDERR_TAIL = 1500


@dataclass(frozen=True, slots=True)
class NativeTools:
    """Where llama.cpp's tools are."""

    folder: Path
    """The folder given to `locate`."""
    bench: Path
    """The `llama-bench` executable."""
    speculative: Path
    """The `llama-speculative-simple` executable."""


@dataclass(frozen=True, slots=True)
class BenchTest:
    """One llama-bench test: text generation (tg) or prompt processing (pp)."""

    kind: str
    """"tg" or "pp"."""
    n_tokens: int
    """Tokens generated (tg) or read (pp) per repetition."""
    tokens_per_s: float
    """Mean over the repetitions, as llama-bench reports it."""
    stddev: float
    """Standard deviation of tokens/s over the repetitions."""
    samples: tuple[float, ...]
    """Tokens/s of each repetition."""
    depth: int = 0
    """Tokens already in the context when the test starts (llama-bench -d)."""


@dataclass(frozen=True, slots=True)
class BenchReport:
    """What `llama-bench` measured for one model."""

    model: Path
    threads: int
    repack: bool
    """Whether weight repacking was on."""
    tests: tuple[BenchTest, ...]
    build: str
    """llama.cpp's commit and build number, from the tool."""
    command: tuple[str, ...]
    """The command line that ran."""

    def test(self, kind: str) -> BenchTest | None:
        return next((t for t in self.tests if t.kind == kind), None)

    @property
    def tg(self) -> BenchTest | None:
        return self.test("tg")

    @property
    def pp(self) -> BenchTest | None:
        return self.test("pp")


@dataclass(frozen=True, slots=True)
class SpecResult:
    """What one `llama-speculative-simple` run reported."""

    spec_type: str
    """"draft-simple" or an "ngram-*" type."""
    draft_max: int
    """Longest draft the type was allowed (its own flag, or llama.cpp's default for it)."""
    n_prompt: int
    """Prompt tokens llama.cpp read ("encoded")."""
    n_decoded: int
    """Tokens generated ("decoded"). llama.cpp stops once it holds MORE than n_predict, and its
    last drafts are not cut to fit, so this is n_predict + 1 up to n_predict + 1 + draft_max
    (fewer at an end-of-generation token; a round's tokens after that token still count)."""
    decode_seconds: float
    """Generation time, prompt excluded."""
    tokens_per_s: float
    """n_decoded / decode_seconds, as llama.cpp prints it."""
    n_drafted: int
    """Draft tokens proposed and verified."""
    n_accepted: int
    """Draft tokens the target accepted."""
    text: str | None
    """The generated text (the tool echoes the prompt first; None when the echo is not found)."""
    command: tuple[str, ...]
    """The command line that ran (the prompt file is a temporary copy, gone afterwards)."""
    rounds: tuple[tuple[int, int], ...] = ()
    """Per round, (draft tokens kept, drafted), plain rounds as (0, 0): where the tool ran with --verbose, whose
    debug log says them; else empty."""

    @property
    def acceptance(self) -> float | None:
        """Share of drafted tokens accepted; None when nothing was drafted."""
        return self.n_accepted / self.n_drafted if self.n_drafted else None


# -- finding the tools ---------------------------------------------------------------------------
def default_dir() -> Path:
    """$DRAFTLIGHT_NATIVE_DIR, else .native/ in the repository (the build script's default)."""
    env = os.environ.get("DRAFTLIGHT_NATIVE_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".native"


def locate(folder: str | Path | None = None) -> NativeTools:
    """The tools in `folder` (default: `default_dir()`), or an EngineError saying how to build them."""
    folder = Path(folder) if folder is not None else default_dir()
    found, missing = {}, []
    for name in (BENCH, SPECULATIVE):
        exe = _executable(folder, name)
        if exe is None:
            missing.append(name)
        found[name] = exe
    if missing:
        raise EngineError(
            f"{' and '.join(missing)} not found in {folder}: build them with `{BUILD_SCRIPT} {folder}` "
            "(12 CPU-minutes: 7-20 minutes on 2 cores)"
        )
    return NativeTools(folder, found[BENCH], found[SPECULATIVE])


def _executable(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.exe"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX (Linux reports it in /proc/cpuinfo; other systems: assumed not)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return "amx_int8" in line.split()
    except OSError:
        pass
    return False


def default_repack() -> bool:
    """Repacking on, except on AMX CPUs, as the engine loads its models (DRAFTLIGHT_ALLOW_AMX=1 forces it on)."""
    return os.environ.get("DRAFTLIGHT_ALLOW_AMX") == "1" or not cpu_has_amx()


def flash_attn_flag(flash_attn: bool | None) -> str:
    """llama.cpp's tools' -fa value for a model loaded with `flash_attn` (None: llama.cpp's own choice)."""
    return "auto" if flash_attn is None else "on" if flash_attn else "off"


# -- llama-bench -----------------------------------------------------------------------------------
def llama_bench(
    tools: NativeTools,
    model: str | Path,
    *,
    threads: int,
    n_gen: int = 64,
    n_prompt: int = 0,
    repeats: int = 2,
    repack: bool | None = None,
    timeout: float = 1800,
    depth: int = 0,
    flash_attn: bool | None = None,
) -> BenchReport:
    """Plain decoding speed (tg, `n_gen` tokens) and, when `n_prompt` > 0, prompt speed (pp),
    starting `depth` tokens into the context: a reply is generated after its prompt, and attention
    costs more the longer the context, so tg at depth 0 flatters a comparison with a chat."""
    if n_gen <= 0 and n_prompt <= 0:
        raise EngineError("llama-bench needs n_gen or n_prompt above 0")
    repack = default_repack() if repack is None else repack
    validate_gguf(model, read_tokens=False)  # llama.cpp's tools crash on some bad files: say why first
    cmd = [
        str(tools.bench), "-m", str(model), "-t", str(threads), "-n", str(n_gen), "-p", str(n_prompt),
        "-r", str(repeats), "--repack", "1" if repack else "0", "-fa", flash_attn_flag(flash_attn), "-o", "json",
    ] + (["-d", str(depth)] if depth else [])
    out = _run(cmd, timeout, repack)
    return parse_bench_json(out.stdout, model=Path(model), threads=threads, repack=repack, command=tuple(cmd))


def parse_bench_json(stdout: str, *, model: Path, threads: int, repack: bool, command: tuple[str, ...]) -> BenchReport:
    try:
        rows = json.loads(stdout)
        tests, build = [], ""
        for row in rows:
            n_prompt, n_gen = int(row.get("n_prompt", 0)), int(row.get("n_gen", 0))
            kind, n = ("tg", n_gen) if n_gen > 0 and n_prompt == 0 else ("pp", n_prompt) if n_prompt > 0 and n_gen == 0 else ("", 0)
            if not kind:
                continue  # a combined pp+tg test: not asked for here
            samples = tuple(float(s) for s in row.get("samples_ts", ()))
            tests.append(BenchTest(kind, n, float(row["avg_ts"]), float(row.get("stddev_ts", 0.0)), samples,
                                   int(row.get("n_depth", 0))))
            build = f"{row.get('build_commit', '?')} ({row.get('build_number', '?')})"
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise EngineError(f"llama-bench printed something other than its JSON report ({exc}): {_tail(stdout)}") from None
    if not tests:
        raise EngineError(f"llama-bench reported no tests: {_tail(stdout)}")
    return BenchReport(model, threads, repack, tuple(tests), build, command)


# -- llama-speculative-simple -------------------------------------------------------------------
def speculative(
    tools: NativeTools,
    target: str | Path,
    prompt_file: str | Path,
    *,
    n_predict: int,
    threads: int,
    drafter: str | Path | None = None,
    spec_type: str | None = None,
    draft_max: int | None = None,
    draft_min: int | None = None,
    repack: bool | None = None,
    ctx_size: int = 4096,
    seed: int = 42,
    extra_args: Sequence[str] = (),
    timeout: float = 1800,
    flash_attn: bool | None = None,
) -> SpecResult:
    """Greedy speculative decoding of `prompt_file` (already-rendered chat text, read as is:
    special tokens parsed, no escapes processed) with llama.cpp's own loop. llama.cpp puts BOS
    in front when the model asks for one, so the file should not start with it.

    `spec_type` defaults to draft-simple when a drafter is given; without one it must be an
    ngram-* type. `draft_max` goes to that type's own length flag (ngram-cache has none)."""
    if spec_type is None and drafter is not None:
        spec_type = DRAFT_MTP if is_assistant(drafter) else DRAFT_SIMPLE
    if spec_type not in SPEC_TYPES:
        raise EngineError(f"spec_type must be one of {', '.join(SPEC_TYPES)} (got {spec_type!r})")
    if spec_type in (DRAFT_SIMPLE, DRAFT_MTP) and drafter is None:
        raise EngineError(f"{spec_type} needs a drafter model")
    if n_predict <= 0:
        raise EngineError("n_predict must be above 0")
    try:
        text = Path(prompt_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EngineError(f"cannot read the prompt file {prompt_file}: {exc}") from None
    for model in (target, drafter):
        if model is not None:  # a missing target makes llama-speculative-simple segfault
            validate_gguf(model, read_tokens=False)
    repack = default_repack() if repack is None else repack
    length_args, effective_max = _draft_length_args(spec_type, draft_max, draft_min)

    # `-f` drops one trailing newline from the file: give it one to drop, so a rendered prompt
    # ending in "assistant\n" reaches the model whole.
    with tempfile.TemporaryDirectory(prefix="draftlight-native-") as tmp:
        copy = Path(tmp) / "prompt.txt"
        copy.write_text(text + "\n", encoding="utf-8", newline="")
        cmd = [
            str(tools.speculative), "-m", str(target), "-f", str(copy), "-n", str(n_predict),
            "-t", str(threads), "-tb", str(threads), "-c", str(ctx_size), "-s", str(seed),
            "--temp", "0", "--top-k", "1", "--no-escape", "-co", "off", "-fa", flash_attn_flag(flash_attn),
            "--spec-type", spec_type, *length_args,
        ]
        if drafter is not None:
            cmd += ["-md", str(drafter), "-td", str(threads), "-tbd", str(threads)]
        if not repack:
            cmd.append("--no-repack")
        cmd += list(extra_args)
        out = _run(cmd, timeout, repack)
    shown = [*cmd[:4], str(prompt_file), *cmd[5:]]
    return parse_speculative(out.stdout, out.stderr, prompt=text, spec_type=spec_type,
                             draft_max=effective_max, command=tuple(shown))


def _draft_length_args(spec_type: str, draft_max: int | None, draft_min: int | None) -> tuple[list[str], int]:
    flag, default = _DRAFT_MAX_FLAGS[spec_type]
    if draft_max is None or flag is None:
        args = ["--spec-draft-n-min", str(draft_min)] if spec_type == DRAFT_SIMPLE and draft_min is not None else []
        return args, default
    if draft_max < 1:
        raise EngineError("draft_max must be at least 1 (plain decoding is llama-bench's tg)")
    args = [flag, str(draft_max)]
    if spec_type == DRAFT_SIMPLE and draft_min is not None:
        args += ["--spec-draft-n-min", str(draft_min)]
    elif spec_type == "ngram-mod":  # its minimum (default 48) must not exceed the maximum
        args += ["--spec-ngram-mod-n-min", str(min(draft_max, draft_min if draft_min is not None else _NGRAM_MOD_N_MIN))]
    return args, draft_max


_INT = r"(-?\d+)"
_FLOAT = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)"
_DECODED = re.compile(rf"decoded\s+{_INT} tokens in\s+{_FLOAT} seconds, speed:\s+{_FLOAT} t/s")
_ENCODED = re.compile(rf"encoded\s+{_INT} tokens in")
_DRAFTED = re.compile(rf"n_drafted\s*=\s*{_INT}")
_ACCEPTED = re.compile(rf"n_accept\s*=\s*{_INT}")
_ROUND = re.compile(r"accepted (\d+)/(\d+) draft tokens")


def parse_speculative(
    stdout: str, stderr: str, *, prompt: str, spec_type: str, draft_max: int, command: tuple[str, ...]
) -> SpecResult:
    decoded = _DECODED.search(stderr)
    encoded = _ENCODED.search(stderr)
    drafted, accepted = _DRAFTED.search(stderr), _ACCEPTED.search(stderr)
    if not (decoded and encoded and drafted and accepted):
        raise EngineError(f"llama-speculative-simple ended without its summary: {_tail(stderr)}")
    return SpecResult(
        spec_type=spec_type,
        draft_max=draft_max,
        n_prompt=int(encoded.group(1)),
        n_decoded=int(decoded.group(1)),
        decode_seconds=float(decoded.group(2)),
        tokens_per_s=float(decoded.group(3)),
        n_drafted=int(drafted.group(1)),
        n_accepted=int(accepted.group(1)),
        text=_generated_text(stdout, prompt),
        command=command,
        rounds=tuple((int(kept), int(drafted)) for kept, drafted in _ROUND.findall(stderr)),
    )


def _generated_text(stdout: str, prompt: str) -> str | None:
    """stdout is "\\n\\n", the prompt's tokens, the reply, then "\\n\\n" twice (after the loop and at
    the end). The echo may differ from the prompt by a BOS text in front and, with SentencePiece
    vocabularies, a space before each word that follows a special token."""
    start = _echo_end(stdout, prompt)
    if start is None:
        return None
    reply = stdout[start:]
    for tail in ("\n\n\n\n", "\n\n"):
        if reply.endswith(tail):
            return reply[: -len(tail)]
    return reply


def _echo_end(stdout: str, prompt: str, lead: int = 64) -> int | None:
    """Where the echoed prompt ends in stdout, allowing extra spaces in the echo."""
    if not prompt:
        return None
    for j in range(min(lead, len(stdout))):
        if stdout[j] != prompt[0]:
            continue
        i = 0
        while i < len(prompt) and j < len(stdout):
            if stdout[j] == prompt[i]:
                i += 1
            elif stdout[j] != " ":
                break
            j += 1
        if i == len(prompt):
            return j
    return None


# -- running -------------------------------------------------------------------------------------
def _run(cmd: list[str], timeout: float, repack: bool) -> subprocess.CompletedProcess:
    name = Path(cmd[0]).name
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EngineError(f"{name} did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise EngineError(f"cannot run {name}: {exc}") from None
    stdout = out.stdout.decode("utf-8", "replace")
    stderr = out.stderr.decode("utf-8", "replace")
    if out.returncode != 0:
        raise EngineError(f"{name} {_describe_exit(out.returncode, repack)}: {_tail(stderr) or _tail(stdout) or 'no output'}")
    return subprocess.CompletedProcess(cmd, 0, stdout, stderr)


def _describe_exit(code: int, repack: bool) -> str:
    if code < 0:  # POSIX: killed by a signal
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        amx = sig == "SIGSEGV" and repack and cpu_has_amx()
        hint = (" (llama.cpp's AMX kernels crash in a GCC 12 build: run with repacking off, or build the tools "
                "again with scripts/build_llama_tools.sh, which adds -fno-dse)") if amx else ""
        return f"was killed by {sig}{hint}"
    if sys.platform == "win32" and code in (0xC0000005, -1073741819):
        return "crashed (access violation)"
    return f"failed (exit status {code})"


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _STDERR_TAIL else "..." + text[-_STDERR_TAIL:]
