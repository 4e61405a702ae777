"""Rewrite a benchmark's report.md, report.json and chart.png from the runs its report.json saved,
with the current summary code: for a change in how runs are summarised, not in how they are run.

    python scripts/bench_rewrite.py resources/bench/results
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.frontends.bench_pool import PoolError, load_runs  # noqa: E402
from engine.frontends.bench_report import write_report  # noqa: E402


def main(folder: Path) -> int:
    try:
        results, meta = load_runs(folder / "report.json")
    except PoolError as exc:
        print(f"bench_rewrite: {exc}", file=sys.stderr)
        return 2
    for path in write_report(results, meta, folder).values():
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
