"""Model choice in the app: the drafter picker, the Models dialog, sampling, downloads, on the tiny real models."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import shutil  # noqa: E402

from app_support import REPLY_TIMEOUT_MS, install_tiny, open_window, send  # noqa: E402

from engine.drafting.draft_choice import DraftLength, DraftSpec  # noqa: E402
from app.control.tasks import TaskState  # noqa: E402


def test_drafter_picker_offers_only_compatible_drafters(qtbot, tiny, isolated_home):
    installed = install_tiny(tiny, isolated_home)
    w = open_window(qtbot)
    qtbot.waitUntil(lambda: len(w.bar.drafter_choices()) > 2, timeout=REPLY_TIMEOUT_MS)
    # Each compatible drafter with prompt lookup in front (the fastest mode with Auto) and alone.
    assert w.bar.drafter_choices() == [DraftSpec.with_lookup(installed["drafter"]), DraftSpec(installed["drafter"]),
                                       DraftSpec.LOOKUP, DraftSpec.NONE]
    assert w.bar.current_drafter() == DraftSpec(installed["drafter"])  # what the settings name stays chosen
    assert w.bar.drafter.itemText(0).startswith("prompt lookup + ")
    targets = [w.bar.target.itemData(i) for i in range(w.bar.target.count())]
    assert {str(p) for p in installed.values()} <= set(targets)

    # A target with another vocabulary: no installed model can draft for it, and the chosen drafter
    # gives way to prompt lookup before anything is loaded (no pairing error).
    with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS) as loaded:
        w.controller.update_settings(target=str(installed["other-vocab"]))
    assert w.bar.drafter_choices() == [DraftSpec.LOOKUP, DraftSpec.NONE]
    assert w.controller.settings.drafter == DraftSpec.LOOKUP
    assert loaded.args[0].request.drafter == DraftSpec.LOOKUP
    assert not w.notice.isVisible()


def test_models_dialog_explains_pairs_and_imports_a_file(qtbot, tiny, isolated_home, tmp_path):
    installed = install_tiny(tiny, isolated_home)
    (isolated_home / "data" / "models" / installed["other-vocab"].name).unlink()
    w = open_window(qtbot)
    from app.models.models_dialog import ModelsDialog

    dlg = ModelsDialog(w.controller, w)
    qtbot.addWidget(dlg)
    tab = dlg.installed
    qtbot.waitUntil(lambda: tab.pairs.topLevelItemCount() == 1, timeout=REPLY_TIMEOUT_MS)
    assert tab.table.rowCount() == 2

    outside = tmp_path / "elsewhere" / "another-vocab.gguf"
    outside.parent.mkdir()
    shutil.copy(tiny["other-vocab"], outside)
    tab.import_file(outside)
    qtbot.waitUntil(lambda: tab.table.rowCount() == 3, timeout=REPLY_TIMEOUT_MS)
    assert tab.import_row.task.state == TaskState.DONE
    assert (isolated_home / "data" / "models" / outside.name).is_file()
    qtbot.waitUntil(lambda: tab.pairs.topLevelItemCount() == 2, timeout=REPLY_TIMEOUT_MS)
    rows = {tab.pairs.topLevelItem(i).text(0).split(" · ")[0]: tab.pairs.topLevelItem(i) for i in range(2)}
    assert rows["tiny-drafter"].text(1).startswith("✓")
    bad = rows["tiny-other-vocab"]
    assert bad.text(1).startswith("✗") and "differs" in bad.text(2)

    # A damaged file is refused with its reason, and nothing is added.
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(installed["target"].read_bytes()[:5000])
    tab.import_file(broken)
    qtbot.waitUntil(lambda: tab.import_row.task.state != TaskState.RUNNING, timeout=REPLY_TIMEOUT_MS)
    assert tab.import_row.task.state == TaskState.FAILED
    assert "broken.gguf" in tab.import_row.label.text()
    assert not (isolated_home / "data" / "models" / "broken.gguf").exists()


def test_draft_length_and_sampling_choices_reach_the_engine(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, max_tokens=40)
    w = open_window(qtbot)
    bar = w.bar
    assert not bar.auto.isChecked() and bar.length.value() == 4
    bar.length.setValue(2)
    assert w.controller.settings.draft_max == DraftLength.fixed(2)
    bar.sampling_button.click()
    assert bar.sampling.isVisible()
    bar.sampling.max_tokens.setValue(12)
    bar.sampling.seed.setValue(7)
    bar.sampling.system_prompt.setPlainText("Be brief.")
    s = w.controller.generation_settings()
    assert (s.draft_max, s.max_tokens, s.sampling.seed) == (DraftLength.fixed(2), 12, 7)
    assert w.controller.history()[0] == {"role": "system", "content": "Be brief."}
    bar.sampling.hide()
    reply = send(qtbot, w, "the model is fast")
    assert len(reply.tokens) <= 12 and all(r.k <= 2 for r in reply.rounds.values())
    bar.auto.setChecked(True)
    assert w.controller.settings.draft_max == DraftLength.AUTO and not bar.length.isEnabled()


def test_catalog_download_shows_progress_cancels_and_resumes(qtbot, tiny, isolated_home, monkeypatch, tmp_path):
    from dataclasses import replace

    from fake_hub import FakeHub
    from tiny_models import TARGET, write_tiny_model

    from app.models.catalog_tab import PairCard
    from app.window import MainWindow
    from engine.models.catalog import CatalogFile, CatalogPair

    hub = FakeHub()
    try:
        repo = "tester/Tiny-GGUF"
        # A ~34 MB target: huggingface_hub reports progress per 10 MB chunk, and the fake hub can
        # hold the transfer between its 1 MB pieces.
        big = write_tiny_model(tmp_path / "tiny-big.gguf",
                               replace(TARGET, name="tiny-big", n_embd=512, n_head=8, n_ff=1024))
        hub.add(repo, "tiny-target.gguf", big.read_bytes())
        hub.add(repo, "tiny-drafter.gguf", tiny["drafter"].read_bytes())
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        pair = CatalogPair("tiny-pair", "Tiny pair", CatalogFile(repo, "tiny-target.gguf", None, None),
                           CatalogFile(repo, "tiny-drafter.gguf", None, None), "MIT", "any", "")
        w = MainWindow()  # no model installed: the downloaded pair becomes the current one
        qtbot.addWidget(w)
        card = PairCard(w.controller, pair)
        qtbot.addWidget(card)
        card.show()
        assert card.download_button.isVisible() and not card.use_button.isVisible()

        hub.knobs.stall_after = 12 * 1024 * 1024  # hold the transfer part-way
        card.download_button.click()
        row = card.task_row
        qtbot.waitUntil(lambda: row.bar.maximum() > 0 and row.bar.value() > 0, timeout=REPLY_TIMEOUT_MS)
        assert "tiny-target.gguf" in row.label.text()
        row.cancel_button.click()
        hub.knobs.release.set()
        qtbot.waitUntil(lambda: row.task.state == TaskState.CANCELLED, timeout=REPLY_TIMEOUT_MS)
        qtbot.waitUntil(lambda: "cancelled" in row.label.text(), timeout=REPLY_TIMEOUT_MS)
        assert not card.use_button.isVisible()

        hub.knobs.stall_after = None
        with qtbot.waitSignal(w.controller.sig_loaded, timeout=REPLY_TIMEOUT_MS) as loaded:
            card.download_button.click()
        assert row.task.state == TaskState.DONE
        assert any(s.range for s in hub.seen if s.method == "GET")  # the second run resumed
        qtbot.waitUntil(lambda: card.use_button.isVisible(), timeout=REPLY_TIMEOUT_MS)
        assert loaded.args[0].request.target.name == "tiny-target.gguf"
        assert loaded.args[0].request.drafter.model.name == "tiny-drafter.gguf"
    finally:
        hub.close()
