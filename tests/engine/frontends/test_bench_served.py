"""`python -m engine bench --served`: a row for the served path beside the same variant run directly."""
from __future__ import annotations

import json

from test_cli import engine


def test_bench_served_row_matches_the_direct_variant(tiny, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p, "category": "chat"}) + "\n"
                               for p in ("the model is fast", "python code token draft")))
    out = tmp_path / "out"
    r = engine("bench", "--target", str(tiny["target"]), "--draft", f"{tiny['drafter']}@3", "--prompts", str(prompts),
               "--max-tokens", "24", "--repeats", "2", "--served", "--out", str(out))
    assert r.returncode == 0, r.stderr
    report = json.loads((out / "report.json").read_text())
    assert set(report["summary"]["table"]["all"]) == {"plain", "plain (control)", "tiny-drafter k=3",
                                                      "tiny-drafter k=3 (served)"}
    runs = report["runs"]
    direct = {(x["prompt_id"], x["repeat"]): x for x in runs if x["variant"] == "tiny-drafter k=3"}
    served = {(x["prompt_id"], x["repeat"]): x for x in runs if x["variant"] == "tiny-drafter k=3 (served)"}
    assert direct.keys() == served.keys() and len(served) == 4
    for key, s in served.items():
        d = direct[key]
        # The same greedy reply and the same rounds, drafted and accepted, through HTTP as without it.
        assert s["same_as_plain"] == d["same_as_plain"] and s["tokens"] == d["tokens"] > 0
        assert [rd[1:3] for rd in s["rounds"]] == [rd[1:3] for rd in d["rounds"]]
        assert s["acceptance_rate"] == d["acceptance_rate"] and s["tokens_per_s"] > 0 and s["ttft_s"] > 0
    table = report["summary"]["table"]["all"]
    assert table["tiny-drafter k=3 (served)"]["greedy_equal"] == table["tiny-drafter k=3"]["greedy_equal"]
    assert "| all | tiny-drafter k=3 (served) |" in (out / "report.md").read_text()
