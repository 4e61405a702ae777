"""Downloads through huggingface_hub against a real HTTP server on 127.0.0.1 that imitates the hub.

The served file is a real GGUF model of ~34 MB, so a transfer spans several of huggingface_hub's
10 MB chunks: enough to cut the connection in the middle, cancel between chunks, and resume.
"""
from __future__ import annotations

import hashlib
import socket
import sys
import threading
from dataclasses import replace

import pytest
from fake_hub import FakeHub
from tiny_models import TinySpec, write_tiny_model

from engine.models import modelstore
from engine.models.catalog import CatalogFile, CatalogPair, find_pair
from engine.models.download import (
    DownloadCancelled,
    DownloadError,
    discard_partial,
    download_file,
    download_pair,
    installed_path,
)

REPO = "tester/Tiny-GGUF"
NAME = "tiny-medium.gguf"


@pytest.fixture(scope="module")
def medium_gguf(tmp_path_factory) -> bytes:
    spec = TinySpec(name="tiny-medium", n_embd=512, n_head=8, n_ff=1024, n_layer=3)
    path = write_tiny_model(tmp_path_factory.mktemp("medium") / NAME, spec)
    data = path.read_bytes()
    assert len(data) > 30 * 1024 * 1024
    return data


@pytest.fixture
def hub(medium_gguf):
    h = FakeHub()
    h.add(REPO, NAME, medium_gguf)
    yield h
    h.close()


@pytest.fixture
def folder(isolated_home):
    return modelstore.models_folder()


def catalog_file(data: bytes | None = None, **kw) -> CatalogFile:
    f = CatalogFile(REPO, NAME, len(data) if data else None, hashlib.sha256(data).hexdigest() if data else None)
    return replace(f, **kw)


def test_a_download_reports_progress_and_lands_checked_in_the_folder(hub, folder, medium_gguf):
    seen = []
    path = download_file(catalog_file(medium_gguf), progress=seen.append, endpoint=hub.endpoint)
    assert path == folder / NAME
    assert path.read_bytes() == medium_gguf
    done = [p.done_bytes for p in seen]
    assert done == sorted(done) and done[-1] == len(medium_gguf)
    assert len({d for d in done if 0 < d < len(medium_gguf)}) >= 2  # intermediate reports, not just the end
    assert all(p.total_bytes == len(medium_gguf) and p.filename == NAME for p in seen)
    assert any(p.bytes_per_s > 0 for p in seen)
    # The hub's protocol was followed: HEAD on resolve/, then GET on the CDN address it pointed to.
    assert [(s.method, s.path.split("/")[1]) for s in hub.seen] == [("HEAD", "tester"), ("GET", "cdn")]
    rec = modelstore.list_models()[0]
    assert rec.path == path and rec.source == "catalog" and rec.sha256 == hashlib.sha256(medium_gguf).hexdigest()
    assert modelstore.partial_downloads() == []
    # A second call finds the checked file: no network at all.
    hub.seen.clear()
    assert download_file(catalog_file(medium_gguf), endpoint=hub.endpoint) == path
    assert hub.seen == []


def test_without_a_catalog_hash_the_hubs_sha256_etag_is_checked(hub, folder, medium_gguf):
    path = download_file(catalog_file(None), endpoint=hub.endpoint)
    assert modelstore.known_sha256(path) == hashlib.sha256(medium_gguf).hexdigest()


def test_an_interrupted_transfer_is_kept_hidden_and_resumes_on_the_next_call(hub, folder, medium_gguf):
    hub.knobs.drop_after = 15 * 1024 * 1024  # the connection dies mid-file...
    hub.knobs.outage_after_drop = 1  # ...and huggingface_hub's own immediate retry finds the server down
    with pytest.raises(DownloadError, match=r"stopped .* MB kept; run the download again to resume"):
        download_file(catalog_file(medium_gguf), endpoint=hub.endpoint)
    partial = modelstore.partial_downloads()
    assert len(partial) == 1 and 0 < partial[0][1] < len(medium_gguf)
    assert modelstore.list_models() == []  # a half-downloaded file is never offered
    assert not (folder / NAME).exists()
    kept = partial[0][1]

    hub.seen.clear()
    path = download_file(catalog_file(medium_gguf), endpoint=hub.endpoint)
    assert hub.ranges() == [f"bytes={kept}-"]  # resumed where it stopped, not from zero
    assert path.read_bytes() == medium_gguf
    assert modelstore.partial_downloads() == []


