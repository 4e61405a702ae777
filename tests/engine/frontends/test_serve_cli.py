"""`python -m engine serve` as a person starts it: a real process, the bundled tiny pair, the openai client."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx
import openai
from tree import ROOT

TARGET = ROOT / "resources" / "test-models" / "tiny-target.gguf"
DRAFTER = ROOT / "resources" / "test-models" / "tiny-drafter.gguf"


def start(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "engine", "serve", *args], stderr=subprocess.PIPE, text=True,
                            cwd=ROOT, env=env)


def test_the_command_serves_the_pair_and_stays_up_after_bad_input():
    proc = start("--target", str(TARGET), "--draft", str(DRAFTER), "--draft-max", "3", "--host", "127.0.0.1",
                 "--port", "0", "--ctx", "512")
    try:
        line = proc.stderr.readline()
        while line and "serving" not in line:
            line = proc.stderr.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
        assert found, line
        url = found.group(1)
        c = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=300)
        ask = dict(model="tiny-target", messages=[{"role": "user", "content": "hello world"}], temperature=0,
                   max_tokens=16)
        whole = c.chat.completions.create(**ask)
        chunks = list(c.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        assert whole.choices[0].message.content == "".join(ch.choices[0].delta.content or "" for ch in chunks
                                                           if ch.choices)
        assert all("sources" in ch.model_extra["draftlight"] for ch in chunks[1:-2])
        assert chunks[-1].usage.model_extra["draft_n"] >= chunks[-1].usage.model_extra["draft_n_accepted"] > 0
        r = httpx.post(f"{url}/chat/completions", content=b"{not json", timeout=300)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        assert c.models.list().data[0].id == "tiny-target"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert "Traceback" not in proc.stderr.read()


def test_a_busy_port_is_one_line_and_exit_2():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = start("--target", str(TARGET), "--port", str(port))
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2
    assert [line for line in err.splitlines() if line.strip()] == [
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use"]
