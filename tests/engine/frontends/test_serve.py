"""The local OpenAI-compatible server (issue 46), with real clients on 127.0.0.1: the `openai` package, httpx,
curl; the tiny pair on a real engine thread. References are the engine's own replies to the same chats
(Session.chat, no HTTP in between) and values written here."""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from engine.decoding.events import DoneEvent, FinishReason, TokenEvent, TokenSource
from engine.decoding.session import GenerationSettings, Session
from engine.errors import ContextFullError
from engine.frontends.serve import BackgroundServer, EngineThread, ServerOptions, exposure_warning
from engine.llama.types import LoadSettings
from engine.sampling import SamplingParams

GREEDY = GenerationSettings(sampling=SamplingParams(temperature=0.0), draft_max=3, max_tokens=24)
N_CTX = 512
CHAT = [{"role": "user", "content": "python code token draft"}]


class Recorder:
    """Sees each served event on the engine thread; a test may hold the thread at a token (`hold`)."""

    def __init__(self) -> None:
        self.done: dict[int, DoneEvent] = {}
        self.hold = None  # (job, event) -> None, run on the engine thread

    def __call__(self, job, ev) -> None:
        if isinstance(ev, DoneEvent):
            self.done[job.id] = ev
        if self.hold is not None:
            self.hold(job, ev)


@pytest.fixture(scope="module")
def pair(tiny):
    session = Session(tiny["target"], str(tiny["drafter"]), target_load=LoadSettings(n_ctx=N_CTX), calibrate=False)
    yield session
    session.close()


@pytest.fixture(scope="module")
def served(pair):
    recorder = Recorder()
    engine = EngineThread(pair, observe=recorder)
    server = BackgroundServer(engine, ServerOptions(GREEDY, queue=8)).start()
    server.engine, server.recorder = engine, recorder
    yield server
    server.stop()
    engine.close()


def client(server, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key=key, max_retries=0, timeout=300)


def reference(session: Session, messages, max_tokens: int = 24) -> DoneEvent:
    """The engine's own reply, on the same thread discipline (nothing else runs while it does)."""
    return list(session.chat(messages, GenerationSettings(sampling=GREEDY.sampling, draft_max=3,
                                                          max_tokens=max_tokens)))[-1]


def wait_idle(server_or_engine) -> None:
    """Until the engine thread has nothing queued or running (no time limit: the test's own timeout bounds it)."""
    engine = getattr(server_or_engine, "engine", server_or_engine)
    done = threading.Event()
    while not engine.idle():
        done.wait(0.01)


def test_models_lists_the_pair(served):
    models = client(served).models.list()
    [m] = models.data
    assert m.id == "tiny-target" and m.owned_by == "draftlight"
    assert m.model_extra["draftlight"] == {"target": "tiny-target.gguf", "drafter": "tiny-drafter.gguf", "n_ctx": N_CTX}


def test_whole_and_streamed_replies_are_equal_and_carry_provenance(served, pair):
    c = client(served)
    whole = c.chat.completions.create(model="tiny-target", messages=CHAT, temperature=0, max_tokens=24)
    chunks = list(c.chat.completions.create(model="tiny-target", messages=CHAT, temperature=0, max_tokens=24,
                                            stream=True, stream_options={"include_usage": True}))
    wait_idle(served)
    ref = reference(pair, CHAT)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert whole.choices[0].message.content == streamed == ref.text and ref.text
    assert whole.choices[0].finish_reason == chunks[-2].choices[0].finish_reason == {
        FinishReason.STOP: "stop", FinishReason.LENGTH: "length"}[ref.finish_reason]
    # Provenance: one extension object per token chunk, its sources the engine's own for those tokens.
    ext = [ch.model_extra["draftlight"] for ch in chunks if ch.choices and "sources" in (ch.model_extra or {}).get(
        "draftlight", {})]
    sources = [s for e in ext for s in e["sources"]]
    assert sources == [t["source"] for t in whole.model_extra["draftlight"]["tokens"]]
    assert set(sources) <= {s.value for s in TokenSource}
    assert {"accepted", "correction"} <= set(sources)  # the tiny drafter is right and wrong in this reply
    assert [e["round"] for e in ext] == sorted(e["round"] for e in ext)
    assert all("drafted" in e for e, prev in zip(ext, [None, *ext]) if prev is None or prev["round"] != e["round"])
    # Usage: OpenAI's counts, llama-server's draft counts, the engine's estimate and how sure it is.
    for u in (chunks[-1].usage, whole.usage):
        assert u.completion_tokens == ref.stats.tokens and u.prompt_tokens == ref.stats.prompt_tokens
        extra = u.model_extra
        assert extra["draft_n"] == ref.stats.drafted and extra["draft_n_accepted"] == ref.stats.accepted
        assert 0 < extra["draft_n_accepted"] < extra["draft_n"]
        assert sources.count("accepted") <= extra["draft_n_accepted"]
        assert "estimated_speedup" in extra and extra["speedup_certainty"] in {"settled", "few_rounds",
                                                                              "load_changed", "unknown"}


