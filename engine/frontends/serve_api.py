"""The OpenAI API's shapes for the local server (engine.frontends.serve): requests read, replies written.

No HTTP here: a request body becomes a `ServeRequest` (or an `ApiError` saying what is wrong with it), and
the engine's events become OpenAI's JSON objects, whole or as stream chunks, each carrying the tokens'
provenance in a `draftlight` object (documented in docs/serve.md). Clients that do not know it ignore it.
"""
from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from engine.decoding.events import DoneEvent, Event, FinishReason, RoundEvent, Stats, TokenEvent
from engine.decoding.reasoning import split_reply
from engine.decoding.session import GenerationSettings
from engine.sampling import SamplingParams

EXTENSION = "draftlight"
"""The key of the extension object in every reply and chunk."""
MAX_STOPS = 16
"""Most stop strings a request may give (OpenAI allows 4; llama-server more)."""
UNSUPPORTED = ("tools", "functions", "logprobs", "logit_bias", "echo", "suffix")
"""Fields refused with 400 when set; other unknown fields (penalties, user, ...) are ignored."""
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ErrorKind(Enum):
    """What went wrong, as HTTP status and OpenAI's error type."""

    BAD_REQUEST = (400, "invalid_request_error")
    UNAUTHORIZED = (401, "authentication_error")
    NOT_FOUND = (404, "invalid_request_error")
    QUEUE_FULL = (429, "rate_limit_error")
    ENGINE = (500, "server_error")
    NO_MODEL = (503, "server_error")

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def type(self) -> str:
        return self.value[1]


class ApiError(Exception):
    """An answer in OpenAI's error shape: {"error": {"message", "type", "code", "param"}}."""

    def __init__(self, kind: ErrorKind, message: str, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.code, self.param = kind, message, code, param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind.type, "code": self.code, "param": self.param}}


class Endpoint(Enum):
    """Which API a request came to."""

    CHAT = "chat.completion"
    COMPLETION = "text_completion"


@dataclass(frozen=True, slots=True)
class ServeRequest:
    """One request as the engine will run it."""

    endpoint: Endpoint
    """Chat (template, reasoning split) or raw text completion."""
    model: str
    """The model id the client asked for (one the server serves)."""
    settings: GenerationSettings
    """Sampling, stop strings, max tokens, draft length (the server's)."""
    messages: tuple[dict[str, str], ...] = ()
    """Chat: the conversation, as the chat template reads it."""
    prompt: str = ""
    """Completion: the text to continue."""
    stream: bool = False
    """Answer as server-sent events."""
    include_usage: bool = False
    """Streamed: end with a chunk that carries the usage (stream_options.include_usage)."""


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(ErrorKind.BAD_REQUEST, message, code, param)