def test_a_dropped_connection_is_resumed_within_the_same_call(hub, folder, medium_gguf):
    hub.knobs.drop_after = 12 * 1024 * 1024
    path = download_file(catalog_file(medium_gguf), endpoint=hub.endpoint)
    assert len(hub.ranges()) == 1 and hub.ranges()[0] != "bytes=0-"
    assert path.read_bytes() == medium_gguf


@pytest.mark.parametrize("known", [True, False], ids=["catalog-sha", "hub-etag"])
def test_a_corrupted_transfer_is_rejected_and_removed(hub, folder, medium_gguf, known):
    hub.knobs.corrupt = True
    with pytest.raises(DownloadError, match="arrived corrupted .*deleted"):
        download_file(catalog_file(medium_gguf if known else None), endpoint=hub.endpoint)
    assert not (folder / NAME).exists()
    assert modelstore.partial_downloads() == [] and modelstore.list_models() == []
    hub.knobs.corrupt = False  # the next attempt starts from zero and succeeds
    assert download_file(catalog_file(medium_gguf), endpoint=hub.endpoint).read_bytes() == medium_gguf


def test_cancel_keeps_the_bytes_and_a_later_call_resumes(hub, folder, medium_gguf):
    cancel = threading.Event()

    def progress(p):
        if p.done_bytes > 0:
            cancel.set()

    with pytest.raises(DownloadCancelled, match="cancelled: .* MB kept"):
        download_file(catalog_file(medium_gguf), progress=progress, cancel=cancel, endpoint=hub.endpoint)
    (part, kept), = modelstore.partial_downloads()
    assert 0 < kept < len(medium_gguf)
    assert modelstore.list_models() == []
    path = download_file(catalog_file(medium_gguf), endpoint=hub.endpoint)
    assert hub.ranges() == [f"bytes={kept}-"]
    assert path.read_bytes() == medium_gguf


def test_discarding_a_partial_download_frees_it(hub, folder, medium_gguf):
    cancel = threading.Event()
    with pytest.raises(DownloadCancelled):
        download_file(catalog_file(medium_gguf), progress=lambda p: p.done_bytes and cancel.set(), cancel=cancel,
                      endpoint=hub.endpoint)
    assert modelstore.partial_downloads()
    assert discard_partial(catalog_file(medium_gguf)) > 0
    assert modelstore.partial_downloads() == []


def test_offline_mode_says_so_and_touches_no_network(hub, folder, medium_gguf, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError, match=r"offline mode is on \(HF_HUB_OFFLINE=1\).*install-default"):
        download_file(catalog_file(medium_gguf), endpoint=hub.endpoint)
    assert hub.seen == []


def test_an_unreachable_hub_gives_one_clear_line(folder, medium_gguf):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match=f"cannot reach 127.0.0.1:{port}") as exc:
        download_file(catalog_file(medium_gguf), endpoint=f"http://127.0.0.1:{port}")
    assert "\n" not in str(exc.value)


