"""One hash of Auto's decisions over saved traces: every round's draft length and tokens kept, and each reply's
seconds, verdict and certainty, replayed under every cost profile of replay_wide.py and every drafter. A change
meant to leave the decisions alone (a faster way to the same prices) prints the same hash before and after.

    python scripts/replay_hash.py [TRACES ...]      # default: every traces file under resources/bench
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_wide import BENCH, profiles  # noqa: E402

from engine.decoding.replay import auto_policy, load_traces, simulate  # noqa: E402

DRAFTERS = ("lookup+model", "model", "lookup")


def decisions_hash(paths: list[Path]) -> tuple[int, str]:
    """(replies simulated, the sha256 of their rounds) over `paths`, every profile and every drafter."""
    digest, n, costs = hashlib.sha256(), 0, profiles()
    for path in paths:
        _, traces = load_traces(path)
        for pname, profile in costs.items():
            for trace in traces:
                for drafter in DRAFTERS:
                    r = simulate(trace, profile, auto_policy(drafter), drafter, control=True)
                    digest.update(repr((path.name, pname, trace.name, drafter, r.ks, r.accepted, r.seconds,
                                        r.estimated_speedup, str(r.certainty))).encode())
                    n += 1
    return n, digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    args = parser.parse_args(argv)
    paths = args.traces or sorted(BENCH.glob("**/*traces.jsonl"))
    n, digest = decisions_hash(paths)
    print(f"{n} replies {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
