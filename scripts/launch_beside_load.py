"""Launch to Ready beside a process using half a core, from a fresh calibration store: the first launch measures,
later ones must take what it kept (quiet or provisional) and be ready within llama.cpp's load plus a second.

    .venv/bin/python scripts/launch_beside_load.py [--launches 3] [--home DIR] [--target T.gguf --draft D.gguf]

Loads the real pair (default: the installed default pair) in a temporary home, so nothing of yours changes
except that the drafter's copy for this CPU, if any, is read from (and made once in) your cache as the app does.
"Load only" is the same Session with calibrate=False: llama.cpp's load, the opening read and nothing timed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HALF_CORE = ("import time, os, sys\nparent = os.getppid()\nprint('spinning', flush=True)\n"
             "while os.getppid() == parent:\n    end = time.perf_counter() + 0.02\n"
             "    while time.perf_counter() < end: pass\n    time.sleep(0.02)\n")


def main() -> int:
    from engine import paths
    from engine.llama import cpu_weights

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, default=paths.models_dir() / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--draft", type=Path, default=paths.models_dir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--home", type=Path, help="a home of an earlier run (its calibration store): no fresh first launch")
    args = ap.parse_args()
    os.environ.setdefault("DRAFTLIGHT_CPU_WEIGHTS", str(cpu_weights.folder()))  # the person's copies, not new ones
    home = args.home or Path(tempfile.mkdtemp(prefix="draftlight-launch-"))  # a fresh calibration store
    os.environ["DRAFTLIGHT_HOME"] = str(home)
    print(f"home: {home}")

    from engine.decoding.session import Session
    from engine.llama import calibration

    busy = subprocess.Popen([sys.executable, "-c", HALF_CORE], stdout=subprocess.PIPE, text=True)
    assert busy.stdout.readline().strip() == "spinning"
    try:
        def launch(calibrate: bool) -> tuple[float, Session]:
            t = time.perf_counter()
            s = Session(args.target, str(args.draft), calibrate=calibrate)
            return time.perf_counter() - t, s

        # Each launch is followed by a load that measures nothing: the load on a shared machine drifts.
        launches, loads = [], []
        for i in range(args.launches):
            seconds, s = launch(True)
            kt = calibration.load(s._key(s.target))
            launches.append(seconds)
            print(f"launch {i + 1}: ready in {seconds:.2f} s; target passes timed {s.target.passes}, kept: "
                  f"{'quiet' if kt and kt['quiet'] else 'provisional'}; provisional in use: "
                  f"{s.provisional_calibration or 'none'}", flush=True)
            s.close()
            seconds, s = launch(False)
            loads.append(seconds)
            s.close()
            print(f"  load only (calibrate=False): {seconds:.2f} s", flush=True)
        later = [a - b for a, b in zip(launches, loads)][0 if args.home else 1:]
        if later:
            print(f"launch over load only, from the second launch on: {', '.join(f'{x:+.2f}' for x in later)} s")
    finally:
        busy.kill()
        busy.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
