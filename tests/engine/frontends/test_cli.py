"""`python -m engine generate` and `bench` as other tools call them: real processes, real files."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tree import ROOT



def engine(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, cwd=ROOT,
                          env=full_env, timeout=300)


def test_generate_json_stream(tiny):
    r = engine("generate", "--target", str(tiny["target"]), "--draft", str(tiny["drafter"]), "--draft-max", "3",
               "--prompt", "hello world", "--max-tokens", "12", "--json")
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert events[-1]["type"] == "done"
    assert {"round", "token"} <= {e["type"] for e in events[:-1]}
    stats = events[-1]["stats"]
    assert stats["tokens"] == sum(e["type"] == "token" for e in events) and stats["drafted"] > 0
    assert events[-1]["text"].startswith("".join(e["text"] for e in events if e["type"] == "token"))
    for e in events:
        if e["type"] == "token":
            assert e["source"] in {"accepted", "correction", "bonus", "target"}


def test_generate_colours_the_reply_and_prints_stats(tiny):
    r = engine("generate", "--target", str(tiny["target"]), "--draft", str(tiny["drafter"]), "--draft-max", "4",
               "--prompt", "python code token draft", "--max-tokens", "30", env={"FORCE_COLOR": "1"})
    assert r.returncode == 0, r.stderr
    assert "\x1b[32m" in r.stdout  # accepted drafts in green
    last = r.stdout.strip().splitlines()[-1]
    assert "tok/s" in last and "accepted" in last and "k: fixed k=4" in last
    plain = engine("generate", "--target", str(tiny["target"]), "--prompt", "hi", "--max-tokens", "5", env={"NO_COLOR": "1"})
    assert plain.returncode == 0 and "\x1b[" not in plain.stdout


@pytest.mark.parametrize("case", ["missing", "not_gguf", "truncated", "incompatible", "too_long", "bad_arg"])
def test_bad_input_is_one_clear_line_and_exit_2(case, tiny, tmp_path):
    target, draft, prompt, extra = str(tiny["target"]), "none", "hi", []
    if case == "missing":
        target = str(tmp_path / "nope.gguf")
    elif case == "not_gguf":
        target = str(tmp_path / "notes.gguf")
        Path(target).write_text("these are my notes, not a model\n" * 20)
    elif case == "truncated":
        target = str(tmp_path / "cut.gguf")
        Path(target).write_bytes(tiny["target"].read_bytes()[:500_000])
    elif case == "incompatible":
        draft = str(tiny["other-vocab"])
    elif case == "too_long":
        prompt, extra = "hello " * 600, ["--ctx", "256"]
    elif case == "bad_arg":
        extra = ["--draft-max", "lots"]
    r = engine("generate", "--target", target, "--draft", draft, "--prompt", prompt, *extra)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert "Traceback" not in r.stderr
    if case != "bad_arg":  # argparse prints its usage line first
        assert len(lines) == 1, r.stderr
    assert r.stdout == ""


def test_bench_writes_reports(tiny, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "hello world", "category": "chat"}) + "\n"
        + json.dumps({"category": "code", "messages": [
            {"role": "user", "content": "def return class"}, {"role": "assistant", "content": "def return class import"},
            {"role": "user", "content": "again: def return class"}]}) + "\n"
    )
    out = tmp_path / "out"
    r = engine("bench", "--target", str(tiny["target"]), "--draft", f"{tiny['drafter']}@2,{tiny['drafter']}@auto,lookup,auto",
               "--prompts", str(prompts), "--max-tokens", "12", "--repeats", "2", "--out", str(out),
               "--traces", str(out / "traces.jsonl"))
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    table = report["summary"]["table"]
    assert set(report["summary"]["categories"]) == {"chat", "code"}
    variants = set(table["all"])
    assert variants == {"plain", "plain (control)", "auto", "lookup k=auto", "tiny-drafter k=2", "tiny-drafter k=auto"}
    assert all(row["greedy_equal"] in (None, "4/4") for row in table["all"].values())
    assert table["all"]["plain (control)"]["greedy_equal"] == "4/4"  # the same work twice: the same tokens
    # Auto rows compare with the best fixed k of the same drafter; fixed rows have no such column.
    assert table["all"]["tiny-drafter k=auto"]["auto_vs_best_fixed"] > 0
    assert table["all"]["tiny-drafter k=2"]["auto_vs_best_fixed"] is None
    runs = report["runs"]
    assert len(runs) == 2 * 2 * 6
    for group in {(run["prompt_id"], run["repeat"]) for run in runs}:  # the control sits across the group from plain
        order = [run["variant"] for run in runs if (run["prompt_id"], run["repeat"]) == group]
        assert abs(order.index("plain (control)") - order.index("plain")) >= 2, order
    assert all(run["rounds"] and run["python_ms_per_token"] > 0 for run in runs)
    fixed = [run for run in runs if run["variant"] == "tiny-drafter k=2"]
    assert all(drafted <= k <= 2 for run in fixed for k, drafted, *_ in run["rounds"])  # k shrinks only at the end
    assert sum(k == 2 for run in fixed for k, *_ in run["rounds"]) >= 4
    assert (out / "chart.png").read_bytes()[:4] == b"\x89PNG"
    md = (out / "report.md").read_text()
    assert "| all | plain |" in md and "Auto / best fixed k" in md
    head, *traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert head["verify_ms"]["1"] > 0 and len(traces) == 2
    # The limit the replies ran under, and of each prompt what the drafter holds before the reply: BOS and
    # "<|im_start|>user\n" (7 tokens of the tiny template) read at load; for the chat with an earlier turn, that
    # turn and its reply read ahead as the app reads them after a reply (40 tokens, with the next "<|im_start|>user\n").
    assert head["max_tokens"] == 12 and [t["opening"] for t in traces] == [7, 40]
    assert all(len(t["model_match"]) > 0 for t in traces)


def test_bench_rejects_a_bad_prompts_file(tiny, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "no category"}\n')
    r = engine("bench", "--target", str(tiny["target"]), "--prompts", str(bad), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "category" in r.stderr and "Traceback" not in r.stderr


def test_bench_reports_the_verdict_beside_the_measured_speedup_with_a_busy_loop(tiny, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "category": "chat"}) + "\n"
                               for p in ("the model is fast", "hello world")))
    out = tmp_path / "out"
    r = engine("bench", "--target", str(tiny["target"]), "--draft", f"{tiny['drafter']}@3", "--prompts", str(prompts),
               "--max-tokens", "24", "--repeats", "2", "--busy-half", "--out", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    runs = report["runs"]
    assert [run["busy"] for run in runs if run["variant"] == "plain"] == [False, True, False, True]
    plain = {(run["prompt_id"], run["repeat"]): run for run in runs if run["variant"] == "plain"}
    control = {(run["prompt_id"], run["repeat"]): run["tokens_per_s"] for run in runs if run["variant"] == "plain (control)"}
    spec = [run for run in runs if run["variant"] not in ("plain", "plain (control)")]
    # Measured against plain's speed in the group: the geometric mean of its two plain runs.
    ratios = sorted(run["estimated_speedup"] / (run["tokens_per_s"] / math.sqrt(
        plain[g]["tokens_per_s"] * control[g])) for run in spec for g in [(run["prompt_id"], run["repeat"])])
    row = report["summary"]["table"]["all"]["tiny-drafter k=3"]
    assert row["verdict_ratio"] == pytest.approx((ratios[1] + ratios[2]) / 2)  # the median of four, worked out here
    verdict = report["summary"]["verdict"]
    assert verdict["all"]["runs"] == 4 and verdict["busy loop"]["runs"] == 2 and verdict["quiet"]["runs"] == 2
    assert verdict["all"]["worst_error"] == pytest.approx(max(abs(x - 1) for x in ratios))
    noise = sorted(abs(plain[g]["tokens_per_s"] / t - 1) for g, t in control.items())
    assert verdict["all: plain vs plain"]["runs"] == 4 and verdict["busy loop: plain vs plain"]["runs"] == 2
    assert verdict["all: plain vs plain"]["worst_error"] == pytest.approx(noise[-1])
    assert verdict["all: plain vs plain"]["median_error"] == pytest.approx((noise[1] + noise[2]) / 2)
    md = (out / "report.md").read_text()
    assert "estimated / measured" in md and "A busy loop took one core" in md


def test_bench_writes_the_docs_headline_with_command_commit_and_machine(tiny, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hello world", "category": "chat"}) + "\n")
    out, docs = tmp_path / "out", tmp_path / "docs" / "headline.md"
    r = engine("bench", "--target", str(tiny["target"]), "--draft", "lookup", "--prompts", str(prompts),
               "--max-tokens", "8", "--repeats", "1", "--out", str(out), "--docs", str(docs))
    assert r.returncode == 0, r.stderr
    text = docs.read_text()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if head.returncode == 0:  # a checkout: the commit it ran at (marked if tracked files differ)
        assert f"- commit: {head.stdout.strip()}" in text and f"- commit: {head.stdout.strip()}" in (
            out / "report.md").read_text()
    assert "- command: `python -m engine bench " in text and f"--docs {docs}`" in text
    assert "- cpu: " in text and "- machine: " in text and f"`{tiny['target'].name}`" in text
    # One prompt, one repeat: a speedup is that run's tokens/s over plain decoding's, read from the runs.
    runs = {run["variant"]: run["tokens_per_s"] for run in json.loads((out / "report.json").read_text())["runs"]}
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| category |")).strip("| ").split(" | ")
    chat, every = (next(line for line in lines if line.startswith(f"| {c} |")).strip("| ").split(" | ")
                   for c in ("chat", "all"))
    assert header[:2] == ["category", "plain tok/s"] and chat[1:] == every[1:]
    assert chat[1] == f"{runs['plain']:.2f}"
    assert chat[header.index("lookup k=auto")] == f"{runs['lookup k=auto'] / runs['plain']:.2f}x"


def test_bench_runs_one_half_of_a_split_set(tiny, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt": p, "category": "chat", "half": h}) + "\n"
                               for i, p, h in (("a", "hello world", "tune"), ("b", "the model is fast", "report"))))
    out = tmp_path / "out"
    r = engine("bench", "--target", str(tiny["target"]), "--draft", "lookup", "--prompts", str(prompts), "--half", "report",
               "--max-tokens", "4", "--repeats", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert {run["prompt_id"] for run in json.loads((out / "report.json").read_text())["runs"]} == {"b"}
    r = engine("bench", "--target", str(tiny["target"]), "--prompts", str(prompts), "--half", "tuning", "--out", str(out))
    assert r.returncode == 2 and "no prompts in the half 'tuning'" in r.stderr and "Traceback" not in r.stderr


def test_the_wide_bench_set_is_split_once_into_halves_of_every_category():
    from engine.frontends.bench import load_prompts

    prompts = load_prompts(ROOT / "resources" / "bench" / "wide" / "prompts.jsonl")
    assert len(prompts) == 90 and len({p.id for p in prompts}) == 90
    cats = {p.category for p in prompts}
    assert len(cats) == 12 and {"translation en-de", "translation de-en", "multi-turn chat", "long-context QA"} <= cats
    for cat in cats:
        halves = [p.half for p in prompts if p.category == cat]
        assert sorted(set(halves)) == ["report", "tune"] and abs(halves.count("tune") - halves.count("report")) <= 1, cat
    assert all(p.history for p in prompts if p.category == "multi-turn chat")
