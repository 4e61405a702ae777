"""A loaded target + drafter pair that answers chats: template, KV reuse, context rule, stop.

Context rule (documented in the README): the system prompt and the newest user message are
always kept. While the rendered conversation plus room for the reply (max_tokens, at most half
the context) does not fit, the oldest remaining exchange (a user message and the replies after
it) is dropped. If the system prompt and the newest message alone do not fit, the request fails
with ContextFullError before anything is generated.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .compat import check_pair, vocab_of_model
from .drafters import CombinedDrafter, Drafter, LookupDrafter, ModelDrafter
from .errors import ContextFullError, EngineError
from .events import Event
from .llama_backend import LlamaModel, LoadSettings, render_chat
from .policy import AutoK, CostModel, DraftPolicy, FixedK, NoDraft
from .sampling import SamplingParams
from .speculative import generate

LOOKUP = "lookup"
NONE = "none"
#: Used when a model has no chat template of its own.
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant: {% endif %}"
)


@dataclass(frozen=True, slots=True)
class GenerationSettings:
    """Per-request choices."""

    sampling: SamplingParams = SamplingParams()
    """Temperature, top-k, top-p, min-p, seed."""
    draft_max: int | str = "auto"
    """Draft length k, or "auto" to let measured costs decide (0 = plain decoding)."""
    max_tokens: int = 512
    """Most tokens in the reply."""
    p_min: float = 0.0
    """Model drafter stops drafting when its top probability falls below this."""


@dataclass(frozen=True, slots=True)
class DraftSpec:
    """Which drafter: a GGUF model, prompt lookup, both (lookup first), or none."""

    model: Path | None = None
    lookup: bool = False

    @staticmethod
    def parse(text: str | None) -> "DraftSpec":
        """'none', 'lookup', 'PATH.gguf' or 'lookup+PATH.gguf'."""
        if not text or text == NONE:
            return DraftSpec()
        if text == LOOKUP:
            return DraftSpec(lookup=True)
        if text.startswith(LOOKUP + "+"):
            return DraftSpec(model=Path(text[len(LOOKUP) + 1 :]), lookup=True)
        return DraftSpec(model=Path(text))

    @property
    def label(self) -> str:
        if self.model and self.lookup:
            return f"lookup+{self.model.name}"
        return self.model.name if self.model else (LOOKUP if self.lookup else NONE)


@dataclass
class RenderedPrompt:
    tokens: list[int]
    dropped_messages: int = 0
    notes: list[str] = field(default_factory=list)


class Session:
    """Owns the llama contexts; not thread-safe: one reply at a time, from one thread."""

    def __init__(
        self,
        target: str | Path,
        draft: DraftSpec | str | None = None,
        target_load: LoadSettings = LoadSettings(),
        draft_load: LoadSettings | None = None,
        progress: Callable[[str, float], None] | None = None,
        calibrate: bool = True,
    ) -> None:
        spec = draft if isinstance(draft, DraftSpec) else DraftSpec.parse(draft)
        self.spec = spec
        self.notes: list[str] = []
        self.target = LlamaModel(target, target_load, progress=(lambda v: progress("target", v)) if progress else None)
        self.draft_model: LlamaModel | None = None
        try:
            if spec.model is not None:
                # The drafter gets the same context length, as llama.cpp's own speculative example does.
                dl = replace(draft_load or target_load, n_ctx=self.target.n_ctx)
                self.draft_model = LlamaModel(spec.model, dl, progress=(lambda v: progress("drafter", v)) if progress else None)
                check_pair(vocab_of_model(self.target), vocab_of_model(self.draft_model),
                           self.target.path.name, self.draft_model.path.name)
        except BaseException:
            self.close()
            raise
        self.drafter = self._make_drafter()
        self.costs = CostModel()
        self._auto: AutoK | None = None
        self.stop_event = threading.Event()
        self.template = self.target.chat_template
        if not self.template:
            self.notes.append(f"{self.target.path.name} has no chat template: using a plain 'Role: text' layout")
            self.template = FALLBACK_TEMPLATE
        if calibrate:
            self.calibrate()

    def _make_drafter(self) -> Drafter | None:
        models = [m for m in (self.target, self.draft_model) if m is not None]
        if any(not m.can_trim for m in models):
            names = ", ".join(m.path.name for m in models if not m.can_trim)
            self.notes.append(f"{names} cannot roll back its cache (recurrent or hybrid model): plain decoding only")
            return None
        lookup = LookupDrafter() if self.spec.lookup else None
        model = ModelDrafter(self.draft_model) if self.draft_model is not None else None
        if lookup and model:
            return CombinedDrafter(lookup, model)
        return lookup or model

    # -- measuring --------------------------------------------------------------
    def calibrate(self, sizes: Sequence[int] = (1, 2, 4, 8, 16), repeats: int = 2) -> None:
        """Time the target's pass for a few block sizes and the drafter's per-token cost.

        Auto prices every draft length from these before the first reply, and refines them online.
        """
        probe = self.target.tokenize("def fibonacci(n):\n    return n if n < 2 else", add_special=True)
        for model, blocks in ((self.target, sizes), (self.draft_model, (1,))):
            if model is None:
                continue
            model.clear()
            model.decode(probe, "none")
            base = len(model.kv)
            model.decode(probe[:1], "all")  # warm-up: first pass allocates graphs
            for n in blocks:
                for _ in range(repeats):
                    model.truncate(base)
                    t = time.perf_counter()
                    model.decode((probe * 16)[:n], "all")
                    dt = time.perf_counter() - t
                    if model is self.target:
                        self.costs.add_verify(n, dt)
                    else:
                        self.costs.draft_per_token.add(dt)
            model.clear()

    # -- prompts ----------------------------------------------------------------
    def render(self, messages: Sequence[dict[str, str]], reserve: int = 0) -> RenderedPrompt:
        """Chat template, then tokens; drops the oldest exchanges by the module's rule."""
        msgs = [dict(m) for m in messages]
        if not msgs or msgs[-1].get("role") != "user":
            raise EngineError("a chat request must end with a user message")
        reserve = min(reserve, self.target.n_ctx // 2)
        dropped = 0
        while True:
            tokens = self._tokens_for(msgs)
            if len(tokens) + reserve <= self.target.n_ctx:
                break
            first = 1 if msgs[0].get("role") == "system" else 0
            if first >= len(msgs) - 1:
                break  # only the system prompt and the newest message remain
            # Drop the oldest user message and the replies that followed it.
            end = first + 1
            while end < len(msgs) - 1 and msgs[end].get("role") != "user":
                end += 1
            dropped += end - first
            del msgs[first:end]
        if len(tokens) >= self.target.n_ctx:
            raise ContextFullError(
                f"the message is too long: {len(tokens)} tokens with the chat template, and the context holds "
                f"{self.target.n_ctx}. Shorten it or load the model with a longer context."
            )
        notes = [f"dropped the {dropped} oldest messages to fit the context"] if dropped else []
        return RenderedPrompt(tokens, dropped, notes)

    def _tokens_for(self, msgs: list[dict[str, str]]) -> list[int]:
        t = self.target
        bos = t.special_text(t.vocab_facts().bos) if t.vocab_facts().bos >= 0 else ""
        eos = t.special_text(t.vocab_facts().eos) if t.vocab_facts().eos >= 0 else ""
        try:
            text = render_chat(self.template, msgs, bos, eos)
        except Exception as exc:  # a template is code from the file: report, do not crash
            raise EngineError(f"the model's chat template failed: {exc}") from None
        # The template writes BOS itself when the model wants it: do not add a second one.
        tokens = t.tokenize(text, add_special=False, parse_special=True)
        if t.vocab_facts().add_bos and (not tokens or tokens[0] != t.vocab_facts().bos):
            tokens.insert(0, t.vocab_facts().bos)
        return tokens

    # -- replies ----------------------------------------------------------------
    def policy_for(self, settings: GenerationSettings) -> DraftPolicy:
        if self.drafter is None:
            return NoDraft()
        if settings.draft_max == "auto":
            if self._auto is None:
                self._auto = AutoK(self.costs, drafter_is_model=self.drafter.uses_model)
            return self._auto
        return FixedK(int(settings.draft_max)) if int(settings.draft_max) > 0 else NoDraft()

    def chat(self, messages: Sequence[dict[str, str]], settings: GenerationSettings = GenerationSettings()) -> Iterator[Event]:
        """Reply to a conversation (list of {'role', 'content'}, system first if any)."""
        rendered = self.render(messages, reserve=settings.max_tokens)
        return self.generate_tokens(rendered.tokens, settings, rendered.notes)

    def complete(self, prompt: str, settings: GenerationSettings = GenerationSettings()) -> Iterator[Event]:
        """Continue raw text, no chat template."""
        return self.generate_tokens(self.target.tokenize(prompt, add_special=True), settings)

    def generate_tokens(self, tokens: list[int], settings: GenerationSettings, notes: Sequence[str] = ()) -> Iterator[Event]:
        self.stop_event.clear()
        if isinstance(self.drafter, ModelDrafter):
            self.drafter.p_min = settings.p_min
        elif isinstance(self.drafter, CombinedDrafter):
            self.drafter.model.p_min = settings.p_min
        return generate(
            self.target, tokens, settings.sampling,
            drafter=self.drafter, policy=self.policy_for(settings), max_tokens=settings.max_tokens,
            stop=self.stop_event, costs=self.costs, note="; ".join([*self.notes, *notes]),
        )

    def stop(self) -> None:
        """Ask the running reply to end; safe from any thread. Takes effect within one round."""
        self.stop_event.set()

    def reset_state(self) -> None:
        """Forget caches and learned acceptance (the benchmark does this between runs)."""
        self.target.clear()
        if self.drafter is not None:
            self.drafter.reset()
        self._auto = None

    def close(self) -> None:
        for m in (getattr(self, "draft_model", None), getattr(self, "target", None)):
            if m is not None:
                m.close()
