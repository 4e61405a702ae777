"""The status line during a launch says what the load does: the first launch reads the models and
times them; the next, with the measurement kept, reads them and is ready, without claiming to measure.
Real windows on the tiny pair."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app_support import LOAD_TIMEOUT_MS, install_tiny  # noqa: E402

MEASURING = "Measuring this machine's speed…"
MODELS_LISTED = "(the model folder was read)"
LISTED_LOADING = "(the model folder was read, the pair already loading)"


def launch(qtbot) -> list[str]:
    """Open the window, wait until the pair is loaded, close it; the status lines it showed, in turn."""
    from app.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    shown: list[str] = []
    w.controller.sig_load_state.connect(lambda state: shown.append(state.text))
    pairing = w.controller.pairing
    w.controller.sig_models.connect(  # read at the moment the folder's models are known
        lambda *_: shown.append(MODELS_LISTED if pairing.loading is None and pairing.loaded is None else LISTED_LOADING))
    w.show()
    qtbot.waitUntil(lambda: w.controller.loaded is not None and shown and shown[-1].startswith("Ready"),
                    timeout=LOAD_TIMEOUT_MS)
    thread = w.controller.thread
    w.close()
    qtbot.waitUntil(thread.isFinished, timeout=LOAD_TIMEOUT_MS)
    return [t for i, t in enumerate(shown) if i == 0 or shown[i - 1] != t]  # one per line shown in turn


def lines(seen: list[str]) -> list[str]:
    """The load's own lines, one per line shown in turn: a stage reports its progress several times, and the
    folder's listing can land between two reports of one stage (a CI run saw "Loading the target…" twice
    around it, for one load)."""
    kept = [t for t in seen if t not in (MODELS_LISTED, LISTED_LOADING)]
    return [t for i, t in enumerate(kept) if i == 0 or kept[i - 1] != t]


def test_a_launch_with_the_measurement_kept_never_says_it_is_measuring(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    first = lines(launch(qtbot))
    assert first.count(MEASURING) == 2 and first.index("Loading the target…") < first.index(MEASURING)
    again = lines(launch(qtbot))
    assert MEASURING not in again
    assert again[-2:] == ["Loading the drafter…", again[-1]] and again[-1].startswith("Ready")


def test_the_saved_pair_starts_loading_before_the_model_folder_is_read(qtbot, tiny, isolated_home):
    """At the first launch the drafter was nobody's choice (prompt lookup, the default): the pair is known
    only once the folder and the drafters are read (lookup + the tiny drafter). At the next launch that saved
    pair starts loading at once, beside those scans, and loads once."""
    from engine.drafting.draft_choice import DraftSpec

    install_tiny(tiny, isolated_home, drafter=DraftSpec.LOOKUP)
    first = launch(qtbot)
    assert MODELS_LISTED in first and LISTED_LOADING not in first
    assert first[-1].startswith("Ready: tiny-target.gguf + prompt lookup + tiny-drafter")
    again = launch(qtbot)
    assert LISTED_LOADING in again and MODELS_LISTED not in again
    assert lines(again).count("Loading the target…") == 1  # one load, not one before the scans and one after
    assert again[-1] == first[-1].replace(first[-1].split("loaded in ")[1], again[-1].split("loaded in ")[1])


def test_a_saved_target_broken_since_is_tried_once_and_the_reason_shown(qtbot, tiny, isolated_home):
    """The saved target was damaged between launches: its early load fails with the file's reason, once
    (the drafter scan ends on the same reason and asks for nothing), and nothing is loaded."""
    from app.window import MainWindow

    installed = install_tiny(tiny, isolated_home)
    launch(qtbot)
    installed["target"].write_bytes(b"GGUF" + b"\xff" * 60)  # same name, not a model any more
    w = MainWindow()
    qtbot.addWidget(w)
    shown: list[str] = []
    w.controller.sig_load_state.connect(lambda state: shown.append(state.text))
    drafters: list[object] = []
    w.controller.pairing.sig_drafters.connect(lambda *a: drafters.append(a))
    w.show()
    qtbot.waitUntil(lambda: "Not loaded" in shown and w.controller.pairing.loading is None, timeout=LOAD_TIMEOUT_MS)
    qtbot.waitUntil(lambda: bool(drafters), timeout=LOAD_TIMEOUT_MS)  # the scans have ended too
    qtbot.wait(300)
    assert shown.count("Not loaded") == 1 and not any(t.startswith("Loading") for t in shown[shown.index("Not loaded"):])
    assert "tiny-target.gguf" in str(w.controller.load_error)
    assert w.controller.loaded is None
