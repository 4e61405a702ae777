"""Per category and variant of `engine bench` reports: the rounds' speedup priced in each run's own plain rounds
(engine.frontends.bench_rounds), a measure of the drafting decisions that the machine's drift between runs does not
move; each cell is the median / the geometric mean of the runs (how many). Several reports of the same bench are
pooled first (scripts/pool_bench.py).

    python scripts/rounds_speedup.py RUN/report.json [RUN2/report.json ...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.frontends.bench_pool import PoolError, load_runs, pool  # noqa: E402
from engine.frontends.bench_rounds import by_category  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="report.json files of `engine bench` runs")
    args = parser.parse_args(argv)
    try:
        runs = pool(args.reports)[0] if len(args.reports) > 1 else load_runs(args.reports[0])[0]
    except PoolError as exc:
        print(f"rounds_speedup: {exc}", file=sys.stderr)
        return 2
    table = by_category(runs)
    variants = sorted({v for row in table.values() for v in row})
    print("| category | " + " | ".join(variants) + " |")
    print("|---|" + "---|" * len(variants))
    for category in sorted(c for c in table if c != "all") + (["all"] if "all" in table else []):
        cells = [table[category].get(v) for v in variants]
        text = ["-" if c is None else f"{c[0]:.3f}x / {c[1]:.3f}x ({c[2]})" for c in cells]
        print(f"| {category} | " + " | ".join(text) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
