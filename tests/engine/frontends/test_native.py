"""llama.cpp's own tools (llama-bench, llama-speculative-simple) run on the tiny models, and their
reports read back: checked against facts set here and against the engine's own greedy text."""
from __future__ import annotations

import os
import stat
import sys

import pytest

from engine.decoding.events import TokenEvent
from engine.llama.types import LoadSettings
from engine.sampling import SamplingParams
from engine.decoding.session import GenerationSettings, Session
from engine.errors import EngineError, ModelFileError
from engine.frontends import native
from tree import ROOT

# One thread: on a busy machine, llama.cpp's spinning worker threads slow each other down 50x.
THREADS = 1
N_PREDICT = 24
# Prompts the tiny target answers for 40 tokens and more without an end token, repeating itself
# (so the n-gram types find something to draft).
PLAIN_PROMPT = "python code token draft"
# tiny_models.CHATML written out by hand: the file the tools read ends in "assistant\n", and
# llama.cpp's -f drops one trailing newline unless native.py guards against it.
CHAT_MESSAGES = [{"role": "user", "content": "the model is fast"}]
CHAT_RENDERED = "<|im_start|>user\nthe model is fast<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def plain_session(tiny):
    s = Session(tiny["target"], None, target_load=LoadSettings(n_ctx=1024, n_threads=THREADS), calibrate=False)
    yield s
    s.close()


def greedy(max_tokens: int) -> GenerationSettings:
    return GenerationSettings(draft_max=0, max_tokens=max_tokens, sampling=SamplingParams(temperature=0))


def prompt_file(tmp_path, text: str):
    path = tmp_path / "prompt.txt"
    path.write_text(text, encoding="utf-8", newline="")
    return path


def assert_same_greedy_text(native_text: str, events: list) -> None:
    """Equal, or different only where the target's two best tokens were a numerical tie."""
    engine_text = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert native_text is not None and len(engine_text) > 20
    if native_text == engine_text:
        return
    at = next(i for i, (a, b) in enumerate(zip(native_text, engine_text)) if a != b)
    seen = 0
    for e in events:
        if isinstance(e, TokenEvent):
            seen += len(e.text)
            if seen > at:
                assert e.margin is not None and e.margin < 1e-3, (
                    f"llama.cpp's greedy text left the engine's at character {at} without a tie "
                    f"(margin {e.margin}): {native_text!r} vs {engine_text!r}"
                )
                return


# -- without the tools ---------------------------------------------------------------------------
def test_missing_tools_name_the_build_script(tmp_path):
    (tmp_path / native.BENCH).write_text("")  # present but not executable: still missing
    with pytest.raises(EngineError) as err:
        native.locate(tmp_path)
    assert native.BUILD_SCRIPT in str(err.value)
    assert native.BENCH in str(err.value) and native.SPECULATIVE in str(err.value)


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell script stands in for a crashing tool")
def test_a_tool_killed_by_a_signal_is_named(tmp_path, tiny):
    for name in (native.BENCH, native.SPECULATIVE):
        exe = tmp_path / name
        exe.write_text("#!/bin/sh\necho 'load_tensors: repacking' >&2\nkill -SEGV $$\n")
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    tools = native.locate(tmp_path)
    with pytest.raises(EngineError) as err:
        native.llama_bench(tools, tiny["target"], threads=1, repack=True)
    assert "SIGSEGV" in str(err.value) and "load_tensors: repacking" in str(err.value)


def test_unknown_spec_type_and_missing_drafter_are_refused(tmp_path):
    tools = native.NativeTools(tmp_path, tmp_path / "b", tmp_path / "s")
    with pytest.raises(EngineError, match="spec_type"):
        native.speculative(tools, "t.gguf", "p.txt", n_predict=8, threads=1, spec_type="ngram-fancy")
    with pytest.raises(EngineError, match="spec_type"):
        native.speculative(tools, "t.gguf", "p.txt", n_predict=8, threads=1)  # no drafter, no type
    with pytest.raises(EngineError, match="drafter"):
        native.speculative(tools, "t.gguf", "p.txt", n_predict=8, threads=1, spec_type="draft-simple")


