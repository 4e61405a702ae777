"""Models ▸ Local server in the window (issue 46): turned on as a person does, it serves the loaded pair to a real
`openai` client on 127.0.0.1 through the window's own engine thread, and the served request shows live with the
chat's highlighting and statistics. References: what the client received (text, sources, usage)."""
from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import socket  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

import httpx  # noqa: E402
import openai  # noqa: E402
from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402
from app_support import PROMPT, REPLY_TIMEOUT_MS, activate, install_tiny, menu_keys, open_window, send  # noqa: E402

from app.core.settings import load_settings  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask_streamed(url: str, text: str) -> tuple[str, list[str], dict]:
    c = openai.OpenAI(base_url=url, api_key="k-123", max_retries=0, timeout=120)
    chunks = list(c.chat.completions.create(model="tiny-target", messages=[{"role": "user", "content": text}],
                                            temperature=0, max_tokens=40, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    sources = [s for ch in chunks if ch.choices for s in ch.model_extra.get("draftlight", {}).get("sources", [])]
    return text, sources, chunks[-1].usage.model_extra | {"completion_tokens": chunks[-1].usage.completion_tokens}


def test_the_window_serves_its_pair_and_shows_the_request_live(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, draft_max=3)
    w = open_window(qtbot)
    activate(qtbot, w)
    menu_keys(qtbot, w, "m", "r")
    qtbot.waitUntil(lambda: getattr(w, "server_dialog", None) is not None and w.server_dialog.isVisible())
    dlg = w.server_dialog
    assert not dlg.switch.isChecked() and dlg.address.text() == ""  # off by default
    port = free_port()
    dlg.port.setValue(port)
    dlg.key.setText("k-123")
    qtbot.mouseClick(dlg.switch, Qt.MouseButton.LeftButton)
    url = f"http://127.0.0.1:{port}/v1"
    qtbot.waitUntil(lambda: dlg.address.text() == url)
    assert "this computer only" in dlg.status.text() and not dlg.port.isEnabled()
    qtbot.mouseClick(dlg.copy, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == url
    qtbot.waitUntil(lambda: load_settings()[0].server_port == port)  # kept for the next launch (the switch is not)

    r = httpx.get(f"{url}/models", timeout=60)
    assert r.status_code == 401  # the key is asked for
    with ThreadPoolExecutor(1) as pool:
        served = pool.submit(ask_streamed, url, PROMPT)
        qtbot.waitUntil(served.done, timeout=REPLY_TIMEOUT_MS)
    text, sources, usage = served.result()
    assert text and usage["draft_n"] >= usage["draft_n_accepted"] > 0
    req = dlg.shown
    qtbot.waitUntil(lambda: req is not None and req.finished and req.reply.done is not None, timeout=REPLY_TIMEOUT_MS)
    assert dlg.list.count() == 1 and f"{usage['completion_tokens']} tokens" in dlg.list.item(0).text()
    # The view draws the served reply's tokens with the marks the client was sent, in order.
    frags = list(dlg.view.token_fragments())
    by_token: dict[int, str] = {}
    for f in frags:
        by_token.setdefault(f.index, f.mark.value)
    assert [by_token[i] for i in sorted(by_token)] == [sources[i] for i in sorted(by_token)]
    assert {"accepted", "correction"} <= set(by_token.values())
    assert text.strip() in dlg.view.toPlainText()  # Markdown drops the leading space
    assert dlg.stats.fields["tokens"].text() == str(usage["completion_tokens"])

    # The window's settings are the served defaults as they are now (a request that sets no max_tokens).
    assert usage["completion_tokens"] > 5
    w.controller.update_settings(max_tokens=5)
    c = openai.OpenAI(base_url=url, api_key="k-123", max_retries=0, timeout=120)
    with ThreadPoolExecutor(1) as pool:
        served = pool.submit(c.chat.completions.create, model="tiny-target", temperature=0,
                             messages=[{"role": "user", "content": PROMPT}])
        qtbot.waitUntil(served.done, timeout=REPLY_TIMEOUT_MS)
    short = served.result()
    assert short.usage.completion_tokens == 5 and short.choices[0].finish_reason == "length"
    qtbot.waitUntil(lambda: dlg.list.count() == 2 and dlg.shown is not req)

    # The chat still answers on the same engine thread, and the server is off again with one click.
    assert send(qtbot, w).content
    qtbot.mouseClick(dlg.switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dlg.address.text() == "")
    try:
        httpx.get(f"{url}/models", timeout=5)
        raise AssertionError("the server still answers")
    except httpx.ConnectError:
        pass


def test_closing_the_window_mid_stream_ends_the_served_reply(qtbot, tiny, isolated_home):
    """The server is on and a client is reading a long stream when the window closes: the client's stream ends
    (cut or finished) and the window closes as it does with a reply of its own running."""
    install_tiny(tiny, isolated_home, draft_max=3, max_tokens=2000)
    w = open_window(qtbot)
    w.open_local_server()
    dlg = w.server_dialog
    dlg.port.setValue(free_port())
    qtbot.mouseClick(dlg.switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(dlg.address.text()))
    url = dlg.address.text()

    def read_stream() -> str:
        try:
            with httpx.stream("POST", f"{url}/chat/completions", timeout=120, json={
                    "model": "tiny-target", "messages": [{"role": "user", "content": PROMPT}], "stream": True}) as r:
                return "".join(r.iter_text())
        except httpx.HTTPError as exc:  # the connection cut mid-stream is one of the two right endings
            return f"cut: {type(exc).__name__}"

    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(read_stream)
        qtbot.waitUntil(lambda: dlg.shown is not None and len(dlg.shown.message.tokens) > 0, timeout=REPLY_TIMEOUT_MS)
        w.close()
        got = reading.result(timeout=120)
    assert got.startswith("cut: ") or got.rstrip().endswith("data: [DONE]")
