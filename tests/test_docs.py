"""The documents a newcomer reads: the README stays short, every relative link and anchor in README.md,
docs/ and the results' READMEs leads somewhere, no internal round label is left in the tree, and the
rooms drawn in docs/development.md are the ones the imports make."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from tree import ROOT

#: Internal session labels ("stop" and a round number), which mean nothing to a reader.
LABEL = re.compile(r"stops? ?[1-4][0-9]|stop[1-4][0-9]|this[ ]stop", re.IGNORECASE)
LINK = re.compile(r"\]\(([^)\s]+)\)")
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules", "build", "dist", ".gpu"}


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted((ROOT / "resources" / "bench" / "results").rglob("README.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    out, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def links(path: Path) -> list[str]:
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out += LINK.findall(line)
    return out


def project_files() -> list[Path]:
    """The files of the project: git's list where there is one, else every file outside caches."""
    try:
        names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
        return [ROOT / n for n in names.decode().split("\0") if n and (ROOT / n).is_file()]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in ROOT.rglob("*") if p.is_file() and not SKIPPED_DIRS & set(p.relative_to(ROOT).parts)]


def test_the_slug_is_githubs():
    assert slug("Do the tests bite? Mutation testing") == "do-the-tests-bite-mutation-testing"
    assert slug("Chats against llama.cpp's draftless modes") == "chats-against-llamacpps-draftless-modes"
    assert slug("Auto: pricing every draft length") == "auto-pricing-every-draft-length"


def test_the_readme_is_read_in_five_minutes():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 300


@pytest.mark.parametrize("doc", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(doc: Path):
    broken = []
    for target in links(doc):
        if re.match(r"[a-z]+:", target):  # http, https, mailto: not checked offline
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
            broken.append(target)
    assert not broken, broken


def test_no_round_labels_in_any_file_or_path():
    found = []
    for path in project_files():
        rel = path.relative_to(ROOT).as_posix()
        if LABEL.search(rel):
            found.append(rel)
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # images, models
        found += [f"{rel}: {m.group(0)!r}" for m in LABEL.finditer(text)]
    assert not found, found[:20]


def test_the_rooms_in_development_md_are_the_codes():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "rooms.py"), "--check"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
