"""The rounds' speedup in a run's own plain rounds (engine.frontends.bench_rounds): values worked out by hand here,
the same for two runs of one reply on a machine that ran 20% slower for one of them, and the script on a real
report file."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.frontends.bench import RunResult
from engine.frontends.bench_report import write_report
from engine.frontends.bench_rounds import by_category, rounds_speedup

ROOT = Path(__file__).resolve().parents[3]
PLAIN_ROUND = (0, 0, 0, 0.0, 0.05, "none")


def run(variant: str, rounds: list[tuple], tokens: int, category: str = "translation", repeat: int = 0,
        prompt: str = "a") -> RunResult:
    seconds = sum(r[3] + r[4] for r in rounds) or 1.0
    r = RunResult(prompt, category, variant, repeat, tokens, tokens / seconds, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, None,
                  "length", 1.0, family="plain" if variant == "plain" else "lookup", fixed=variant == "plain")
    r.rounds = rounds
    return r


def test_a_drafted_round_is_priced_in_the_runs_own_plain_rounds():
    # 10 plain rounds of 50 ms; a lookup of 3 that kept 2 verified in 140 ms (2.8 plain rounds) for 3 tokens:
    # 0.2 plain rounds saved, 13 tokens in 12.8 plain rounds
    kept = run("lookup", [PLAIN_ROUND] * 10 + [(3, 3, 2, 0.0, 0.14, "lookup")], tokens=13)
    assert rounds_speedup(kept) == pytest.approx(13 / 12.8)
    # the same block wholly rejected: 1 token for 2.8 plain rounds, 11 tokens in 12.8
    lost = run("lookup", [PLAIN_ROUND] * 10 + [(3, 3, 0, 0.0, 0.14, "lookup")], tokens=11)
    assert rounds_speedup(lost) == pytest.approx(11 / 12.8)
    # a model drafter's own seconds count with its block's: 30 ms of drafting + 100 ms for 4 tokens = 2.6 rounds
    model = run("model", [PLAIN_ROUND] * 6 + [(3, 3, 3, 0.03, 0.10, "model")], tokens=10)
    assert rounds_speedup(model) == pytest.approx(10 / 8.6)
    # a one-token draft counts too: 2 tokens for 60 ms, 0.8 plain rounds saved
    one = run("lookup", [PLAIN_ROUND] * 5 + [(1, 1, 1, 0.0, 0.06, "lookup")], tokens=7)
    assert rounds_speedup(one) == pytest.approx(7 / 6.2)
    # the median plain round prices: one slow plain round does not make drafting look cheap
    slow = run("lookup", [PLAIN_ROUND] * 5 + [(0, 0, 0, 0.0, 0.5, "none")] + [(1, 1, 1, 0.0, 0.1, "lookup")], tokens=8)
    assert rounds_speedup(slow) == pytest.approx(1.0)


def test_a_machine_that_runs_slower_for_one_run_does_not_move_it():
    rounds = [PLAIN_ROUND] * 20 + [(3, 3, 3, 0.0, 0.13, "lookup"), (3, 3, 0, 0.0, 0.13, "lookup")]
    slower = [(k, d, a, ds * 1.2, vs * 1.2, key) for k, d, a, ds, vs, key in rounds]
    quick, late = run("lookup", rounds, tokens=25), run("lookup", slower, tokens=25)
    assert late.tokens_per_s == pytest.approx(quick.tokens_per_s / 1.2)  # what the bench's ratio to plain sees
    assert rounds_speedup(late) == pytest.approx(rounds_speedup(quick)) == pytest.approx(25 / (20 + 5.2))


def test_runs_without_a_price_are_left_out():
    assert rounds_speedup(run("lookup", [PLAIN_ROUND] * 4 + [(3, 3, 3, 0.0, 0.13, "lookup")], tokens=8)) is None
    assert rounds_speedup(run("lookup", [PLAIN_ROUND] * 5, tokens=0)) is None
    assert rounds_speedup(run("lookup", [(0, 0, 0, 0.0, 0.0, "none")] * 5, tokens=5)) is None
    assert rounds_speedup(run("plain", [PLAIN_ROUND] * 5, tokens=5)) == 1.0
    # a rejected draft is not a plain round: four plain rounds are too few to price it
    assert rounds_speedup(run("lookup", [PLAIN_ROUND] * 4 + [(3, 3, 0, 0.0, 0.05, "lookup")], tokens=5)) is None
    assert rounds_speedup(run("lookup", [PLAIN_ROUND] * 5 + [(3, 3, 0, 0.0, 0.14, "lookup")], tokens=0)) is None


def test_a_hand_edited_run_whose_rounds_claim_more_than_its_tokens_has_no_price():
    plain = [PLAIN_ROUND] * 5
    assert rounds_speedup(run("lookup", plain + [(3, 3, 3, 0.0, 0.0, "lookup")], tokens=4)) is None  # spent 0
    assert rounds_speedup(run("lookup", plain + [(3, 3, 3, 0.0, 0.0, "lookup")], tokens=2)) is None  # spent -2
    # spent 0.5 plain rounds on 4 tokens: odd, but a number
    assert rounds_speedup(run("lookup", plain + [(3, 3, 3, 0.0, 0.025, "lookup")], tokens=4)) == pytest.approx(8.0)


def test_by_category_takes_each_variants_median_and_leaves_plain_decoding_out():
    runs = [run("plain", [PLAIN_ROUND] * 10, tokens=10),
            run("lookup", [PLAIN_ROUND] * 10 + [(3, 3, 2, 0.0, 0.14, "lookup")], tokens=13),  # 13 / 12.8
            run("lookup", [PLAIN_ROUND] * 10 + [(3, 3, 0, 0.0, 0.14, "lookup")], tokens=11, repeat=1),  # 11 / 12.8
            run("lookup", [PLAIN_ROUND] * 10, tokens=10, category="summarisation", prompt="b"),  # 1.0
            run("lookup", [PLAIN_ROUND] * 2, tokens=2, category="summarisation", prompt="c")]  # no price
    table = by_category(runs)
    assert set(table) == {"translation", "summarisation", "all"}
    assert table["translation"] == {"lookup": (pytest.approx(12 / 12.8), pytest.approx((13 * 11) ** 0.5 / 12.8), 2)}
    assert table["summarisation"] == {"lookup": (1.0, 1.0, 1)}
    assert table["all"] == {"lookup": (1.0, pytest.approx((13 * 11 / 12.8 ** 2) ** (1 / 3)), 3)}


def test_the_script_prints_the_table_of_a_report_and_says_why_it_cannot(tmp_path):
    runs = [run("plain", [PLAIN_ROUND] * 10, tokens=10),
            run("lookup", [PLAIN_ROUND] * 10 + [(3, 3, 2, 0.0, 0.14, "lookup")], tokens=13)]
    write_report(runs, {"target": "t.gguf", "machine": "m", "backends": "CPU", "prompts": "p.jsonl", "n_prompts": 1,
                        "max_tokens": 96, "repeats": 1, "n_threads": 2, "commit": "aaa", "date": "today"},
                 tmp_path / "one")
    script = [sys.executable, str(ROOT / "scripts" / "rounds_speedup.py")]
    done = subprocess.run([*script, str(tmp_path / "one" / "report.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| translation | 1.016x / 1.016x (1) |" in done.stdout and "| all | 1.016x / 1.016x (1) |" in done.stdout
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    done = subprocess.run([*script, str(broken)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not a readable bench report" in done.stderr and "Traceback" not in done.stderr
