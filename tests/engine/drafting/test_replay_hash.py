"""scripts/replay_hash.py as a person runs it: one line, the same for the same traces, another when one reply's
acceptance differs (the hash is only worth having if a changed decision changes it)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "replay_hash.py"
REPORT_HALF = ROOT / "resources" / "bench" / "wide" / "report_traces.jsonl"


def run(path: Path) -> str:
    done = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0 and not done.stderr, done.stderr
    return done.stdout.strip()


def test_the_same_traces_hash_the_same_and_a_changed_reply_does_not(tmp_path):
    first = run(REPORT_HALF)
    # 45 replies x 6 cost profiles x 3 drafters, and a sha256
    assert re.fullmatch(r"810 replies [0-9a-f]{64}", first), first
    assert run(REPORT_HALF) == first
    lines = REPORT_HALF.read_text(encoding="utf-8").splitlines()
    reply = json.loads(lines[1])
    reply["model_match"] = "0" + reply["model_match"][1:]  # the drafter now misses the first token of one reply
    changed = tmp_path / "report_traces.jsonl"
    changed.write_text("\n".join([lines[0], json.dumps(reply), *lines[2:]]) + "\n", encoding="utf-8")
    again = run(changed)
    assert again.split()[:2] == ["810", "replies"] and again != first
