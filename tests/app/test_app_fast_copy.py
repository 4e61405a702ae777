"""A fast copy of the target for this CPU, the way a person gets one: the target picker's row, the
Hardware tab's button, llama.cpp's own quantizer making the copy, the pair switching to it and back.
Real window (offscreen), real tiny models, the copy read back with the gguf package."""
from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from gguf import GGUFReader  # noqa: E402
from PySide6.QtCore import QPoint, Qt  # noqa: E402
from test_app_keyboard import in_dialog  # noqa: E402
from app_support import LOAD_TIMEOUT_MS, REPLY_TIMEOUT_MS, install_tiny, open_window, send  # noqa: E402

from engine.llama import cpu_weights  # noqa: E402
from engine.drafting.draft_choice import DraftSpec  # noqa: E402
from engine.decoding.events import Certainty  # noqa: E402
from app.control.model_scan import list_models  # noqa: E402
from app.history.reply_stats import ReplyStats  # noqa: E402
from app.control.tasks import TaskState  # noqa: E402
from app.models.model_bar import FAST_COPY  # noqa: E402

pytestmark = pytest.mark.skipif(not cpu_weights.cpu_suits(), reason="fast copies are offered on x86-64 CPUs with AVX2")


def matrices(path: Path) -> set[str]:
    """Every matrix of a model but its token embeddings (a lookup table), as the gguf package reads it."""
    return {t.name for t in GGUFReader(str(path)).tensors
            if sum(d > 1 for d in t.shape) == 2 and t.name != "token_embd.weight"}


def rows(combo) -> list[str]:
    return [combo.itemData(i) for i in range(combo.count())]


