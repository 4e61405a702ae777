"""The model folder: listing, importing, the registry, and pairing from metadata (no weights loaded)."""
from __future__ import annotations

import os
import shutil
from dataclasses import replace

import pytest
from tiny_models import DRAFTER, TARGET, write_tiny_model

from engine.models import modelstore
from engine.models.default_pair import installed_pair
from engine.errors import ModelFileError
from tree import ROOT


@pytest.fixture
def folder(isolated_home):
    return modelstore.models_folder()


def test_models_folder_follows_the_overrides(isolated_home, tmp_path, monkeypatch):
    assert modelstore.models_folder() == isolated_home / "data" / "models"
    assert modelstore.models_folder().is_dir()
    monkeypatch.setenv("DRAFTLIGHT_MODELS", str(tmp_path / "elsewhere"))
    assert modelstore.models_folder() == tmp_path / "elsewhere"


def test_import_copies_validates_and_describes(folder, tiny):
    assert modelstore.list_models() == []
    rec = modelstore.import_model(tiny["target"])
    assert rec.path == folder / "tiny-target.gguf" and rec.path.read_bytes() == tiny["target"].read_bytes()
    assert (rec.name, rec.architecture, rec.quantization, rec.context_length) == ("tiny-target", "llama", "F32", 1024)
    assert rec.vocab_size == 523 and rec.chat_template and rec.n_layers == 3 and rec.source == "imported"
    assert rec.sha256 == modelstore.sha256_of(tiny["target"])  # hashed while copying, kept in the registry
    assert modelstore.list_models() == [rec]
    assert [p.name for p in folder.iterdir() if p.name.startswith(".") and p.suffix == ".tmp"] == []


def test_importing_the_same_file_twice_keeps_one_copy(folder, tiny):
    a = modelstore.import_model(tiny["target"])
    b = modelstore.import_model(tiny["target"])
    assert a.path == b.path and len(modelstore.list_models()) == 1


def test_importing_a_file_already_in_the_folder_keeps_its_record(folder, tiny):
    dest = folder / "tiny-target.gguf"
    dest.write_bytes(tiny["target"].read_bytes())
    modelstore.register(dest, "catalog:tiny", "ab" * 32)
    rec = modelstore.import_model(dest)
    assert (rec.path, rec.source, rec.sha256) == (dest, "catalog:tiny", "ab" * 32)


def test_a_different_model_with_the_same_name_gets_a_new_name(folder, tiny, tmp_path):
    modelstore.import_model(tiny["target"])
    other = tmp_path / "other" / "tiny-target.gguf"
    other.parent.mkdir()
    shutil.copy(tiny["drafter"], other)
    rec = modelstore.import_model(other)
    assert rec.path.name == "tiny-target-2.gguf"
    assert sorted(r.path.name for r in modelstore.list_models()) == ["tiny-target-2.gguf", "tiny-target.gguf"]


def test_register_in_place_lists_without_copying(folder, tiny):
    rec = modelstore.import_model(tiny["drafter"], copy=False)
    assert rec.path == tiny["drafter"].resolve() and not (folder / "tiny-drafter.gguf").exists()
    assert [r.path for r in modelstore.list_models()] == [rec.path]
    modelstore.remove_model(rec.path)  # forgotten, never deleted: it is not ours
    assert modelstore.list_models() == [] and tiny["drafter"].exists()


def test_a_bad_file_is_refused_before_anything_is_written(folder, tmp_path, tiny):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(tiny["target"].read_bytes()[:500_000])
    with pytest.raises(ModelFileError, match="is truncated"):
        modelstore.import_model(bad)
    assert list(folder.iterdir()) == []


