"""Auto against plain decoding, replayed over a traces file's replies under recorded machines' costs: the
geometric mean, the worst reply, how many fall below 0.95x, and the first token's extra wait, per category.

    python scripts/replay_wide.py TRACES [TRACES ...] [--drafter lookup+model]

Profiles: a 2-core AMD EPYC (wide/epyc_2core_costs.json, calibrated at load), the Xeon with AMX (resources/bench/amx_traces.jsonl's header), the Zen 5 (zen5_traces.jsonl), the same
Xeon with batched blocks 20% cheaper (a machine where a rejected long draft is cheap enough that Auto is not
cautious, as a build with repacking can be), and issue 9's GPU and Apple profiles.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.decoding.replay import (  # noqa: E402
    PROFILES,
    CostProfile,
    auto_policy,
    fixed_policy,
    load_traces,
    recorded_profile,
    simulate,
)

BENCH = Path(__file__).resolve().parent.parent / "resources" / "bench"


def cheaper_blocks(profile: CostProfile, factor: float) -> CostProfile:
    return CostProfile(f"{profile.name} blocks x{factor}", lambda n: profile.verify(n) * (factor if n > 1 else 1.0),
                       profile.draft_step, profile.catchup, profile.overhead)


def profiles() -> dict[str, CostProfile]:
    xeon = recorded_profile(load_traces(BENCH / "amx_traces.jsonl")[0])
    zen5 = recorded_profile(load_traces(BENCH / "zen5_traces.jsonl")[0])
    epyc = recorded_profile(json.loads((BENCH / "wide" / "epyc_2core_costs.json").read_text(encoding="utf-8")))
    return {"epyc": epyc, "xeon": xeon, "zen5": zen5, "xeon-cheap-blocks": cheaper_blocks(xeon, 0.8),
            "gpu": PROFILES["gpu"], "apple": PROFILES["apple"]}


def report(traces, drafter: str) -> dict[str, dict]:
    out = {}
    for name, prof in profiles().items():
        ratios, waits, cats = [], [], defaultdict(list)
        for t in traces:
            a = simulate(t, prof, auto_policy(drafter), drafter)
            p = simulate(t, prof, fixed_policy(0), drafter)
            r = a.rate / p.rate
            ratios.append(r)
            cats[t.category].append(r)
            waits.append((a.first_token_s - p.first_token_s) / prof.verify(1))
        out[name] = {"geomean": float(np.exp(np.mean(np.log(ratios)))), "worst": min(ratios),
                     "below_0.95": sum(x < 0.95 for x in ratios), "n": len(ratios),
                     "first_token_wait_steps_median": statistics.median(waits), "first_token_wait_steps_max": max(waits),
                     "late_first_tokens": sum(w > 0.5 for w in waits),
                     "categories": {c: float(np.exp(np.mean(np.log(v)))) for c, v in sorted(cats.items())}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", type=Path, nargs="+")
    ap.add_argument("--drafter", default="lookup+model")
    args = ap.parse_args()
    for path in args.traces:
        _, traces = load_traces(path)
        print(f"== {path} ({len(traces)} replies, {args.drafter})")
        for name, row in report(traces, args.drafter).items():
            cats = ", ".join(f"{c} {v:.3f}" for c, v in row["categories"].items())
            print(f"{name:18s} geomean {row['geomean']:.3f}  worst {row['worst']:.3f}  below 0.95x {row['below_0.95']}/{row['n']}  "
                  f"first-token wait (plain steps) median {row['first_token_wait_steps_median']:.2f} max "
                  f"{row['first_token_wait_steps_max']:.2f}, late (>0.5 step) {row['late_first_tokens']}\n    {cats}")


if __name__ == "__main__":
    main()