def test_completions_continue_raw_text(served, pair):
    c = client(served)
    whole = c.completions.create(model="tiny-target", prompt="hello world", max_tokens=10, temperature=0)
    streamed = "".join(ch.choices[0].text for ch in c.completions.create(
        model="tiny-target", prompt="hello world", max_tokens=10, temperature=0, stream=True) if ch.choices)
    wait_idle(served)
    ref = list(pair.complete("hello world", GenerationSettings(sampling=GREEDY.sampling, draft_max=3,
                                                               max_tokens=10)))[-1]
    assert whole.choices[0].text == streamed == ref.text


def test_stop_strings_end_the_reply_before_them(served, pair):
    full = reference(pair, CHAT).text
    words = full.split()
    assert len(words) >= 3, full
    stop = " " + words[2]
    got = client(served).chat.completions.create(model="tiny-target", messages=CHAT, temperature=0, max_tokens=24,
                                                 stop=[stop, "never-written"])
    assert got.choices[0].message.content == full[: full.index(stop)]
    assert got.choices[0].finish_reason == "stop"


def test_curl_sees_server_sent_events(served):
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    body = json.dumps({"model": "tiny-target", "messages": CHAT, "max_tokens": 6, "stream": True})
    r = subprocess.run([curl, "-sN", "-D", "-", "-H", "Content-Type: application/json", "-d", body,
                        f"{served.url}/chat/completions"], capture_output=True, text=True, timeout=300)
    head, _, stream = r.stdout.replace("\r\n", "\n").partition("\n\n")
    assert head.startswith("HTTP/1.1 200") and "content-type: text/event-stream" in head.lower()
    events = stream.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all(e.startswith("data: ") and "\n" not in e for e in events[:-1])
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(p["object"] == "chat.completion.chunk" for p in payloads)
    assert payloads[-1]["choices"][0]["finish_reason"] in {"stop", "length"}