def test_listing_never_offers_partial_temporary_or_damaged_files(folder, tiny):
    good = modelstore.import_model(tiny["target"])
    whole = tiny["drafter"].read_bytes()
    (folder / modelstore.PARTIAL_DIR).mkdir()
    (folder / modelstore.PARTIAL_DIR / "tiny-drafter.gguf.abc.part").write_bytes(whole)  # even when complete
    (folder / "tiny-drafter.gguf.incomplete").write_bytes(whole)
    (folder / "tiny-drafter.gguf.part").write_bytes(whole)
    (folder / ".tiny-drafter.gguf.1234abcd.tmp").write_bytes(whole)
    (folder / ".hidden.gguf").write_bytes(whole)
    (folder / "half.gguf").write_bytes(whole[: len(whole) // 2])
    records, problems = modelstore.scan()
    assert records == [good]
    assert [(p.name, "truncated" in why) for p, why in problems] == [("half.gguf", True)]
    assert [p.name for p, _ in modelstore.partial_downloads()] == ["tiny-drafter.gguf.abc.part"]


def test_a_damaged_registry_does_not_hide_models(folder, tiny):
    modelstore.import_model(tiny["target"])
    (folder / modelstore.REGISTRY_FILE).write_text("{not json", encoding="utf-8")
    (rec,) = modelstore.list_models()
    assert rec.source == "imported" and rec.sha256 is None


def test_a_changed_file_loses_its_recorded_hash(folder, tiny):
    rec = modelstore.import_model(tiny["target"])
    assert modelstore.known_sha256(rec.path) is not None
    st = rec.path.stat()
    os.utime(rec.path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert modelstore.known_sha256(rec.path) is None
    assert modelstore.verify(rec.path).source == "imported"  # the source survives, the hash does not


def test_verify_names_the_problem(tmp_path):
    with pytest.raises(ModelFileError, match="model file not found"):
        modelstore.verify(tmp_path / "nothing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all" * 10)
    with pytest.raises(ModelFileError, match="is not a GGUF model"):
        modelstore.verify(junk)


# -- pairing ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def variants(tmp_path_factory, tiny):
    """A bigger target (so a small drafter is worth it) and drafters that break one rule each."""
    d = tmp_path_factory.mktemp("variants")
    big = replace(TARGET, name="tiny-big-target", n_layer=8, quiet_from=99)
    return {
        "big-target": write_tiny_model(d / "big-target.gguf", big),
        "one-layer": write_tiny_model(d / "one-layer.gguf", replace(big, name="one-layer", n_layer=1)),
        "two-layer": write_tiny_model(d / "two-layer.gguf", replace(DRAFTER, name="two-layer")),
        "extra-tokens": write_tiny_model(d / "extra.gguf", replace(DRAFTER, name="extra", extra_tokens=200)),
        "bos": write_tiny_model(d / "bos.gguf", replace(DRAFTER, name="bos", bos_id=2)),
        "twin": write_tiny_model(d / "twin.gguf", replace(big, name="twin")),
        "other-vocab": tiny["other-vocab"],
    }


def test_pair_options_list_compatible_drafters_smallest_first_and_say_why_not(variants):
    cands = [modelstore.verify(p) for k, p in variants.items() if k != "big-target"]
    opts = modelstore.pair_options(variants["big-target"], cands)
    names = [(o.drafter.name, o.compatible) for o in opts]
    assert names[:3] == [("one-layer", True), ("two-layer", True), ("twin", True)]
    assert {n for n, ok in names[3:]} == {"extra", "bos", "tiny-other-vocab"} and not any(ok for _, ok in names[3:])
    by_name = {o.drafter.name: o for o in opts}
    assert by_name["one-layer"].warning is None and by_name["one-layer"].reasons == []
    assert "not smaller than the target" in by_name["twin"].warning
    assert by_name["extra"].reasons == [
        "vocabulary sizes differ by 200 (target 523, drafter 723; at most 128 allowed)"]
    assert any("BOS token id differs" in r for r in by_name["bos"].reasons)
    assert by_name["tiny-other-vocab"].reasons == ["token 261 differs (target b'a', drafter b'A')"]


def test_a_drafter_more_than_half_the_target_gets_a_warning(tiny):
    (opt,) = modelstore.pair_options(tiny["target"], [modelstore.verify(tiny["drafter"])])
    assert opt.compatible and "of the target's parameters" in opt.warning and "too close in size" in opt.warning


def test_pair_options_default_to_the_installed_models_and_skip_the_target(folder, tiny):
    for p in tiny.values():
        modelstore.import_model(p)
    opts = modelstore.pair_options(folder / "tiny-target.gguf")
    assert [(o.drafter.path.name, o.compatible) for o in opts] == [
        ("tiny-drafter.gguf", True), ("tiny-other-vocab.gguf", False)]


def test_a_damaged_candidate_is_reported_not_raised(tiny, tmp_path):
    cand = modelstore.verify(tiny["drafter"])
    moved = tmp_path / "gone.gguf"
    opts = modelstore.pair_options(tiny["target"], [replace(cand, path=moved)])
    assert not opts[0].compatible and "not found" in opts[0].reasons[0]


def test_the_real_pair_pairs_without_warning(real_pair):
    target, draft = real_pair
    (opt,) = modelstore.pair_options(target, [modelstore.verify(draft)])
    assert opt.compatible and opt.warning is None


def test_default_pair_is_none_until_installed(folder):
    assert installed_pair() is None


def _reachable(root, limit: int = 100_000) -> list:
    """Every object reachable from `root` (closures and cells included), as the garbage collector sees them."""
    import gc

    seen, todo, out = set(), [root], []
    while todo and len(out) < limit:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        out.append(o)
        if not isinstance(o, type):  # classes lead to their modules and everything else
            todo.extend(gc.get_referents(o))
    return out


def test_the_pairing_cache_keeps_digests_not_the_token_list(tiny):
    target, drafter = tiny["target"], tiny["drafter"]
    assert modelstore.pair_reasons(target, drafter) == []
    for path in (target, drafter):
        size, mtime, held = modelstore._vocab_cache[str(path.absolute())]
        assert (size, mtime) == (path.stat().st_size, path.stat().st_mtime_ns)
        objects = _reachable(held)
        assert not any(isinstance(o, str) and o in {"\u2581speculative", "\u2581hello", "<0x41>"} for o in objects)
        assert not any(isinstance(o, (list, tuple, dict)) and len(o) > 16 for o in objects)
        # 523 tokens, compared from id 5: a 16-byte digest for each length from 523 - 128 to 523.
        assert held.n_vocab == 523 and len(held.tail) == 129 * 16


@pytest.fixture(scope="module")
def sized(tmp_path_factory):
    """Vocabularies of 523 + extra tokens ('▁extra0', ...), some with one token renamed."""
    import tiny_models

    d = tmp_path_factory.mktemp("sized")
    real = tiny_models.vocabulary

    def write(name: str, extra: int, renamed: int | None = None):
        def vocabulary(spec):
            tokens, scores, types = real(spec)
            if renamed is not None:
                tokens[renamed] = "\u2581renamed"
            return tokens, scores, types

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(tiny_models, "vocabulary", vocabulary)
            return write_tiny_model(d / f"{name}.gguf", replace(DRAFTER, name=name, extra_tokens=extra))

    return {
        "100": write("e100", 100),  # 623 tokens
        "60": write("e60", 60),  # 583 tokens
        "60, last renamed": write("e60-last", 60, renamed=582),
        "100, 600 renamed": write("e100-600", 100, renamed=600),
        "100, 5 renamed": write("e100-5", 100, renamed=5),
    }


@pytest.mark.parametrize(("target", "drafter", "reasons"), [
    ("100", "60", []),  # compared up to the shorter list: equal
    ("60", "100", []),
    ("100", "60, last renamed",
     ["token 582 differs (target b'\\xe2\\x96\\x81extra59', drafter b'\\xe2\\x96\\x81renamed')"]),
    ("60, last renamed", "100",
     ["token 582 differs (target b'\\xe2\\x96\\x81renamed', drafter b'\\xe2\\x96\\x81extra59')"]),
    ("60", "100, 600 renamed", []),  # beyond the shorter list: not compared
    ("100", "100, 600 renamed",
     ["token 600 differs (target b'\\xe2\\x96\\x81extra77', drafter b'\\xe2\\x96\\x81renamed')"]),
    ("100", "100, 5 renamed", ["token 5 differs (target b'<0x00>', drafter b'\\xe2\\x96\\x81renamed')"]),
])
def test_pairs_of_different_sizes_are_judged_up_to_the_shorter_vocabulary(sized, target, drafter, reasons):
    for _ in range(2):  # the second time from the cache
        assert modelstore.pair_reasons(sized[target], sized[drafter]) == reasons


def test_a_drafter_file_replaced_in_place_is_judged_again(tiny, tmp_path):
    drafter = tmp_path / "drafter.gguf"
    shutil.copy(tiny["drafter"], drafter)
    assert modelstore.pair_reasons(tiny["target"], drafter) == []
    shutil.copy(tiny["other-vocab"], drafter)
    st = drafter.stat()
    os.utime(drafter, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new mtime even on a coarse clock
    assert modelstore.pair_reasons(tiny["target"], drafter) == ["token 261 differs (target b'a', drafter b'A')"]
    shutil.copy(tiny["drafter"], drafter)
    os.utime(drafter, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    assert modelstore.pair_reasons(tiny["target"], drafter) == []


def _big_model(tmp_path):
    from tiny_models import TinySpec

    return write_tiny_model(tmp_path / "big.gguf", TinySpec(name="big", n_embd=512, n_head=8, n_ff=1024, n_layer=3))


def test_cancel_ends_an_import_and_leaves_nothing(folder, tmp_path):
    import threading

    src = _big_model(tmp_path)
    cancel = threading.Event()
    with pytest.raises(modelstore.CopyCancelled):
        modelstore.import_model(src, progress=lambda done, total: cancel.set(), cancel=cancel)
    assert modelstore.list_models() == []
    assert not any(p.name.endswith(".tmp") for p in folder.iterdir())  # the temporary copy is gone too


def test_a_killed_import_leaves_a_temporary_copy_that_the_next_start_removes(folder, tmp_path):
    """A real process importing, killed with SIGKILL mid-copy; the next listing cleans up after it."""
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    src = _big_model(tmp_path)
    code = ("import sys, time\n"
            "from engine.models import modelstore\n"
            "def slow(done, total):\n"
            "    print(done, flush=True); time.sleep(30)\n"
            "modelstore.import_model(sys.argv[1], progress=slow)\n")
    root = ROOT
    p = subprocess.Popen([sys.executable, "-c", code, str(src)], cwd=root, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert p.stdout.readline().strip()  # the first chunk is copied and the copy is sleeping
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        p.kill()
    left = [f for f in folder.iterdir() if f.name.endswith(".tmp")]
    assert len(left) == 1 and left[0].stat().st_size > 0
    assert modelstore.list_models() == []  # never offered
    assert left[0].exists()  # too fresh to be an abandoned copy: another process may be writing it
    old = time.time() - modelstore.STALE_TEMP_S - 60
    os.utime(left[0], (old, old))
    assert modelstore.list_models() == [] and not left[0].exists()
