"""Pool several `engine bench` reports of the same prompts into one (engine.frontends.bench_pool): the table, the
chart and the verdict's error over all their runs, each run still against plain decoding of its own prompt and repeat.

    python scripts/pool_bench.py RUN1/report.json RUN2/report.json --out OUT [--docs OUT.md]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.frontends.bench_pool import PoolError, pool  # noqa: E402
from engine.frontends.bench_report import write_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path, help="report.json files of `engine bench` runs")
    parser.add_argument("--out", type=Path, required=True, help="folder for the pooled report.json, report.md, chart.png")
    parser.add_argument("--docs", type=Path, help="also write the headline table for docs/benchmarks.md here")
    args = parser.parse_args(argv)
    try:
        results, meta = pool(args.reports)
    except PoolError as exc:
        print(f"pool_bench: {exc}", file=sys.stderr)
        return 2
    paths = write_report(results, meta, args.out, args.docs)
    print(f"{len(results)} runs, {meta['repeats']} repeats from {len(args.reports)} reports: " + ", ".join(map(str, paths.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