def test_an_installed_app_is_never_told_to_run_python(folder, medium_gguf, monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)  # as in a PyInstaller bundle
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError) as exc:
        download_file(catalog_file(medium_gguf), endpoint=f"http://127.0.0.1:{port}")
    assert str(exc.value).endswith("meanwhile import GGUF files you already have (Import GGUF files…, or "
                                   "Models… › Import a GGUF file…)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DownloadError) as exc:
        download_file(catalog_file(medium_gguf), endpoint=f"http://127.0.0.1:{port}")
    assert "python" not in str(exc.value) and "pip" not in str(exc.value) and "import GGUF files" in str(exc.value)


def test_missing_repos_and_files_are_named(hub, folder):
    with pytest.raises(DownloadError, match="is not in tester/Tiny-GGUF"):
        download_file(CatalogFile(REPO, "nope.gguf", None, None), endpoint=hub.endpoint)
    with pytest.raises(DownloadError, match="repository someone/Else was not found"):
        download_file(CatalogFile("someone/Else", NAME, None, None), endpoint=hub.endpoint)


def test_a_file_that_changed_on_the_hub_is_not_downloaded(hub, folder, medium_gguf):
    wrong = catalog_file(medium_gguf, sha256="f" * 64)
    with pytest.raises(DownloadError, match="has changed"):
        download_file(wrong, endpoint=hub.endpoint)
    assert [s.method for s in hub.seen] == ["HEAD"]  # refused before transferring gigabytes


def test_a_catalog_pair_without_sizes_or_hashes_is_checked_against_the_hubs_metadata(folder, tiny):
    """The Qwen3 pairs name no size or SHA-256: each file is checked against what the hub's HEAD says."""
    pair = find_pair("qwen3-4b")
    h = FakeHub()
    try:
        target, drafter = tiny["target"].read_bytes(), tiny["drafter"].read_bytes()
        h.add(pair.target.repo_id, pair.target.filename, target)
        h.add(pair.drafter.repo_id, pair.drafter.filename, drafter)
        paths = download_pair(pair, endpoint=h.endpoint)
        got = {r.path.name: r for r in modelstore.list_models()}
        assert got[pair.target.filename].sha256 == hashlib.sha256(target).hexdigest()
        assert got[pair.drafter.filename].sha256 == hashlib.sha256(drafter).hexdigest()
        assert [p.stat().st_size for p in paths] == [len(target), len(drafter)]
        # The 8B pair shares the drafter: it is found by the hash the hub gave, with no transfer.
        other = find_pair("qwen3-8b")
        h.add(other.target.repo_id, other.target.filename, target)
        h.seen.clear()
        download_pair(other, endpoint=h.endpoint)
        assert not any(s.path.endswith(pair.drafter.filename) for s in h.seen)
        # A file that ends before the size its metadata announces is not installed (it reads as cut short).
        third = find_pair("qwen3-1.7b")
        h.add(third.target.repo_id, third.target.filename, target)
        h.knobs.size_says = len(target) + 4096
        with pytest.raises(DownloadError, match=r"Qwen3-1.7B-Q8_0.gguf stopped .*size"):
            download_file(third.target, endpoint=h.endpoint)
        assert not (folder / third.target.filename).exists()
        assert third.target.filename not in {r.path.name for r in modelstore.list_models()}
    finally:
        h.close()


def test_download_pair_records_the_pair_as_source(hub, folder, tiny):
    hub.add(REPO, "tiny-target.gguf", tiny["target"].read_bytes())
    hub.add(REPO, "tiny-drafter.gguf", tiny["drafter"].read_bytes())
    pair = CatalogPair("tiny-pair", "Tiny pair", CatalogFile(REPO, "tiny-target.gguf", None, None),
                       CatalogFile(REPO, "tiny-drafter.gguf", None, None), "MIT", "any", "")
    target, drafter = download_pair(pair, endpoint=hub.endpoint)
    assert {r.path.name: r.source for r in modelstore.list_models()} == {
        "tiny-target.gguf": "catalog:tiny-pair", "tiny-drafter.gguf": "catalog:tiny-pair"}
    assert installed_path(pair.target) == target
    opts = modelstore.pair_options(target)
    assert opts[0].drafter.path == drafter and opts[0].compatible


def test_two_downloads_of_one_file_take_turns_and_the_file_lands_whole(hub, folder, medium_gguf):
    """Catalog pairs share drafter files: two downloads of one file at once must not share a .part."""
    results, errors = [], []
    started = threading.Barrier(2)

    def one() -> None:
        started.wait()
        try:
            results.append(download_file(catalog_file(medium_gguf), endpoint=hub.endpoint))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(results) == 2 and results[0] == results[1]
    assert results[0].read_bytes() == medium_gguf  # whole, not twice its size
    assert modelstore.partial_downloads() == []
    assert hub.ranges() == []  # one full transfer; the second found the file installed and fetched nothing


def test_a_download_waiting_for_another_of_the_same_file_can_be_cancelled(hub, folder, medium_gguf):
    from filelock import FileLock

    held = FileLock(str(folder / modelstore.PARTIAL_DIR / f"{NAME}.lock"))
    (folder / modelstore.PARTIAL_DIR).mkdir(parents=True, exist_ok=True)
    held.acquire()
    try:
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        with pytest.raises(DownloadCancelled, match="another download"):
            download_file(catalog_file(medium_gguf), cancel=cancel, endpoint=hub.endpoint)
    finally:
        held.release()
