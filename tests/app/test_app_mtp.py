"""The window with a Gemma 4 target and its assistant (scripts/make_tiny_mtp.py): the picker offers the assistant
by name, its drafts show like a model's, the footer names the mode; beside another target it says why not."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import importlib.util  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from app_support import REPLY_TIMEOUT_MS, install_tiny, marks, open_window, send  # noqa: E402
from tree import ROOT  # noqa: E402

from app.chat.message_labels import footer  # noqa: E402
from app.models.model_bar import UNFIT  # noqa: E402
from engine.drafting.draft_choice import DraftSpec  # noqa: E402


@pytest.fixture(scope="module")
def gemma_pair(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_tiny_mtp", ROOT / "scripts" / "make_tiny_mtp.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_tiny_mtp"] = module
    spec.loader.exec_module(module)
    return module.write_pair(tmp_path_factory.mktemp("gemma"))


def test_the_assistant_is_offered_by_name_drafts_and_the_footer_names_it(qtbot, tiny, gemma_pair, isolated_home):
    target, assistant = gemma_pair
    installed = install_tiny({"target": target, "drafter": assistant, "llama": tiny["target"]}, isolated_home,
                             draft_max=4, max_tokens=40)
    w = open_window(qtbot)
    qtbot.waitUntil(lambda: DraftSpec(installed["drafter"]) in w.bar.drafter_choices(), timeout=REPLY_TIMEOUT_MS)
    i = w.bar.drafter.findData(DraftSpec(installed["drafter"]).text)
    assert w.bar.drafter.itemText(i).startswith("Gemma 4 assistant")
    assert "hidden state" in w.bar.drafter.itemData(i, Qt.ItemDataRole.ToolTipRole)
    # It only drafts: the target picker does not offer it.
    targets = [w.bar.target.itemData(k) for k in range(w.bar.target.count())]
    assert str(installed["drafter"]) not in targets and str(installed["target"]) in targets
    assert w.controller.loaded.request.drafter == DraftSpec(installed["drafter"])

    reply = send(qtbot, w, "the model is fast and")
    kinds = {mark for _text, mark in marks(w)}
    assert "accepted" in kinds and ({"corrected", "bonus"} & kinds)
    assert "assistant" in footer(reply).numbers and "accepted" in footer(reply).numbers


def test_beside_another_target_the_picker_says_why_not(qtbot, tiny, gemma_pair, isolated_home):
    _, assistant = gemma_pair
    installed = install_tiny({"target": tiny["target"], "drafter": tiny["drafter"], "assistant": assistant},
                             isolated_home)
    w = open_window(qtbot)
    qtbot.waitUntil(lambda: w.bar.drafter.findData(UNFIT) >= 0, timeout=REPLY_TIMEOUT_MS)
    i = w.bar.drafter.findData(UNFIT)
    assert "not for this target" in w.bar.drafter.itemText(i)
    assert "Gemma 4 target" in w.bar.drafter.itemData(i, Qt.ItemDataRole.ToolTipRole)
    assert not w.bar.drafter.model().item(i).isEnabled()
    assert DraftSpec(installed["assistant"]) not in w.bar.drafter_choices()
    assert DraftSpec(installed["drafter"]) in w.bar.drafter_choices()
