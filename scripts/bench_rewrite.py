"""Rewrite a benchmark's report.md, report.json and chart.png from the runs its report.json saved,
with the current summary code: for a change in how runs are summarised, not in how they are run.

    python scripts/bench_rewrite.py resources/bench/results
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.frontends.bench import RunResult  # noqa: E402
from engine.frontends.bench_report import write_report


def main(folder: Path) -> None:
    report = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    results = [RunResult(**{**run, "rounds": [tuple(r) for r in run["rounds"]]}) for run in report["runs"]]
    for path in write_report(results, report["meta"], folder).values():
        print(f"wrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