def test_summary_lines_are_read_including_a_run_that_never_drafted():
    stderr = (
        "encoded   11 tokens in    0.010 seconds, speed: 1100.000 t/s\n"
        "decoded   17 tokens in    0.500 seconds, speed:   34.000 t/s\n"
        "n_draft   = 3\nn_predict = 17\nn_drafted = 0\nn_accept  = 0\naccept    = -nan%\n"
    )
    r = native.parse_speculative("\n\n<s> say hi hi there\n\n", stderr, prompt="say hi", spec_type="ngram-mod",
                                 draft_max=64, command=("x",))
    assert (r.n_prompt, r.n_decoded, r.decode_seconds, r.tokens_per_s) == (11, 17, 0.5, 34.0)
    assert (r.n_drafted, r.n_accepted, r.acceptance) == (0, 0, None)
    assert r.text == " hi there"
    with pytest.raises(EngineError, match="summary"):
        native.parse_speculative("", "main: error: failed to load model\n", prompt="x", spec_type="ngram-mod",
                                 draft_max=64, command=("x",))


# -- the real tools on the tiny models --------------------------------------------------------------
def test_llama_bench_reports_the_tests_asked_for(tools, tiny):
    report = native.llama_bench(tools, tiny["target"], threads=THREADS, n_gen=16, n_prompt=8, repeats=2, repack=False)
    assert report.tg is not None and report.pp is not None
    assert (report.tg.n_tokens, report.pp.n_tokens) == (16, 8)
    assert len(report.tg.samples) == 2 and len(report.pp.samples) == 2
    assert report.tg.tokens_per_s > 0 and report.pp.tokens_per_s > 0
    assert "--repack" in report.command and report.command[report.command.index("--repack") + 1] == "0"
    # flash attention as the engine loads its target: llama.cpp's own choice unless asked
    assert report.command[report.command.index("-fa") + 1] == "auto"
    off = native.llama_bench(tools, tiny["target"], threads=THREADS, n_gen=4, repeats=1, repack=False, flash_attn=False)
    assert off.command[off.command.index("-fa") + 1] == "off" and off.tg is not None


def test_llama_bench_generates_from_a_depth_like_a_reply_after_its_prompt(tools, tiny):
    report = native.llama_bench(tools, tiny["target"], threads=THREADS, n_gen=8, repeats=1, repack=False, depth=40)
    assert report.tg is not None and (report.tg.n_tokens, report.tg.depth) == (8, 40)
    assert report.command[report.command.index("-d") + 1] == "40"
    assert "-d" not in native.llama_bench(tools, tiny["target"], threads=THREADS, n_gen=4, repeats=1, repack=False).command


def test_target_as_its_own_drafter_accepts_everything_and_matches_plain_greedy(tools, tiny, tmp_path, plain_session):
    r = native.speculative(tools, tiny["target"], prompt_file(tmp_path, PLAIN_PROMPT), n_predict=N_PREDICT,
                           threads=THREADS, drafter=tiny["target"], draft_max=4, ctx_size=1024, repack=False)
    assert r.spec_type == "draft-simple" and r.draft_max == 4
    assert r.command[r.command.index("-fa") + 1] == "auto"
    assert r.n_drafted > 0 and r.n_accepted == r.n_drafted and r.acceptance == 1.0
    # llama.cpp stops once it holds more than n_predict tokens, and does not cut its last draft.
    assert N_PREDICT + 1 <= r.n_decoded <= N_PREDICT + 1 + 4
    events = list(plain_session.complete(PLAIN_PROMPT, greedy(r.n_decoded)))
    assert_same_greedy_text(r.text, events)


def test_a_smaller_drafter_is_verified_to_the_same_greedy_text(tools, tiny, tmp_path, plain_session):
    r = native.speculative(tools, tiny["target"], prompt_file(tmp_path, PLAIN_PROMPT), n_predict=N_PREDICT,
                           threads=THREADS, drafter=tiny["drafter"], draft_max=3, ctx_size=1024, repack=False)
    assert 0 <= r.n_accepted <= r.n_drafted and r.n_drafted > 0
    assert N_PREDICT + 1 <= r.n_decoded <= N_PREDICT + 1 + 3
    events = list(plain_session.complete(PLAIN_PROMPT, greedy(r.n_decoded)))
    assert_same_greedy_text(r.text, events)


