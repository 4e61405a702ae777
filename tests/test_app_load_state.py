"""The status line during a launch says what the load does: the first launch reads the models and
times them; the next, with the measurement kept, reads them and is ready, without claiming to measure.
Real windows on the tiny pair."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from test_app_support import LOAD_TIMEOUT_MS, install_tiny  # noqa: E402

MEASURING = "Measuring this machine's speed…"


def launch(qtbot) -> list[str]:
    """Open the window, wait until the pair is loaded, close it; the status lines it showed, in turn."""
    from app.window import MainWindow

    w = MainWindow()
    qtbot.addWidget(w)
    shown: list[str] = []
    w.controller.sig_load_state.connect(lambda state: shown.append(state.text))
    w.show()
    qtbot.waitUntil(lambda: w.controller.loaded is not None and shown and shown[-1].startswith("Ready"),
                    timeout=LOAD_TIMEOUT_MS)
    thread = w.controller.thread
    w.close()
    qtbot.waitUntil(thread.isFinished, timeout=LOAD_TIMEOUT_MS)
    return [t for i, t in enumerate(shown) if i == 0 or shown[i - 1] != t]  # one per line shown in turn


def test_a_launch_with_the_measurement_kept_never_says_it_is_measuring(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home)
    first = launch(qtbot)
    assert first.count(MEASURING) == 2 and first.index("Loading the target…") < first.index(MEASURING)
    again = launch(qtbot)
    assert MEASURING not in again
    assert again[-2:] == ["Loading the drafter…", again[-1]] and again[-1].startswith("Ready")