@pytest.mark.parametrize("body, status, code, param", [
    (b"{not json", 400, "invalid_json", None),
    (b"[1, 2]", 400, "invalid_json", None),
    (b"[" * 100_000 + b"]" * 100_000, 400, "invalid_json", None),
    (json.dumps({"model": "tiny-target", "messages": CHAT, "temperature": "hot"}).encode(), 400, None, "temperature"),
    (json.dumps({"model": "tiny-target", "messages": CHAT, "max_tokens": 0}).encode(), 400, None, "max_tokens"),
    (json.dumps({"model": "tiny-target", "messages": CHAT, "max_tokens": True}).encode(), 400, None, "max_tokens"),
    (json.dumps({"model": "tiny-target", "messages": "hi"}).encode(), 400, None, "messages"),
    (json.dumps({"model": "tiny-target", "messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, None,
     "messages[0].role"),
    (json.dumps({"model": "tiny-target", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(),
     400, None, "messages[0].content"),
    (json.dumps({"model": "tiny-target", "messages": CHAT, "n": 2}).encode(), 400, None, "n"),
    (json.dumps({"model": "gpt-4o", "messages": CHAT}).encode(), 404, "model_not_found", "model"),
    (json.dumps({"model": "tiny-target", "messages": CHAT, "tools": [{"type": "function"}]}).encode(), 400,
     "unsupported_parameter", "tools"),
    (json.dumps({"model": "tiny-target", "messages": CHAT, "response_format": {"type": "json_object"}}).encode(), 400,
     "unsupported_parameter", "response_format"),
    (json.dumps({"messages": CHAT}).encode(), 400, None, "model"),
])
def test_bad_input_is_a_4xx_in_openai_shape_and_the_server_stays_up(served, body, status, code, param):
    r = httpx.post(f"{served.url}/chat/completions", content=body, headers={"Content-Type": "application/json"},
                   timeout=300)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "code", "param"} and err["message"]
    assert err["type"] == "invalid_request_error" and err["code"] == code and err["param"] == param
    assert client(served).models.list().data  # still answering


def test_a_prompt_over_the_context_says_how_many_tokens(served, pair):
    long = [{"role": "user", "content": "hello world " * 400}]
    with pytest.raises(ContextFullError) as refused:  # the engine's own count, as the app hears it
        pair.render(long)
    needed = refused.value.needed
    assert needed > N_CTX
    with pytest.raises(openai.BadRequestError) as info:
        client(served).chat.completions.create(model="tiny-target", messages=long, max_tokens=4)
    err = info.value.body
    assert err["code"] == "context_length_exceeded" and f"{N_CTX} tokens" in err["message"]
    assert str(needed) in err["message"]
    # An older exchange the app's rule would drop is refused too, with the whole conversation's count.
    history = [{"role": "user", "content": "hello world " * 300}, {"role": "assistant", "content": "ok"},
               {"role": "user", "content": "and now?"}]
    with pytest.raises(openai.BadRequestError) as info:
        client(served).chat.completions.create(model="tiny-target", messages=history, max_tokens=4)
    assert info.value.body["code"] == "context_length_exceeded"
    assert f"{pair.conversation_tokens(history)} tokens" in info.value.body["message"]
    assert pair.conversation_tokens(history) > N_CTX > pair.conversation_tokens(history[-1:])
    assert client(served).chat.completions.create(model="tiny-target", messages=CHAT, max_tokens=2).choices


def test_a_key_when_one_is_set(pair):
    engine = EngineThread(pair)
    server = BackgroundServer(engine, ServerOptions(GREEDY, api_key="s3cret")).start()
    try:
        for key in ("wrong", "s3cret2"):
            with pytest.raises(openai.AuthenticationError) as info:
                client(server, key).chat.completions.create(model="tiny-target", messages=CHAT, max_tokens=2)
            assert info.value.status_code == 401 and info.value.body["code"] == "invalid_api_key"
        r = httpx.get(f"{server.url}/models", timeout=300)  # no header at all
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        got = client(server, "s3cret").chat.completions.create(model="tiny-target", messages=CHAT, max_tokens=2)
        assert got.choices[0].message.content is not None
    finally:
        server.stop()
        engine.close()


def test_two_concurrent_clients_each_get_their_own_reply(served, pair):
    chats = [CHAT, [{"role": "user", "content": "hello world the of and"}]]
    refs = [reference(pair, m).text for m in chats]

    def ask(messages):
        stream = client(served).chat.completions.create(model="tiny-target", messages=messages, temperature=0,
                                                        max_tokens=24, stream=True)
        return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)

    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(ask, chats * 3))
    assert got == refs * 3


def test_a_client_that_disconnects_stops_its_reply_within_a_round(served):
    """The engine thread is held at the reply's first token until the server has seen the client go (no timing)."""
    seen = threading.Event()
    first_round: list[int] = []

    def hold(job, ev):
        if isinstance(ev, TokenEvent) and not first_round:
            first_round.append(ev.round)
            seen.set()
            while not job.cancelled.wait(0.05):  # the test's timeout bounds this
                pass

    served.recorder.hold = hold
    try:
        before = set(served.recorder.done)
        body = {"model": "tiny-target", "messages": CHAT, "max_tokens": 400, "stream": True}
        with httpx.Client(timeout=300) as http:
            with http.stream("POST", f"{served.url}/chat/completions", json=body) as r:
                assert r.status_code == 200
                seen.wait()
        # The client and its connection are gone; the engine thread resumes and must end the reply.
        wait_idle(served)
    finally:
        served.recorder.hold = None
    [job_id] = set(served.recorder.done) - before
    done = served.recorder.done[job_id]
    assert done.finish_reason is FinishReason.CANCELLED
    assert done.stats.rounds <= first_round[0] + 1 and done.stats.tokens < 400


def test_a_full_queue_answers_429_with_retry_after_and_the_waiting_ones_are_served(pair):
    engine = EngineThread(pair)
    server = BackgroundServer(engine, ServerOptions(GREEDY, queue=1)).start()
    gate = threading.Event()

    class Gate:  # holds the engine thread, as a long reply would
        def run(self, session):
            gate.wait()
            return iter(())

    try:
        engine.submit(Gate())
        with ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(client(server).chat.completions.create, model="tiny-target", messages=CHAT,
                                   max_tokens=3) for _ in range(2)]
            while httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=300).json()["pending"] < 2:
                gate.wait(0.01)
            r = httpx.post(f"{server.url}/chat/completions", json={"model": "tiny-target", "messages": CHAT},
                           timeout=300)
            assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["code"] == "queue_full"
            gate.set()
            assert all(f.result(timeout=300).choices[0].finish_reason for f in waiting)
    finally:
        gate.set()
        server.stop()
        engine.close()


