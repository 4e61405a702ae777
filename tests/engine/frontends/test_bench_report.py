"""The bench report's time to the first token against plain decoding: per run, the same prompt and repeat's plain
run is the baseline; the median and the longest extra wait are shown (values written here)."""
from __future__ import annotations

import pytest

from engine.frontends.bench import RunResult
from engine.frontends.bench_report import markdown, summarise


def run(prompt: str, variant: str, repeat: int, ttft: float, category: str = "translation") -> RunResult:
    return RunResult(prompt, category, variant, repeat, 10, 10.0, 0.0, 0.0, ttft, 0.0, 0.0, 0.0, None, "stop", 1.0,
                     family="plain" if variant == "plain" else "lookup+D", fixed=variant == "plain")


def test_time_to_first_token_is_reported_against_plain_decoding_of_the_same_prompt_and_repeat():
    results = [
        run("a", "plain", 0, 0.300), run("a", "auto", 0, 0.520),  # +220 ms
        run("a", "plain", 1, 0.400), run("a", "auto", 1, 0.410),  # +10 ms: against its own repeat's plain, not 0.3
        run("b", "plain", 0, 1.000), run("b", "auto", 0, 0.950),  # -50 ms
        run("c", "plain", 0, 0.200, "code"), run("c", "auto", 0, 0.260, "code"),  # +60 ms
    ]
    table = summarise(results)["table"]
    assert table["translation"]["auto"]["ttft_vs_plain_s"] == pytest.approx(0.010)  # median of +220, +10, -50
    assert table["translation"]["auto"]["ttft_vs_plain_worst_s"] == pytest.approx(0.220)
    assert table["all"]["auto"]["ttft_vs_plain_s"] == pytest.approx((0.010 + 0.060) / 2)
    assert table["all"]["auto"]["ttft_vs_plain_worst_s"] == pytest.approx(0.220)
    assert table["all"]["plain"]["ttft_vs_plain_s"] is None  # plain is the baseline
    meta = {"target": "t.gguf", "machine": "m", "backends": "CPU", "prompts": "p.jsonl", "n_prompts": 3,
            "max_tokens": 96, "repeats": 2, "date": "today"}
    md = markdown(summarise(results), meta)
    row = next(line for line in md.splitlines() if line.startswith("| translation | auto |"))
    assert "| +10 (+220) |" in row
    assert "TTFT vs plain ms (worst)" in md
