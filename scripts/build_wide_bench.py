"""Rebuild resources/bench/wide/prompts.jsonl: prompts from public benchmarks this project never tuned on.

    python scripts/build_wide_bench.py SOURCES_DIR [--out resources/bench/wide/prompts.jsonl]

SOURCES_DIR holds one folder per repository, named OWNER+NAME (resources/bench/wide/SOURCES.md lists them and the
commit each was read at), either a bare git clone in OWNER+NAME/repo (read at that commit) or the files themselves
at their paths under OWNER+NAME/. Every choice is drawn with random.Random(SEED), and so is the split into halves:
the same sources give the same file, byte for byte.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import subprocess
import sys
from pathlib import Path

SEED = 43
#: Each repository and the commit its files were read at.
SOURCES = {
    "openai/grade-school-math": "3101c7d5072418e28b9008a6636bde82a006892c",
    "openai/human-eval": "6d43fb980f9fee3c892a914eda09951f772ad10d",
    "lm-sys/FastChat": "0e6d3e4beaab66f4d3f93db72541a4abab8af28d",
    "tatsu-lab/alpaca_eval": "cd543a149df89434d8a54582c0151c0b945c3d20",
    "wmt-conference/wmt23-news-systems": "99b5b9de2a535c2c5542fd4ec404682903299894",
    "Yale-LILY/QMSum": "83d7768c1f2b4dfeb091385d3dc7e239b8e5bb7e",
}
#: The half Auto's rules are tuned on; the other half only reports.
TUNE, REPORT = "tune", "report"
#: Long-context prompts are cut to about this many characters of transcript (~2,000 tokens: the bench's --ctx
#: 4096 holds them with the reply).
LONG_CHARS = 8000


class Sources:
    def __init__(self, root: Path) -> None:
        self.root = root

    def read(self, repo: str, path: str) -> bytes:
        folder = self.root / repo.replace("/", "+")
        git = folder / "repo"
        if git.exists():
            return subprocess.run(["git", "-C", str(git), "show", f"{SOURCES[repo]}:{path}"], check=True,
                                  capture_output=True).stdout
        return (folder / path).read_bytes()

    def text(self, repo: str, path: str) -> str:
        return self.read(repo, path).decode("utf-8")

    def jsonl(self, repo: str, path: str) -> list[dict]:
        data = self.read(repo, path)
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def _pick(rng: random.Random, items: list, n: int) -> list:
    return rng.sample(items, n)


def gsm8k(src: Sources, rng: random.Random) -> list[dict]:
    rows = src.jsonl("openai/grade-school-math", "grade_school_math/data/test.jsonl")
    idx = _pick(rng, range(len(rows)), 14)
    out = [{"id": f"gsm8k-{i}", "category": "math word problem", "source": "GSM8K test",
            "prompt": rows[i]["question"] + "\nSolve it step by step."} for i in idx[:8]]
    out += [{"id": f"gsm8k-short-{i}", "category": "short answer", "source": "GSM8K test",
             "prompt": rows[i]["question"] + "\nReply with the final number only."} for i in idx[8:]]
    return out


def humaneval(src: Sources, rng: random.Random) -> list[dict]:
    rows = src.jsonl("openai/human-eval", "data/HumanEval.jsonl.gz")
    return [{"id": r["task_id"].replace("/", "-").lower(), "category": "code completion", "source": "HumanEval",
             "prompt": "Complete this Python function. Reply with the whole function in a code block.\n\n```python\n"
                       + r["prompt"].strip("\n") + "\n```"} for r in _pick(rng, rows, 8)]


def mt_bench(src: Sources, rng: random.Random) -> list[dict]:
    base = "fastchat/llm_judge/data/mt_bench/"
    qs = src.jsonl("lm-sys/FastChat", base + "question.jsonl")
    refs = {r["question_id"]: r["choices"][0]["turns"] for r in src.jsonl("lm-sys/FastChat", base + "reference_answer/gpt-4.jsonl")}
    by = lambda *cats: [q for q in qs if q["category"] in cats]  # noqa: E731
    out = []
    for q in _pick(rng, by("writing", "roleplay"), 8):
        out.append({"id": f"mtbench-{q['question_id']}", "category": "creative writing", "source": "MT-bench",
                    "prompt": q["turns"][0]})
    for q in _pick(rng, by("extraction"), 8):
        out.append({"id": f"mtbench-{q['question_id']}", "category": "extraction", "source": "MT-bench",
                    "prompt": q["turns"][0]})
    for q in _pick(rng, by("stem", "humanities"), 8):
        out.append({"id": f"mtbench-{q['question_id']}", "category": "explanation", "source": "MT-bench",
                    "prompt": q["turns"][0]})
    with_refs = [q for q in by("math", "reasoning", "coding") if q["question_id"] in refs]
    chats = _pick(rng, with_refs, 8)
    for q in chats:  # the second turn after the reference answer to the first
        out.append({"id": f"mtbench-{q['question_id']}-turn2", "category": "multi-turn chat", "source": "MT-bench",
                    "messages": [{"role": "user", "content": q["turns"][0]},
                                 {"role": "assistant", "content": refs[q["question_id"]][0]},
                                 {"role": "user", "content": q["turns"][1]}]})
    for q in _pick(rng, [q for q in with_refs if q not in chats and q["category"] != "coding" and len(q["turns"][0]) < 400], 4):
        out.append({"id": f"mtbench-{q['question_id']}-short", "category": "short answer", "source": "MT-bench",
                    "prompt": q["turns"][0] + "\nGive only the answer, in a few words."})
    return out


def alpaca_eval(src: Sources, rng: random.Random) -> list[dict]:
    rows = json.loads(src.text("tatsu-lab/alpaca_eval", "results/gpt4/model_outputs.json"))
    idx = _pick(rng, [i for i, r in enumerate(rows) if len(r["instruction"]) < 600], 8)
    return [{"id": f"alpacaeval-{i}", "category": "open instruction", "source": f"AlpacaEval ({rows[i]['dataset']})",
             "prompt": rows[i]["instruction"]} for i in idx]


def _documents(lines: list[str]) -> list[list[str]]:
    """WMT23 general test sources, one segment a line, split into documents at their headlines (a short line
    without final punctuation)."""
    docs: list[list[str]] = []
    for line in lines:
        if not docs or (len(line) < 90 and not re.search(r"[.!?\"”»:]$", line.strip())):
            docs.append([])
        docs[-1].append(line.strip())
    return docs


def wmt23(src: Sources, rng: random.Random) -> list[dict]:
    out = []
    for pair, ask, src_lang in (("en-de", "Translate into German:", "en"), ("de-en", "Translate into English:", "de")):
        lines = src.text("wmt-conference/wmt23-news-systems", f"txt/sources/generaltest2023.{pair}.src.{src_lang}").splitlines()
        # A passage: two or three consecutive segments of one news document (not a headline), 150-500 characters.
        starts = [i for i in range(len(lines) - 3) if 150 <= sum(len(x) for x in lines[i:i + 2]) <= 500
                  and all(len(x) >= 40 and x.strip()[-1:] in ".!?\"”»" for x in lines[i:i + 2])]
        for i in sorted(_pick(rng, starts, 6)):
            out.append({"id": f"wmt23-{pair}-{i}", "category": f"translation {pair}", "source": "WMT23 general test",
                        "prompt": f"{ask}\n\n" + " ".join(lines[i:i + 2])})
    return out


def _transcript(turns: list[dict]) -> str:
    return "\n".join(f"{t['speaker']}: {t['content']}" for t in turns)


def qmsum(src: Sources, rng: random.Random) -> list[dict]:
    meetings = src.jsonl("Yale-LILY/QMSum", "data/ALL/jsonl/test.jsonl")
    summaries, questions = [], []
    for m, meeting in enumerate(meetings):
        for q, query in enumerate(meeting["specific_query_list"]):
            a, b = (int(x) for x in query["relevant_text_span"][0])
            item = (m, q, a, b)
            if query["query"].lower().startswith("summarize"):
                if 600 <= len(_transcript(meeting["meeting_transcripts"][a:b + 1])) <= 4000:
                    summaries.append(item)
            elif re.match(r"(what|why|how|did|which|who)\b", query["query"].lower()):
                questions.append(item)
    out = []
    for m, q, a, b in _pick(rng, summaries, 6):
        meeting, query = meetings[m], meetings[m]["specific_query_list"][q]
        out.append({"id": f"qmsum-test-{m}-{q}", "category": "summarisation", "source": "QMSum test",
                    "prompt": f"Here is part of a meeting transcript.\n\n{_transcript(meeting['meeting_transcripts'][a:b + 1])}"
                              f"\n\n{query['query']} Keep it to a short paragraph."})
    for m, q, a, b in _pick(rng, questions, 6):
        meeting, query = meetings[m], meetings[m]["specific_query_list"][q]
        turns = meeting["meeting_transcripts"]
        # From a few turns before the span, as many whole turns as fit LONG_CHARS: the answer lies inside.
        start = max(0, a - 3)
        end = start
        while end < len(turns) and len(_transcript(turns[start:end + 1])) <= LONG_CHARS:
            end += 1
        out.append({"id": f"qmsum-test-{m}-{q}-long", "category": "long-context QA", "source": "QMSum test",
                    "prompt": f"Read this meeting transcript and answer the question after it.\n\n{_transcript(turns[start:end])}"
                              f"\n\nQuestion: {query['query']}"})
    return out


def build(root: Path) -> list[dict]:
    src = Sources(root)
    rows = []
    for part in (gsm8k, humaneval, mt_bench, alpaca_eval, wmt23, qmsum):
        rows += part(src, random.Random(f"{SEED}-{part.__name__}"))  # one stream per source: adding one moves no other
    split = random.Random(f"{SEED}-halves")
    for cat in sorted({r["category"] for r in rows}):  # half of each category tunes, drawn once
        members = sorted((r for r in rows if r["category"] == cat), key=lambda r: r["id"])
        split.shuffle(members)
        for i, r in enumerate(members):
            r["half"] = TUNE if i % 2 == 0 else REPORT
    return sorted(rows, key=lambda r: (r["category"], r["id"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", type=Path, help="folder with one OWNER+NAME folder per repository")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "resources" / "bench" / "wide" / "prompts.jsonl")
    args = ap.parse_args()
    rows = build(args.sources)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    cats = sorted({r["category"] for r in rows})
    print(f"{len(rows)} prompts in {len(cats)} categories -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