def test_load_200_requests_from_4_clients_nothing_dropped(served):
    def ask(i: int) -> str:
        c = client(served)
        msg = [{"role": "user", "content": f"hello {i % 7} world"}]
        if i % 2:
            return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
                model="tiny-target", messages=msg, max_tokens=3, stream=True) if ch.choices)
        return c.chat.completions.create(model="tiny-target", messages=msg, max_tokens=3).choices[0].message.content

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(ask, range(200), timeout=600))
    assert len(replies) == 200 and all(isinstance(r, str) for r in replies)
    # Same question, same greedy reply, streamed or not.
    by_question: dict[int, set[str]] = {}
    for i, r in enumerate(replies):
        by_question.setdefault(i % 7, set()).add(r)
    assert all(len(v) == 1 for v in by_question.values()), by_question
    wait_idle(served)
    assert httpx.get(f"http://127.0.0.1:{served.port}/health", timeout=300).json() == {"status": "ok", "pending": 0}


def test_only_loopback_is_quiet():
    assert exposure_warning("127.0.0.1", None) is None and exposure_warning("::1", None) is None
    assert exposure_warning("localhost", None) is None
    assert "no API key" in exposure_warning("0.0.0.0", None)
    assert "other machines" in exposure_warning("192.168.1.5", "k") and "no API key" not in exposure_warning(
        "192.168.1.5", "k")


def test_a_thinking_model_streams_its_reasoning_apart(tmp_path):
    """Scripted tiny model (as tests/engine/decoding/test_reasoning.py's 'split tags'): tags split across tokens."""
    import tiny_models

    script = ("\n", "<thi", "nk>\n", "The", "\u2581**", "draft", "**", "\u2581is", "\u2581fast", "\n</th", "ink>\n\n",
              "hello", "\u2581world")
    extra = ("<thi", "nk>\n", "The", "\u2581**", "draft", "**", "\n</th", "ink>\n\n", "hello")
    path = tiny_models.write_tiny_model(tmp_path / "thinker.gguf", tiny_models.scripted(
        "thinker", script, chat_template=tiny_models.QWEN3_STYLE, extra_pieces=extra))
    session = Session(path, str(path), calibrate=False)
    engine = EngineThread(session)
    server = BackgroundServer(engine, ServerOptions(GREEDY)).start()
    try:
        c = client(server)
        ask = dict(model="thinker", messages=[{"role": "user", "content": "why"}], max_tokens=40)
        whole = c.chat.completions.create(**ask).choices[0].message
        assert (whole.model_extra["reasoning_content"], whole.content) == ("The **draft** is fast", "hello world")
        deltas = [ch.choices[0].delta for ch in c.chat.completions.create(**ask, stream=True) if ch.choices]
        thinking = "".join(d.model_extra.get("reasoning_content") or "" for d in deltas)
        answer = "".join(d.content or "" for d in deltas)
        assert (thinking, answer) == ("The **draft** is fast", "hello world")
        assert not any("<" in (d.content or "") + (d.model_extra.get("reasoning_content") or "") for d in deltas)
    finally:
        server.stop()
        engine.close()
        session.close()


def test_a_client_that_leaves_while_waiting_is_skipped(pair):
    from engine.frontends.serve_engine import ServedJob

    recorder = Recorder()
    engine = EngineThread(pair, observe=recorder)
    server = BackgroundServer(engine, ServerOptions(GREEDY)).start()
    gate = threading.Event()

    class Gate:
        def run(self, session):
            gate.wait()
            return iter(())

    def queued() -> list:
        return [j for j in list(engine._jobs.queue) if isinstance(j, ServedJob)]

    try:
        engine.submit(Gate())
        body = {"model": "tiny-target", "messages": CHAT, "max_tokens": 4, "stream": True}
        with httpx.Client() as http:
            with pytest.raises(httpx.ReadTimeout):  # it gives up before its turn and closes the connection
                with http.stream("POST", f"{server.url}/chat/completions", json=body, timeout=httpx.Timeout(
                        300, read=0.5)) as r:
                    r.read()
        while not (queued() and all(j.cancelled.is_set() for j in queued())):
            gate.wait(0.01)
        gate.set()
        wait_idle(engine)
        assert recorder.done == {}  # it never ran
        assert httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=300).json()["pending"] == 0
    finally:
        gate.set()
        server.stop()
        engine.close()
