"""The catalog file parses, every entry is complete, and the recommended pairs are there."""
from __future__ import annotations

import json
import re

import pytest

from engine.models import catalog
from engine.models.catalog import CatalogError, find_pair, load_catalog


def test_every_entry_is_complete():
    pairs = load_catalog()
    assert len(pairs) >= 5
    for p in pairs:
        assert p.id and p.title and p.license and p.hardware and p.notes and p.min_memory_gb > 0
        for f in p.files:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+", f.repo_id), f.repo_id
            assert f.filename.endswith(".gguf") and f.revision
            assert f.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", f.sha256)
            assert f.size_bytes is None or f.size_bytes > 0
            assert f.display_bytes, f"{p.id}: {f.filename} has no size to show"
        if all(f.size_bytes for f in p.files):
            assert p.target.size_bytes > p.drafter.size_bytes


def _by_file(pairs):
    return {(p.target.filename, p.drafter.filename): p for p in pairs}


def test_the_recommended_pairs_are_there():
    files = _by_file(load_catalog())
    qwen_drafter = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert ("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", qwen_drafter) in files
    assert ("qwen2.5-coder-7b-instruct-q4_k_m.gguf", qwen_drafter) in files
    assert ("Llama-3.2-3B-Instruct-Q4_K_M.gguf", "Llama-3.2-1B-Instruct-Q4_K_M.gguf") in files
    assert ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", "Llama-3.2-1B-Instruct-Q4_K_M.gguf") in files
    gemma = [p for (t, d), p in files.items() if t.startswith("gemma-3-") and "270m" in d]
    assert gemma and gemma[0].license == "Gemma Terms of Use"
    for p in files.values():
        if p.target.filename.startswith("qwen2.5-coder"):
            assert p.target.repo_id.startswith("Qwen/Qwen2.5-Coder-") and p.target.repo_id.endswith("-Instruct-GGUF")


def test_current_reasoning_families_pair_with_their_smallest_sibling():
    files = _by_file(load_catalog())
    drafter = "Qwen3-0.6B-Q8_0.gguf"
    for target, repo in (("Qwen3-8B-Q4_K_M.gguf", "Qwen/Qwen3-8B-GGUF"), ("Qwen3-4B-Q4_K_M.gguf", "Qwen/Qwen3-4B-GGUF"),
                         ("Qwen3-1.7B-Q8_0.gguf", "Qwen/Qwen3-1.7B-GGUF")):
        p = files[(target, drafter)]
        assert p.target.repo_id == repo and p.drafter.repo_id == "Qwen/Qwen3-0.6B-GGUF" and p.license == "Apache-2.0"
        # No size or hash is written down: both come from the hub's file metadata at download, and are checked.
        assert (p.target.size_bytes, p.target.sha256, p.drafter.size_bytes, p.drafter.sha256) == (None,) * 4
        assert p.target.display_bytes > p.drafter.display_bytes
        assert "think" in p.notes


def test_known_hashes_and_sizes_are_those_of_the_design_notes():
    f = {x.filename: x for p in load_catalog() for x in p.files}
    assert f["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"].sha256 == \
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert f["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"].size_bytes == 1_117_320_768
    assert f["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"].sha256 == \
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert f["qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"].size_bytes == 491_400_064


def test_find_pair_and_the_default():
    assert find_pair("qwen2.5-coder-7b").target.repo_id == "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF"
    assert catalog.default_pair_id() == "qwen2.5-coder-1.5b"
    with pytest.raises(CatalogError, match=r"no pair 'gpt-5' in the catalog \(known: qwen2.5-coder-1.5b, "):
        find_pair("gpt-5")


def _write(tmp_path, data) -> object:
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def _good() -> dict:
    return json.loads(catalog.catalog_path().read_text(encoding="utf-8"))


@pytest.mark.parametrize("damage, message", [
    (lambda d: d["pairs"][1].pop("license"), r"entry 'qwen2.5-coder-7b' has no license"),
    (lambda d: d["pairs"][0]["target"].pop("repo_id"), r"entry 'qwen2.5-coder-1.5b' target has no repo_id"),
    (lambda d: d["pairs"][2]["drafter"].update(filename="model.bin"), r"is not a .gguf file"),
    (lambda d: d["pairs"][2]["drafter"].update(sha256="abc"), r"sha256 must be 64 lower-case hex digits"),
    (lambda d: d["pairs"][3]["target"].update(size_bytes=-1), r"size_bytes must be a positive integer"),
    (lambda d: d["pairs"].append(d["pairs"][0]), r"id 'qwen2.5-coder-1.5b' appears twice"),
    (lambda d: d["pairs"][1]["drafter"].update(size_bytes=5), r"is described two different ways"),
    (lambda d: d.pop("pairs"), r"has no list of pairs"),
])
def test_a_damaged_catalog_names_the_problem(tmp_path, damage, message):
    data = _good()
    damage(data)
    with pytest.raises(CatalogError, match=message):
        load_catalog(_write(tmp_path, data))


def test_a_catalog_that_is_not_json(tmp_path):
    with pytest.raises(CatalogError, match="cannot be read"):
        load_catalog(_write(tmp_path, "{oops"))
    with pytest.raises(CatalogError, match="catalog not found"):
        load_catalog(tmp_path / "missing.json")