def test_the_target_picker_makes_a_fast_copy_uses_it_and_goes_back(qtbot, tiny, isolated_home):
    drafter = isolated_home / "data" / "models" / tiny["drafter"].name  # where install_tiny puts it
    installed = install_tiny(tiny, isolated_home, drafter=DraftSpec.with_lookup(drafter).text)
    w = open_window(qtbot)
    bar = w.bar
    qtbot.waitUntil(lambda: FAST_COPY in rows(bar.target), timeout=REPLY_TIMEOUT_MS)
    copy_path = Path(os.environ["DRAFTLIGHT_CPU_WEIGHTS"]) / "tiny-target.cpu-q4_0-target.gguf"
    assert cpu_weights.ready(installed["target"], cpu_weights.Role.FAST_TARGET) is None  # (the folder is the run's)

    seen: dict = {}

    def make_it(dlg):
        box = dlg.hardware.fast_copy
        seen["tab"] = dlg.tabs.tabText(dlg.tabs.currentIndex())
        seen["focus"] = dlg.focusWidget() is box.button
        seen["offer"] = (box.button.text(), box.text.text())
        qtbot.keyClick(box.button, Qt.Key.Key_Space)  # the focused button, pressed as a person does
        qtbot.waitUntil(lambda: box.row.task is not None and box.row.task.state != TaskState.RUNNING,
                        timeout=REPLY_TIMEOUT_MS)
        seen["state"] = box.row.task.state
        qtbot.waitUntil(lambda: box.button.text() == "Use the original", timeout=REPLY_TIMEOUT_MS)
        seen["after"] = box.text.text()
        qtbot.keyClick(dlg, Qt.Key.Key_Escape)

    # The row sits just above "Choose a GGUF file…": open the list by keyboard, End, Up, Return.
    in_dialog(qtbot, lambda: w.models_dialog, make_it)
    bar.target.setFocus()
    qtbot.keyClick(bar.target, Qt.Key.Key_Down, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: bar.target.view().isVisible())
    qtbot.keyClick(bar.target.view(), Qt.Key.Key_End)
    qtbot.keyClick(bar.target.view(), Qt.Key.Key_Up)
    with qtbot.waitSignal(w.controller.sig_loaded, timeout=LOAD_TIMEOUT_MS,
                          check_params_cb=lambda info: info.request.target == copy_path) as loaded:
        qtbot.keyClick(bar.target.view(), Qt.Key.Key_Return)
    assert seen["tab"] == "Hardware" and seen["focus"]
    label, text = seen["offer"]
    assert label == "Make the fast copy and use it" and "another model" in text and "tiny-target.gguf" in text
    assert seen["state"] == TaskState.DONE and "fast copy of <b>tiny-target.gguf</b>" in seen["after"]

    # The copy: every matrix in Q4_0 (as llama.cpp's quantizer wrote it, read back by the gguf package).
    types = {t.name: t.tensor_type.name for t in GGUFReader(str(copy_path)).tensors}
    assert {n for n, t in types.items() if t == "Q4_0"} == matrices(installed["target"])
    assert "blk.0.ffn_down.weight" in matrices(installed["target"]) and types["token_embd.weight"] == "F32"
    assert w.controller.settings.target == str(copy_path)
    assert loaded.args[0].request.drafter == DraftSpec.with_lookup(installed["drafter"])  # the same drafter
    assert "fast copy for this CPU" in bar.target.currentText()
    assert FAST_COPY not in rows(bar.target)  # made: nothing more to offer
    assert str(installed["target"]) in rows(bar.target)  # the original stays a choice
    # The original is the same model: it is not offered to draft for its own copy.
    assert DraftSpec(installed["target"]) not in bar.drafter_choices()
    assert DraftSpec(installed["drafter"]) in bar.drafter_choices()
    reply = send(qtbot, w)
    assert reply.target == copy_path.name and reply.tokens and not reply.error  # the footer names the file that ran

    def go_back(dlg):
        qtbot.mouseClick(dlg.hardware.fast_copy.button, Qt.MouseButton.LeftButton)
        qtbot.keyClick(dlg, Qt.Key.Key_Escape)

    in_dialog(qtbot, lambda: w.models_dialog, go_back)
    with qtbot.waitSignal(w.controller.sig_loaded, timeout=LOAD_TIMEOUT_MS,
                          check_params_cb=lambda info: info.request.target == installed["target"]):
        w.open_models("hardware")
    assert w.controller.settings.target == str(installed["target"])
    assert bar.target.currentData() == str(installed["target"]) and FAST_COPY not in rows(bar.target)
    assert str(copy_path) in rows(bar.target)  # still there to choose again

    # Not in use, the copy can be deleted (a gigabyte for the real target): it is offered to be made again.
    def delete_it(dlg):
        box = dlg.hardware.fast_copy
        seen["before"] = (box.button.text(), box.delete_button.isVisibleTo(dlg))
        qtbot.mouseClick(box.delete_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: box.button.text() == "Make the fast copy and use it", timeout=REPLY_TIMEOUT_MS)
        seen["after delete"] = box.delete_button.isVisibleTo(dlg)
        qtbot.keyClick(dlg, Qt.Key.Key_Escape)

    in_dialog(qtbot, lambda: w.models_dialog, delete_it)
    w.open_models("hardware")
    assert seen["before"] == ("Use the fast copy", True) and seen["after delete"] is False
    assert not copy_path.exists() and not copy_path.with_suffix(".json").exists()
    qtbot.waitUntil(lambda: FAST_COPY in rows(bar.target) and str(copy_path) not in rows(bar.target))
    assert w.controller.settings.target == str(installed["target"]) and installed["target"].is_file()


def test_a_fast_copy_is_listed_after_its_model_and_drafts_for_nobody(tiny, isolated_home):
    installed = install_tiny(tiny, isolated_home)
    before = {e.path: e for e in list_models()[0]}
    assert before[installed["target"]].copyable and before[installed["drafter"]].copyable
    copy = cpu_weights.make(installed["target"], cpu_weights.Role.FAST_TARGET)
    entries = list_models()[0]
    names = [(e.path.name, e.copy_of.name if e.copy_of else None) for e in entries]
    at = names.index(("tiny-target.gguf", None))
    assert names[at + 1] == (copy.name, "tiny-target.gguf")
    by_path = {e.path: e for e in entries}
    assert not by_path[installed["target"]].copyable and not by_path[copy].copyable
    assert by_path[copy].quantization == "Q4_0"
    original = by_path[installed["target"]].label
    assert by_path[copy].label == original.rsplit(" · ", 1)[0] + " · Q4_0 · fast copy for this CPU"
    assert by_path[copy].short_label.startswith("fast tiny-target")
    # Named in the settings (as after a restart), the copy is still known for what it is.
    again = {e.path: e for e in list_models([copy])[0]}
    assert again[copy].copy_of == installed["target"]


