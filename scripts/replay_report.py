"""Auto against the best fixed draft length in hindsight, per cost profile (issue 9's goals).

    python scripts/replay_report.py [--traces resources/bench/traces.jsonl] [--cases]

Replays every trace (synthetic, and recorded ones with the model, lookup and both drafters) under
every cost profile of engine/decoding/replay.py and prints, per profile: the geometric mean and
minimum of Auto / best fixed k, the misses (< 0.95), Auto / plain where plain (k = 0) is best (goal
>= 0.98), and after each regime change (acceptance 0.2 -> 0.9 -> 0.2) the rounds until every k Auto
picks is within 10% of the best expected speed (goal <= 64). Costs are simulated: the figures do not
depend on the machine or its load.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.decoding.replay import K_MAX, REGIME, REGIME_CHANGES, CostProfile, all_cases, auto_policy, compare, simulate

TRACES = Path(__file__).resolve().parent.parent / "resources" / "bench" / "traces.jsonl"


def rate_of(k: int, p: float, profile: CostProfile) -> float:
    """Expected tokens per unit time of a fixed k when every guess is right with probability p."""
    return sum(p ** i for i in range(k + 1)) / (profile.verify(k + 1) + k * profile.draft_step)


def rounds_to_follow(profile: CostProfile) -> list[int | None]:
    """Per regime change: rounds after it until every k Auto picks (to the segment's end) is within
    10% of the best expected speed (None: not even at the end)."""
    sim = simulate(REGIME, profile, auto_policy("model"), "model")
    starts = np.cumsum([0] + [a + 1 for a in sim.accepted])
    out = []
    for change, stop, p in REGIME_CHANGES:
        first, last = int(np.searchsorted(starts, change)), int(np.searchsorted(starts, stop)) - 1
        best = max(rate_of(k, p, profile) for k in range(K_MAX + 1))
        good = [rate_of(k, p, profile) >= 0.9 * best for k in sim.ks[first:last]]
        bad = [i for i, ok in enumerate(good) if not ok]
        out.append(0 if not bad else (bad[-1] + 1 if bad[-1] + 1 < len(good) else None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", type=Path, default=TRACES)
    ap.add_argument("--cases", action="store_true", help="also list every miss")
    args = ap.parse_args()
    cases = all_cases(args.traces)
    results = [compare(*c) for c in cases]
    by_name = {pname: profile for pname, profile, _, _ in cases}
    head = f"{'profile':<18}{'cases':>6}{'geomean':>9}{'min':>7}{'misses':>8}{'k=0':>5}{'min/plain':>10}{'<0.98':>6}  regime (rounds)"
    print(head)
    print("-" * len(head))
    every = []
    for pname, profile in by_name.items():
        rs = [r for r in results if r.profile == pname]
        every += rs
        ratios = np.array([r.vs_best for r in rs])
        plain = [r.vs_plain for r in rs if r.best_k == 0]
        follow = " / ".join("never" if f is None else str(f) for f in rounds_to_follow(profile))
        print(f"{pname:<18}{len(rs):>6}{np.exp(np.log(ratios).mean()):>9.3f}{ratios.min():>7.3f}"
              f"{int((ratios < 0.95).sum()):>8}{len(plain):>5}{min(plain, default=float('nan')):>10.3f}"
              f"{sum(p < 0.98 for p in plain):>6}  {follow}")
    ratios = np.array([r.vs_best for r in every])
    plain = [r.vs_plain for r in every if r.best_k == 0]
    print(f"{'all':<18}{len(every):>6}{np.exp(np.log(ratios).mean()):>9.3f}{ratios.min():>7.3f}"
          f"{int((ratios < 0.95).sum()):>8}{len(plain):>5}{min(plain, default=float('nan')):>10.3f}"
          f"{sum(p < 0.98 for p in plain):>6}")
    if args.cases:
        print("\nmisses (Auto / best fixed k < 0.95, or < 0.98 of plain where k = 0 is best):")
        for r in sorted(every, key=lambda r: r.vs_best):
            if r.vs_best < 0.95 or (r.best_k == 0 and r.vs_plain < 0.98):
                print(f"  {r.profile:<18}{r.case:<36} best k {r.best_k:>2}  vs best {r.vs_best:.3f}  vs plain {r.vs_plain:.3f}")


if __name__ == "__main__":
    main()