@pytest.mark.parametrize("spec_type", native.NGRAM_TYPES)
def test_draftless_types_keep_the_greedy_text_of_a_rendered_chat(tools, tiny, tmp_path, plain_session, spec_type):
    r = native.speculative(tools, tiny["target"], prompt_file(tmp_path, CHAT_RENDERED), n_predict=N_PREDICT,
                           threads=THREADS, spec_type=spec_type, ctx_size=1024, repack=False)
    assert r.spec_type == spec_type and 0 <= r.n_accepted <= r.n_drafted
    assert r.n_decoded > N_PREDICT
    events = list(plain_session.chat(CHAT_MESSAGES, greedy(r.n_decoded)))
    assert_same_greedy_text(r.text, events)


@pytest.mark.parametrize("spec_type", ["ngram-simple", "ngram-map-k", "ngram-map-k4v"])
def test_short_ngram_keys_draft_and_are_verified_to_the_greedy_text(tools, tiny, tmp_path, plain_session, spec_type):
    # The default keys (12 tokens) find nothing in a 24-token reply; 2-token keys do.
    key_flag = f"--spec-{spec_type}-size-n"
    r = native.speculative(tools, tiny["target"], prompt_file(tmp_path, CHAT_RENDERED), n_predict=N_PREDICT,
                           threads=THREADS, spec_type=spec_type, draft_max=4, ctx_size=1024, repack=False,
                           extra_args=[key_flag, "2"])
    assert r.draft_max == 4 and f"--spec-{spec_type}-size-m" in r.command
    assert r.n_drafted > 0 and 0 <= r.n_accepted <= r.n_drafted
    assert N_PREDICT + 1 <= r.n_decoded <= N_PREDICT + 1 + 4
    events = list(plain_session.chat(CHAT_MESSAGES, greedy(r.n_decoded)))
    assert_same_greedy_text(r.text, events)


def test_a_failing_tool_reports_its_stderr(tools, tiny, tmp_path):
    too_long = prompt_file(tmp_path, "hello world " * 200)  # 400 tokens and more, in a context of 256
    with pytest.raises(EngineError) as err:
        native.speculative(tools, tiny["target"], too_long, n_predict=4, threads=THREADS,
                           spec_type="ngram-simple", ctx_size=256, repack=False)
    assert native.SPECULATIVE in str(err.value) and "exit status 1" in str(err.value)
    assert "exceeds the context size" in str(err.value)


def test_a_missing_model_is_refused_before_llama_cpp_sees_it(tools, tmp_path):
    # llama-speculative-simple itself segfaults on a missing target file.
    with pytest.raises(ModelFileError, match="missing.gguf"):
        native.speculative(tools, tmp_path / "missing.gguf", prompt_file(tmp_path, PLAIN_PROMPT), n_predict=4,
                           threads=THREADS, spec_type="ngram-simple")


def test_environment_variable_points_at_another_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("DRAFTLIGHT_NATIVE_DIR", str(tmp_path))
    assert native.default_dir() == tmp_path
    with pytest.raises(EngineError, match=str(tmp_path).replace("\\", "\\\\")):
        native.locate()
    monkeypatch.delenv("DRAFTLIGHT_NATIVE_DIR")
    assert native.default_dir().name == ".native" and os.path.isabs(native.default_dir())


def test_bench_compares_plain_decoding_with_llama_bench_from_where_replies_start(tools, tiny, tmp_path, plain_session):
    import json
    import subprocess

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"category": "chat", "messages": CHAT_MESSAGES}) + "\n")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "engine", "bench", "--target", str(tiny["target"]), "--draft", "lookup",
                        "--prompts", str(prompts), "--max-tokens", "8", "--repeats", "1", "--threads", str(THREADS),
                        "--native", str(tools.bench.parent), "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "report.json").read_text())["meta"]["native"]
    # The chat as the tools read it, written out by hand above: replies start after its last token.
    assert meta["depth"] == len(plain_session.target.tokenize(CHAT_RENDERED, parse_special=True))
    assert f"-d {meta['depth']}" in meta["command"] and meta["plain_ratio"] > 0
    assert f"from {meta['depth']} tokens into the context" in (out / "report.md").read_text()