def test_a_file_the_quantizer_refuses_is_a_message_and_the_target_stays(qtbot, tiny, isolated_home):
    """Well formed, but of an architecture llama.cpp does not know: loading it fails with a notice,
    making its copy fails in the Hardware tab with the quantizer's reason, and nothing is switched."""
    installed = install_tiny(tiny, isolated_home)
    odd = installed["target"].with_name("odd-target.gguf")
    data = installed["target"].read_bytes()
    i = data.index(b"llama", data.index(b"general.architecture"))
    odd.write_bytes(data[:i] + b"lllma" + data[i + 5:])
    w = open_window(qtbot)
    w.controller.update_settings(target=str(odd))
    qtbot.waitUntil(lambda: FAST_COPY in rows(w.bar.target) and w.bar.target.currentData() == str(odd),
                    timeout=REPLY_TIMEOUT_MS)
    from app.models.models_dialog import ModelsDialog

    dlg = ModelsDialog(w.controller, w, tab="fast-copy")
    qtbot.addWidget(dlg)
    box = dlg.hardware.fast_copy
    assert box.isVisibleTo(dlg) and box.button.text() == "Make the fast copy and use it"
    qtbot.mouseClick(box.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: box.row.task is not None and box.row.task.state != TaskState.RUNNING,
                    timeout=REPLY_TIMEOUT_MS)
    assert box.row.task.state == TaskState.FAILED
    assert "quantizer could not copy odd-target.gguf" in box.row.label.text()
    qtbot.waitUntil(lambda: box.button.isEnabled(), timeout=REPLY_TIMEOUT_MS)  # it can be tried again
    assert w.controller.settings.target == str(odd)
    assert cpu_weights.ready(odd, cpu_weights.Role.FAST_TARGET) is None
    assert not [p for p in cpu_weights.folder().iterdir() if p.name.startswith(".odd-target.")]


def test_a_verdict_that_speculation_does_not_pay_points_to_the_fast_copy(qtbot, tiny, isolated_home):
    """The stats panel's hint, under a real reply on the tiny pair given the totals of a reply that
    ran slower (as tests/app/test_app_uncertain_verdict.py does): shown where it can help, followed by a
    click, gone where speculation helps, the target is a copy, or nothing drafts."""
    install_tiny(tiny, isolated_home, draft_max=4)
    w = open_window(qtbot)
    qtbot.waitUntil(lambda: w.stats.fast_copy_offered, timeout=REPLY_TIMEOUT_MS)
    reply = send(qtbot, w)

    def show(speedup: float) -> bool:
        stats = dataclasses.replace(reply.stats, certainty=Certainty.SETTLED, estimated_speedup=speedup)
        w.stats.show_snapshot(ReplyStats.of_rounds([], stats, False).snapshot())
        return w.stats.fast_copy_hint.isVisibleTo(w)

    assert show(1.5) is False  # helping: nothing to point to
    assert show(0.8) is True and "slower" in w.stats.verdict.text()
    seen = {}

    def look(dlg):
        seen["tab"] = dlg.tabs.tabText(dlg.tabs.currentIndex())
        seen["focus"] = dlg.focusWidget() is dlg.hardware.fast_copy.button
        qtbot.keyClick(dlg, Qt.Key.Key_Escape)

    in_dialog(qtbot, lambda: w.models_dialog, look)
    hint = w.stats.fast_copy_hint
    qtbot.mouseClick(hint, Qt.MouseButton.LeftButton, pos=QPoint(6, hint.fontMetrics().height() // 2))
    qtbot.waitUntil(lambda: "tab" in seen)
    assert seen == {"tab": "Hardware", "focus": True}

    w.bar.drafter.setFocus()  # "none (plain decoding)", the list's last row, by keyboard
    qtbot.keyClick(w.bar.drafter, Qt.Key.Key_Down, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: w.bar.drafter.view().isVisible())
    qtbot.keyClick(w.bar.drafter.view(), Qt.Key.Key_End)
    qtbot.keyClick(w.bar.drafter.view(), Qt.Key.Key_Return)
    assert w.controller.settings.drafter == DraftSpec.NONE
    qtbot.waitUntil(lambda: not w.stats.fast_copy_offered)
    assert show(0.8) is False  # no drafter: a faster check has nothing to check