def parse_request(body: bytes, endpoint: Endpoint, defaults: GenerationSettings, models: tuple[str, ...]) -> ServeRequest:
    """The request in `body`, or ApiError: every field checked for its type and range, unknown fields ignored."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise bad(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # thousands of nested arrays: not a request, and json would say so only by a 500
        raise bad("the request body nests too deeply to be a request", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad("the request body must be a JSON object", code="invalid_json")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise bad("'model' is required: a model id from GET /v1/models", "model")
    if model not in models:
        raise ApiError(ErrorKind.NOT_FOUND, f"The model '{model}' does not exist; this server serves "
                       + ", ".join(f"'{m}'" for m in models), "model_not_found", "model")
    for name in UNSUPPORTED:
        if data.get(name):  # silently ignored, they would change what the client gets back unasked
            raise bad(f"'{name}' is not supported by this server", name, "unsupported_parameter")
    response_format = data.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type", "text") != "text":
        raise bad("only text replies: 'response_format' must be {\"type\": \"text\"}", "response_format",
                  "unsupported_parameter")
    n = _opt(data, "n", int, 1)
    if n != 1:
        raise bad("only n=1 is supported: one reply per request", "n")
    sampling = defaults.sampling
    temperature = _opt(data, "temperature", float, sampling.temperature)
    top_p = _opt(data, "top_p", float, sampling.top_p)
    top_k = _opt(data, "top_k", int, sampling.top_k)
    min_p = _opt(data, "min_p", float, sampling.min_p)
    seed = _opt(data, "seed", int, sampling.seed)
    if not 0.0 <= temperature <= 2.0:
        raise bad("'temperature' must be between 0 and 2", "temperature")
    if not 0.0 < top_p <= 1.0:
        raise bad("'top_p' must be above 0 and at most 1", "top_p")
    if top_k < 0 or not 0.0 <= min_p <= 1.0:
        raise bad("'top_k' must be 0 or more and 'min_p' between 0 and 1", "top_k" if top_k < 0 else "min_p")
    key = "max_completion_tokens" if data.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _opt(data, key, int, defaults.max_tokens)
    if max_tokens < 1:
        raise bad(f"'{key}' must be at least 1", key)
    stream = _opt(data, "stream", bool, False)
    options = _opt(data, "stream_options", dict, {})
    include_usage = _opt(options, "include_usage", bool, False, "stream_options.include_usage")
    settings = replace(defaults, sampling=SamplingParams(temperature, top_k, top_p, min_p, seed),
                       max_tokens=max_tokens, stop=_stops(data.get("stop")))
    common = dict(endpoint=endpoint, model=model, settings=settings, stream=stream, include_usage=include_usage)
    if endpoint is Endpoint.CHAT:
        return ServeRequest(messages=_messages(data.get("messages")), **common)
    return ServeRequest(prompt=_prompt(data.get("prompt")), **common)


def _opt(data: dict, name: str, kind: type, default: Any, param: str | None = None) -> Any:
    """data[name] if present and of `kind` (an int is a float; a bool is neither), else `default` when absent."""
    value = data.get(name)
    if value is None:
        return default
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok or (kind is float and not math.isfinite(value)):
        names = {float: "a number", int: "an integer", bool: "true or false", dict: "an object"}
        raise bad(f"'{param or name}' must be {names[kind]}, not {json.dumps(value)[:40]}", param or name)
    return value


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("'stop' must be a string or a list of strings", "stop")
    if len(stops) > MAX_STOPS:
        raise bad(f"'stop' holds {len(stops)} strings; at most {MAX_STOPS}", "stop")
    return tuple(s for s in stops if s)


def _messages(value: Any) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise bad("'messages' must be a non-empty list of messages", "messages")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(f"{where} must be an object with 'role' and 'content'", where)
        role = m.get("role")
        if role not in _ROLES:
            raise bad(f"{where}.role must be one of {', '.join(_ROLES)}, not {json.dumps(role)[:40]}", f"{where}.role")
        msg = {"role": _ROLES[role], "content": _content(m.get("content"), f"{where}.content", role == "assistant")}
        thinking = m.get("reasoning_content")
        if role == "assistant" and thinking is not None:
            if not isinstance(thinking, str):
                raise bad(f"{where}.reasoning_content must be a string", f"{where}.reasoning_content")
            msg["reasoning_content"] = thinking
        out.append(msg)
    if out[-1]["role"] != "user":
        raise bad("the last message must be the user's: the reply answers it", "messages")
    return tuple(out)


def _content(value: Any, where: str, may_be_empty: bool) -> str:
    """A message's text: a string, or a list of text parts (other kinds of part are refused)."""
    if value is None and may_be_empty:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for part in value:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise bad(f"{where}: only text parts are supported, not {json.dumps(kind)[:40]}", where)
            texts.append(part["text"])
        return "".join(texts)
    raise bad(f"{where} must be a string or a list of text parts", where)


def _prompt(value: Any) -> str:
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str) or not value:
        raise bad("'prompt' must be a non-empty string", "prompt")
    return value


# -- replies ------------------------------------------------------------------------------------

def finish_reason(reason: FinishReason) -> str:
    """OpenAI's finish_reason: the context filling up is a length limit too; a stopped reply stopped."""
    return "length" if reason in (FinishReason.LENGTH, FinishReason.CONTEXT_FULL) else "stop"


def usage(stats: Stats) -> dict[str, Any]:
    """OpenAI's usage, with llama-server's draft counts and the speedup the engine estimates."""
    return {
        "prompt_tokens": stats.prompt_tokens, "completion_tokens": stats.tokens,
        "total_tokens": stats.prompt_tokens + stats.tokens,
        "draft_n": stats.drafted, "draft_n_accepted": stats.accepted,
        "estimated_speedup": None if stats.estimated_speedup is None else round(stats.estimated_speedup, 3),
        "speedup_certainty": stats.certainty.value,
    }


