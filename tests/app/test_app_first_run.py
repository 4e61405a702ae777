"""The first run of an installed app (a bundle: no model packages, no pip): download the default pair
from the hub (a local fake), import GGUF files, or use a folder of them."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton  # noqa: E402
from app_support import REPLY_TIMEOUT_MS, send  # noqa: E402

from app.control.tasks import TaskState  # noqa: E402
from engine.drafting.draft_choice import DraftSpec  # noqa: E402

COMMAND_LINE = ("pip", "python -m", "install -e", "[models]")


@pytest.fixture
def bundle(monkeypatch):
    """Run as an installed app does (PyInstaller sets sys.frozen; the model packages are never bundled)."""
    monkeypatch.setattr(sys, "frozen", True, raising=False)


def first_window(qtbot):
    from app.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(w.first_run.isVisible, timeout=REPLY_TIMEOUT_MS)
    return w


def all_text(widget) -> str:
    return " ".join(x.text() for kind in (QLabel, QPushButton) for x in widget.findChildren(kind))


def test_an_installed_app_offers_three_ways_and_never_a_command_line(qtbot, bundle):
    w = first_window(qtbot)
    assert not w.chat.isVisible()
    text = w.first_run.texts()
    assert "Download the default pair" in text and "Import GGUF files" in text and "folder" in text
    from app.models.models_dialog import ModelsDialog

    dlg = ModelsDialog(w.controller, w)
    qtbot.addWidget(dlg)
    words = " ".join([text, w.notice.text(), w.status_label.text(), all_text(dlg)])
    assert not [c for c in COMMAND_LINE if c in words], words
    assert "Download the default pair" in dlg.catalog.default_button.text()

    # The default pair's missing packages, as the engine and the window word it in a bundle.
    from app.core.errors import explain
    from engine.models import default_pair

    absent = replace(default_pair.TARGET, module_prefix="no_such_model_part")
    with pytest.raises(default_pair.DefaultPairMissing) as missing:
        default_pair.part_paths(absent)
    for said in (str(missing.value), explain(missing.value).text):
        assert not [c for c in COMMAND_LINE if c in said], said
    w.input.setPlainText("hi")
    w.send_button.setEnabled(True)
    w._send("hi")
    assert "Choose a target model first" in w.notice.text() and w.input.toPlainText() == "hi"


def test_the_default_pair_downloads_with_progress_cancel_and_resume_then_chats(qtbot, tiny, bundle, monkeypatch,
                                                                                 tmp_path):
    from fake_hub import FakeHub
    from tiny_models import TARGET, write_tiny_model

    from engine.models import catalog

    hub = FakeHub()
    try:
        repo = "tester/Tiny-GGUF"
        # ~34 MB: huggingface_hub reports progress per 10 MB, and the hub can hold the transfer part-way.
        big = write_tiny_model(tmp_path / "tiny-big.gguf", replace(TARGET, name="tiny-big", n_embd=512, n_head=8,
                                                                  n_ff=1024))
        hub.add(repo, "tiny-target.gguf", big.read_bytes())
        hub.add(repo, "tiny-drafter.gguf", tiny["drafter"].read_bytes())
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        entry = {"repo_id": repo, "size_bytes": None, "sha256": None}
        data = {"version": 1, "default_pair": "tiny-pair", "pairs": [{
            "id": "tiny-pair", "title": "Tiny pair", "license": "MIT", "hardware": "any",
            "target": dict(entry, filename="tiny-target.gguf"), "drafter": dict(entry, filename="tiny-drafter.gguf")}]}
        (tmp_path / "catalog.json").write_text(json.dumps(data))
        monkeypatch.setattr(catalog, "catalog_path", lambda: tmp_path / "catalog.json")

        w = first_window(qtbot)
        panel = w.first_run
        row = panel.task_row
        hub.knobs.stall_after = 12 * 1024 * 1024
        panel.default_button.click()
        qtbot.waitUntil(lambda: row.bar.maximum() > 0 and row.bar.value() > 0, timeout=REPLY_TIMEOUT_MS)
        assert "tiny-target.gguf" in row.label.text()
        row.cancel_button.click()
        hub.knobs.release.set()
        qtbot.waitUntil(lambda: row.task.state == TaskState.CANCELLED, timeout=REPLY_TIMEOUT_MS)
        qtbot.waitUntil(lambda: "starting again resumes" in row.label.text(), timeout=REPLY_TIMEOUT_MS)
        assert panel.isVisible()

        hub.knobs.stall_after = None
        with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS) as loaded:
            panel.default_button.click()
        assert row.task.state == TaskState.DONE
        assert any(s.range for s in hub.seen if s.method == "GET")  # the second run resumed
        assert loaded.args[0].request.target.name == "tiny-target.gguf"
        assert loaded.args[0].request.drafter.model.name == "tiny-drafter.gguf"
        assert not panel.isVisible() and w.chat.isVisible()
        with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS):
            w.controller.update_settings(max_tokens=12, n_threads=1)  # a new thread count reloads
        assert send(qtbot, w).tokens
    finally:
        hub.close()


def test_importing_files_picks_the_largest_as_target_and_a_compatible_drafter(qtbot, tiny, isolated_home, bundle,
                                                                              monkeypatch, tmp_path):
    picked = [shutil.copy(tiny[k], tmp_path / tiny[k].name) for k in ("drafter", "target")]
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: (picked, "GGUF models (*.gguf)"))
    w = first_window(qtbot)
    with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS) as loaded:
        w.first_run.import_button.click()
    request = loaded.args[0].request
    folder = isolated_home / "data" / "models"
    assert request.target == folder / "tiny-target.gguf" and request.drafter == DraftSpec.with_lookup(folder / "tiny-drafter.gguf")  # the model with prompt lookup in front
    assert not w.first_run.isVisible()


def test_a_folder_of_models_is_used_where_it_is_and_bad_files_are_named(qtbot, tiny, isolated_home, bundle,
                                                                       monkeypatch, tmp_path):
    folder = tmp_path / "my models"
    folder.mkdir()
    for k in ("target", "drafter"):
        shutil.copy(tiny[k], folder / tiny[k].name)
    (folder / "broken.gguf").write_bytes(tiny["target"].read_bytes()[:4000])
    (folder / "notes.txt").write_text("not a model")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    w = first_window(qtbot)
    with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS) as loaded:
        w.first_run.folder_button.click()
    request = loaded.args[0].request
    assert request.target == folder / "tiny-target.gguf" and request.drafter == DraftSpec.with_lookup(folder / "tiny-drafter.gguf")  # the model with prompt lookup in front
    assert not (isolated_home / "data" / "models" / "tiny-target.gguf").exists()  # not copied
    assert "broken.gguf" in w.first_run.problems.text()
