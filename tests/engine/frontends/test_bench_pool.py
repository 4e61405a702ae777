"""Pooling bench reports: each run is still compared with plain decoding of its own prompt and repeat (values written
here), reports of different benches are refused with a message, and a hand-edited report never raises anything else."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.frontends.bench import RunResult
from engine.frontends.bench_pool import PoolError, pool
from engine.frontends.bench_report import write_report

ROOT = Path(__file__).resolve().parents[3]
META = {"target": "t.gguf", "machine": "m", "backends": "CPU", "prompts": "p.jsonl", "n_prompts": 1, "max_tokens": 96,
        "repeats": 2, "n_threads": 2}


def run(variant: str, repeat: int, tok_s: float) -> RunResult:
    return RunResult("a", "translation", variant, repeat, 10, tok_s, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, None, "stop", 1.0,
                     family="plain" if variant == "plain" else "lookup", fixed=variant == "plain")


def report(folder: Path, speeds: list[tuple[float, float]], commit: str, **meta) -> Path:
    """A real report.json (write_report), repeat r running plain and Auto at speeds[r]."""
    runs = [x for r, (plain, auto) in enumerate(speeds) for x in (run("plain", r, plain), run("auto", r, auto))]
    for x in runs:
        x.rounds = [(0, 0, 0, 0.0, 0.05, "none")]
    command = {"aaa": "bench one", "bbb": "bench two"}.get(commit)
    write_report(runs, {**META, "date": f"day {commit}", "commit": commit, "cpu": "a CPU", "command": command, **meta},
                 folder)
    return folder / "report.json"


def test_pooled_runs_are_each_compared_with_plain_decoding_of_their_own_repeat(tmp_path):
    first = report(tmp_path / "one", [(10.0, 12.0), (10.0, 8.0)], "aaa")  # 1.2x, 0.8x
    second = report(tmp_path / "two", [(20.0, 30.0), (10.0, 11.0)], "bbb")  # 1.5x, 1.1x
    results, meta = pool([first, second])
    assert sorted({r.repeat for r in results}) == [0, 1, 2, 3]
    out = tmp_path / "pooled"
    write_report(results, meta, out)
    pooled = json.loads((out / "report.json").read_text())
    row = pooled["summary"]["table"]["translation"]["auto"]
    # The median of 1.2, 0.8, 1.5 and 1.1. Repeats kept as they were would pair the first report's Auto runs with
    # the second's plain runs (12/20, 8/10: a median of 0.85 over the pooled table).
    assert row["speedup"] == pytest.approx(1.15)
    assert row["speedup_min"] == pytest.approx(0.8)
    assert row["runs"] == 4
    assert pooled["meta"]["repeats"] == 4 and pooled["meta"]["commit"] == "aaa, bbb"
    assert pooled["meta"]["date"] == "day aaa, day bbb" and pooled["meta"]["cpu"] == "a CPU"
    assert pooled["meta"]["target"] == "t.gguf" and "command" not in pooled["meta"]
    assert pooled["meta"]["pooled_from"] == [
        {"report": str(first), "command": "bench one", "commit": "aaa", "date": "day aaa", "repeats": 2},
        {"report": str(second), "command": "bench two", "commit": "bbb", "date": "day bbb", "repeats": 2}]
    assert results[0].rounds == [(0, 0, 0, 0.0, 0.05, "none")]
    assert "- commit: aaa, bbb" in (out / "report.md").read_text()


def test_reports_of_different_benches_are_refused_by_name(tmp_path):
    first = report(tmp_path / "one", [(10.0, 12.0)], "aaa")
    other = report(tmp_path / "two", [(10.0, 12.0)], "bbb", target="other.gguf")
    with pytest.raises(PoolError) as caught:
        pool([first, other])
    assert str(caught.value) == f"{other}: target is 'other.gguf', not 't.gguf' as in {first}"
    with pytest.raises(PoolError, match="two reports or more"):
        pool([first])


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["runs"][1].update(variant="lookup@4"), "variants ['lookup@4', 'plain'] differ from ['auto', 'plain']"),
    (lambda d: d["runs"].pop(0), "run 'a' / 'auto' has no plain run in its repeat"),
    (lambda d: d["meta"].update(repeats="2"), "its repeats are not a count"),
    (lambda d: d["runs"][1].update(tokens_per_s=True), "has a repeat or a measurement that is not a number"),
    (lambda d: d["runs"][1].update(repeat=-1), "has a repeat or a measurement that is not a number"),
    (lambda d: d["runs"][1].update(rounds=[1, 2]), "has rounds that are not lists"),
    (lambda d: d["runs"][1].update(rounds=[[3, 3, "2", 0.0, 0.1, "lookup"]]), "has rounds that are not lists of k"),
    (lambda d: d["runs"][1].update(rounds=[[3, 3, 2, 0.0, -0.1, "lookup"]]), "has rounds that are not lists of k"),
    (lambda d: d["runs"][1].update(rounds=[[3, 3, 2, 0.0, 0.1]]), "has rounds that are not lists of k"),
    (lambda d: d["runs"][1].update(tokens="10"), "has a repeat or a measurement that is not a number"),
])
def test_runs_that_cannot_be_compared_are_refused_by_name(tmp_path, edit, says):
    first = report(tmp_path / "one", [(10.0, 12.0)], "aaa")
    data = json.loads(first.read_text())
    edit(data)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    with pytest.raises(PoolError) as caught:
        pool([first, edited])
    assert str(caught.value).startswith(f"{edited}: ") and says in str(caught.value)


def test_the_script_pools_into_a_folder_and_says_why_it_cannot(tmp_path):
    first = report(tmp_path / "one", [(10.0, 12.0), (10.0, 8.0)], "aaa")
    second = report(tmp_path / "two", [(20.0, 30.0), (10.0, 11.0)], "bbb")
    script = [sys.executable, str(ROOT / "scripts" / "pool_bench.py")]
    done = subprocess.run([*script, str(first), str(second), "--out", str(tmp_path / "p"), "--docs",
                           str(tmp_path / "p.md")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "p" / "chart.png").stat().st_size > 0
    assert "| translation | 10.00 | 1.15x |" in (tmp_path / "p.md").read_text()
    second.write_text(second.read_text()[:200])  # cut short, as a copy interrupted
    done = subprocess.run([*script, str(first), str(second), "--out", str(tmp_path / "q")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not a readable bench report" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "q").exists()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["repeat", "tokens", "tokens_per_s", "ttft_s", "rounds", "variant", "prompt_id", "runs",
                              "meta"]),
       value=JSON)
def test_a_hand_edited_report_pools_or_says_why(tmp_path, field, value):
    runs = [asdict(run("plain", 0, 10.0)), asdict(run("auto", 0, 12.0))]
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"meta": {**META, "commit": "aaa"}, "runs": runs}))
    data = json.loads(first.read_text())
    if field in ("runs", "meta"):
        data[field] = value
    else:
        data["runs"][1][field] = value
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    try:
        results, _ = pool([first, edited])
    except PoolError as exc:
        assert str(edited) in str(exc) or str(first) in str(exc)
        return
    assert len(results) == 2 + len([d for d in data["runs"] if isinstance(d, dict)])


def test_the_rewrite_script_reads_a_report_back_through_the_same_checks(tmp_path):
    """scripts/bench_rewrite.py rebuilds a report from its saved runs (the same summary, written again), and refuses
    a report with a run that has no plain run to be compared with, as pooling does."""
    path = report(tmp_path / "one", [(10.0, 12.0), (10.0, 8.0)], "aaa")
    before = (tmp_path / "one" / "report.md").read_text()
    (tmp_path / "one" / "report.md").unlink()
    script = [sys.executable, str(ROOT / "scripts" / "bench_rewrite.py"), str(tmp_path / "one")]
    done = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "one" / "report.md").read_text() == before
    data = json.loads(path.read_text())
    data["runs"].pop(0)
    path.write_text(json.dumps(data))
    done = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "has no plain run in its repeat" in done.stderr and "Traceback" not in done.stderr