def _round_fields(r: RoundEvent) -> dict[str, Any]:
    """What a round drafted and kept, as the first chunk of its tokens tells it."""
    return {"drafter": r.drafter.value, "drafted": len(r.drafted), "accepted": r.accepted,
            "rejected_text": list(r.rejected_text)}


@dataclass
class ReplyStream:
    """Turns one reply's events into OpenAI objects: `chunks(ev)` while streaming, `whole()` at the end."""

    request: ServeRequest
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    _text: list[str] = field(default_factory=list)
    _opened: bool = False
    _sent_thinking: int = 0
    _sent_answer: int = 0
    _round: RoundEvent | None = None
    _round_told: bool = False
    tokens: list[dict[str, Any]] = field(default_factory=list)
    done: DoneEvent | None = None

    def __post_init__(self) -> None:
        self.id = self.id or f"{'chatcmpl' if self.chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"

    @property
    def chat(self) -> bool:
        return self.request.endpoint is Endpoint.CHAT

    def _chunk(self, delta: dict[str, Any] | None, finish: str | None, ext: dict[str, Any] | None) -> dict[str, Any]:
        if self.chat:
            choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": (delta or {}).get("content", ""), "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.request.model, "choices": [choice]}
        if ext is not None:
            out[EXTENSION] = ext
        return out

    def opening(self) -> dict[str, Any]:
        """The first chunk of a chat stream: the assistant's role."""
        return self._chunk({"role": "assistant", "content": ""}, None, None)

    def chunks(self, ev: Event) -> list[dict[str, Any]]:
        """The chunks this event adds to the stream (a token: one; a round: none; the end: one or two)."""
        if isinstance(ev, RoundEvent):
            self._round, self._round_told = ev, False
            self._opened = self._opened or ev.thinking_open
            return []
        if isinstance(ev, TokenEvent):
            self._text.append(ev.text)
            self.tokens.append({"id": ev.token_id, "text": ev.text, "source": ev.source.value, "round": ev.round})
            ext: dict[str, Any] = {"round": ev.round, "sources": [ev.source.value], "token_ids": [ev.token_id]}
            if self._round is not None and not self._round_told:
                ext.update(_round_fields(self._round))
                self._round_told = True
            return [self._chunk(self._delta(), None, ext)]
        if isinstance(ev, DoneEvent):
            self.done = ev
            out = []
            rest = self._delta(ev)
            if rest:
                out.append(self._chunk(rest, None, None))
            out.append(self._chunk({}, finish_reason(ev.finish_reason), {"finish": ev.finish_reason.value}))
            if self.request.include_usage:
                last = self._chunk(None, None, {"stats": ev.stats.to_dict()})
                last["choices"], last["usage"] = [], usage(ev.stats)
                out.append(last)
            return out
        return []

    def _delta(self, done: DoneEvent | None = None) -> dict[str, str]:
        """The text not sent yet: a chat reply's thinking and answer apart (engine.decoding.reasoning). At the
        end (`done`) its own text and thinking are the truth: tags held back while streaming go out now."""
        if done is not None:
            thinking, answer = (done.thinking, done.text) if self.chat else ("", done.text)
        elif self.chat:
            text = "".join(self._text)
            thinking, answer = split_reply(text, self._opened, final=False).split(text)
        else:
            thinking, answer = "", "".join(self._text)
        delta = {}
        if len(thinking) > self._sent_thinking:
            delta["reasoning_content"] = thinking[self._sent_thinking:]
            self._sent_thinking = len(thinking)
        if len(answer) > self._sent_answer:
            delta["content"] = answer[self._sent_answer:]
            self._sent_answer = len(answer)
        if not delta and done is None:
            delta["content"] = ""
        return delta

    def whole(self) -> dict[str, Any]:
        """The reply as one object (after the DoneEvent)."""
        done = self.done
        assert done is not None, "whole() before the reply ended"
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": done.text}
            if done.thinking:
                message["reasoning_content"] = done.thinking
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason(done.finish_reason)}
        else:
            choice = {"index": 0, "text": done.text, "logprobs": None, "finish_reason": finish_reason(done.finish_reason)}
        return {"id": self.id, "object": self.request.endpoint.value, "created": self.created,
                "model": self.request.model, "choices": [choice], "usage": usage(done.stats),
                EXTENSION: {"tokens": self.tokens, "finish": done.finish_reason.value, "stats": done.stats.to_dict()}}
