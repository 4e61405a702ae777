"""The default mode against each other variant, run for run in the same group (engine.frontends.bench_paired): medians
and intervals worked out by hand here, groups that must not mix, and the table in report.md and the docs headline
written from a real report file by the pooling script, as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.frontends.bench import CONTROL, PLAIN, RunResult
from engine.frontends.bench_paired import compare, head_to_head, interval, markdown
from engine.frontends.bench_report import summarise

ROOT = Path(__file__).resolve().parents[3]
DEFAULT = "lookup+D k=auto"
LOOKUP = "lookup k=auto"


def run(prompt: str, variant: str, repeat: int, speed: float, category: str = "translation") -> RunResult:
    family = {DEFAULT: "lookup+D", LOOKUP: "lookup"}.get(variant, "plain")
    return RunResult(prompt, category, variant, repeat, 96, speed, 0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 1.0, "length", 1.0,
                     family=family, fixed=variant in (PLAIN, CONTROL))


def group(prompt: str, repeat: int, default: float, lookup: float, category: str = "translation",
          plain: float = 10.0, control: float = 10.0) -> list[RunResult]:
    return [run(prompt, PLAIN, repeat, plain, category), run(prompt, DEFAULT, repeat, default, category),
            run(prompt, LOOKUP, repeat, lookup, category), run(prompt, CONTROL, repeat, control, category)]


def test_each_run_is_divided_by_the_other_variants_run_in_its_own_group():
    # Ratios default / lookup: a 1.10 and 1.20, b 0.90 and 1.00 (translation); c 1.05 twice (code).
    results = [*group("a", 0, 11.0, 10.0), *group("a", 1, 12.0, 10.0), *group("b", 0, 9.0, 10.0),
               *group("b", 1, 10.0, 10.0), *group("c", 0, 21.0, 20.0, "code"), *group("c", 1, 21.0, 20.0, "code")]
    got = compare(results, DEFAULT, LOOKUP, ["code", "translation"])
    assert got["translation"]["runs"] == 4 and got["translation"]["ratio"] == pytest.approx(1.05)
    assert got["code"]["ratio"] == pytest.approx(1.05)
    assert got["all"]["runs"] == 6 and got["all"]["ratio"] == pytest.approx(1.05)
    # Two prompts resampled: {a, a} (a quarter of the draws) has median 1.15, {b, b} 0.95, {a, b} 1.05; the 2.5th and
    # the 97.5th percentiles are then the two extremes.
    assert (got["translation"]["low"], got["translation"]["high"]) == pytest.approx((0.95, 1.15))
    # One prompt's two runs of the same ratio: nothing to resample
    assert (got["code"]["low"], got["code"]["high"]) == pytest.approx((1.05, 1.05))


def test_a_run_without_its_twin_in_the_same_group_is_left_out():
    # Repeat 1 of prompt a ran no lookup: its default run is not divided by repeat 0's lookup run
    results = [*group("a", 0, 11.0, 10.0), run("a", PLAIN, 1, 10.0), run("a", DEFAULT, 1, 30.0)]
    got = compare(results, DEFAULT, LOOKUP, ["translation"])
    assert got["all"] == {"runs": 1, "ratio": pytest.approx(1.1), "low": pytest.approx(1.1), "high": pytest.approx(1.1)}


def test_a_run_at_zero_tokens_per_second_is_left_out_and_a_slow_one_kept():
    # A twin that emitted nothing has no speed to divide by; half a token a second is slow, not missing
    results = [*group("a", 0, 11.0, 0.0), *group("b", 0, 0.5, 0.25), *group("c", 0, 0.0, 10.0)]
    assert compare(results, DEFAULT, LOOKUP, ["translation"])["all"]["runs"] == 1
    assert compare(results, DEFAULT, LOOKUP, ["translation"])["all"]["ratio"] == pytest.approx(2.0)


def test_the_interval_is_the_2_5th_to_the_97_5th_percentile_of_the_resampled_medians():
    # Seven prompts, one run each, ratios 1..7: a resample's median is its 4th draw of 7. It is the smallest ratio
    # when 4 or more of the 7 draws are: 1.0% of resamples, short of 2.5%. It is at most the second smallest when
    # 4 or more draws are one of the two smallest: 10.8%. So the interval runs from the second ratio to the sixth.
    by_prompt = {p: [float(i)] for i, p in enumerate("abcdefg", start=1)}
    assert interval(by_prompt) == (2.0, 6.0)


def test_the_noise_column_is_plain_decoding_timed_twice():
    results = [*group("a", 0, 11.0, 10.0, plain=10.0, control=9.0), *group("b", 0, 11.0, 10.0, plain=10.0, control=11.0)]
    h2h = head_to_head(results, ["translation"])
    assert h2h["default"] == DEFAULT and list(h2h["pairs"]) == [LOOKUP]
    assert h2h["noise"]["all"]["ratio"] == pytest.approx(1.0)  # median of 0.9 and 1.1
    assert (h2h["noise"]["all"]["low"], h2h["noise"]["all"]["high"]) == pytest.approx((0.9, 1.1))


def test_no_default_mode_or_nothing_to_compare_it_with_no_table():
    results = [run("a", PLAIN, 0, 10.0), run("a", LOOKUP, 0, 12.0)]
    assert head_to_head(results, ["translation"]) == {}
    assert summarise(results)["head_to_head"] == {}
    alone = [run("a", PLAIN, 0, 10.0), run("a", DEFAULT, 0, 12.0), run("a", CONTROL, 0, 10.0)]
    assert head_to_head(alone, ["translation"]) == {}


def test_the_default_mode_is_lookup_then_the_model_under_auto_wherever_it_ran():
    served = run("a", "lookup+D k=auto (served)", 0, 9.0)
    served.family = "lookup+D (served)"  # the same mode through the local server: compared with, not the default
    results = [run("a", LOOKUP, 0, 12.0), served, run("a", PLAIN, 0, 10.0), run("a", DEFAULT, 0, 11.0)]
    h2h = head_to_head(results, ["translation"])
    assert h2h["default"] == DEFAULT
    assert set(h2h["pairs"]) == {"lookup+D k=auto (served)", LOOKUP}


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from("abcdefgh"), st.lists(st.floats(0.5, 2.0), min_size=1, max_size=3), min_size=1),
       st.floats(0.5, 2.0))
def test_the_interval_lies_within_the_ratios_and_scales_with_them(by_prompt, factor):
    xs = [x for v in by_prompt.values() for x in v]
    low, high = interval(by_prompt, resamples=200)
    assert min(xs) <= low <= high <= max(xs)
    scaled = interval({p: [x * factor for x in v] for p, v in by_prompt.items()}, resamples=200)
    assert scaled == pytest.approx((low * factor, high * factor))  # same draws, every median scaled


def test_the_table_has_a_column_per_comparison_and_the_noise_last():
    results = [*group("a", 0, 10.5, 10.0), *group("b", 0, 9.5, 10.0, "code", control=11.0)]
    lines = markdown(head_to_head(results, ["code", "translation"]), ["code", "translation"])
    assert lines[0].startswith("The default mode (`lookup+D k=auto`) over each other variant, run for run in the same "
                               "group: the median ratio [its 95% interval, prompts resampled].")
    assert lines[1:] == ["", "| category | default / lookup k=auto | plain (control) / plain: noise |", "|---|---|---|",
                         "| code | 0.950x [0.950, 0.950] | 1.100x [1.100, 1.100] |",
                         "| translation | 1.050x [1.050, 1.050] | 1.000x [1.000, 1.000] |",
                         "| all | 1.000x [0.950, 1.050] | 1.050x [1.000, 1.100] |"]
    assert markdown({}, ["code"]) == []
    missing = head_to_head([*group("a", 0, 10.5, 10.0)], ["code", "translation"])  # nothing ran in code
    assert markdown(missing, ["code", "translation"])[4] == "| code | - | - |"


def test_the_pooling_script_writes_the_table_into_the_report_and_the_docs_headline(tmp_path):
    # Prompt a: the default 5% faster than lookup in both repeats; prompt b: 5% slower. Two reports pooled.
    def report(path: Path, date: str) -> Path:
        runs = [*group("a", 0, 10.5, 10.0), *group("b", 0, 9.5, 10.0, "code")]
        meta = {"target": "t.gguf", "machine": "m", "backends": "CPU", "prompts": "p.jsonl", "n_prompts": 2,
                "max_tokens": 96, "repeats": 1, "date": date, "n_threads": 2}
        path.write_text(json.dumps({"meta": meta, "runs": [asdict(r) for r in runs]}), encoding="utf-8")
        return path

    first, second = report(tmp_path / "one.json", "monday"), report(tmp_path / "two.json", "tuesday")
    out, docs = tmp_path / "pooled", tmp_path / "docs.md"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "pool_bench.py"), str(first), str(second),
                           "--out", str(out), "--docs", str(docs)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    head = "| category | default / lookup k=auto | plain (control) / plain: noise |"
    for text in ((out / "report.md").read_text(encoding="utf-8"), docs.read_text(encoding="utf-8")):
        assert head in text
        assert "| code | 0.950x [0.950, 0.950] | 1.000x [1.000, 1.000] |" in text  # both repeats pooled: 2 runs
        assert "| translation | 1.050x [1.050, 1.050] | 1.000x [1.000, 1.000] |" in text
        assert "| all | 1.000x [0.950, 1.050] | 1.000x [1.000, 1.000] |" in text
    saved = json.loads((out / "report.json").read_text(encoding="utf-8"))["summary"]["head_to_head"]
    assert saved["pairs"][LOOKUP]["all"]["runs"] == 4
