"""A loaded target + drafter pair that answers chats: template, KV reuse, context rule, stop.

Context rule (documented in docs/how-it-works.md): the system prompt and the newest user message are
always kept. While the rendered conversation plus room for the reply (max_tokens, at most half
the context) does not fit, the oldest remaining exchange (a user message and the replies after
it) is dropped. When the newest message holds earlier questions joined into it (questions in a row are
sent as one turn, the app says which part with EARLIER_MESSAGES / EARLIER_CHARS), those go next. If the
system prompt and the newest message alone do not fit, the request fails with ContextFullError before
anything is generated.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.decoding.events import DoneEvent, Event, RoundEvent, TokenEvent
from engine.decoding.measure import LoadStage, Measuring
from engine.decoding.joined_turns import earlier_part, plain_turn
from engine.decoding.reasoning import CLOSE, opens_thinking, split_reply
from engine.decoding.speculative import LoopOptions, generate
from engine.drafting.base import Drafter
from engine.drafting.combined import CombinedDrafter
from engine.drafting.compat import check_pair, vocab_of_model
from engine.drafting.costs import BlockCost, CostModel, DepthLine, Ewma, QuietDrafter
from engine.drafting.draft_choice import DraftLength, DraftSpec
from engine.drafting.history_index import HistoryIndex, vocab_fingerprint
from engine.drafting.lookup import LookupDrafter
from engine.drafting.model import ModelDrafter
from engine.drafting.mtp import MtpDrafter
from engine.drafting.policy import DraftPolicy, NoDraft, ReplyAuto, make_policy
from engine.assistant_fit import is_assistant, misfit, own_heads
from engine.errors import ContextFullError, EngineError, LoadCancelled
from engine.gguf_check import validate_gguf
from engine.llama import amx_check, cpu_weights
from engine.llama.backend import (
    LlamaModel,
    chat_renderer,
    drafter_flash_attn,
    offloads,
    repacking_decided,
)
from engine.llama.mtp import Assistant
from engine.llama.types import LoadSettings, StopRequest
from engine.sampling import SamplingParams

#: Used when a model has no chat template of its own.
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant: {% endif %}"
)
#: Where a reply in the fallback layout ends: nothing else tells the model its turn is over, and it
#: goes on to write the next "User:" turn. The layout writes "\n\nUser: "; one newline is enough to
#: tell a new turn (and the earliest match wins, so the blank line goes with the marker).
FALLBACK_STOPS = ("\n\nUser:", "\nUser:")



@dataclass(frozen=True, slots=True)
class GenerationSettings:
    """Per-request choices."""

    sampling: SamplingParams = SamplingParams()
    """Temperature, top-k, top-p, min-p, seed."""
    draft_max: DraftLength = DraftLength.AUTO
    """Draft length k, or Auto to let measured costs decide (k=0: plain decoding). An int or 'auto' is
    read as one (DraftLength.parse), so callers may pass the text of a setting or a flag."""
    max_tokens: int = 512
    """Most tokens in the reply."""
    p_min: float = 0.0
    """Model drafter stops drafting when its top probability falls below this."""
    stop: tuple[str, ...] = ()
    """Text that ends the reply, itself left out (an API client's `stop`), besides the template's own."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "draft_max", DraftLength.parse(self.draft_max))


@dataclass
class RenderedPrompt:
    tokens: list[int]
    dropped_messages: int = 0
    notes: list[str] = field(default_factory=list)
    thinking_open: bool = False
    """The template left a thinking block open: the reply starts inside it (engine.decoding.reasoning)."""
    reply_from: int | None = None
    """Where the reply starts in `tokens`: after the template's frame for it, before a reply prefix."""


class Session(Measuring):
    """Owns the llama contexts; not thread-safe: one reply at a time, from one thread."""

    def __init__(
        self,
        target: str | Path,
        draft: DraftSpec | str | None = None,
        target_load: LoadSettings = LoadSettings(),
        draft_load: LoadSettings | None = None,
        progress: Callable[[LoadStage, float], None] | None = None,
        calibrate: bool = True,
        cancel: threading.Event | None = None,
    ) -> None:
        """`cancel`, set from any thread, ends loading and measuring early with LoadCancelled;
        everything loaded so far is freed."""
        self._draft_load = draft_load or target_load
        self._progress = progress
        self._kernel_note: list[str] = []  # where llama.cpp's AMX kernels crash in this build
        if is_assistant(target):  # llama.cpp would say only that it "requires ctx_other"
            raise EngineError(f"{Path(target).name} is a Gemma 4 assistant: it drafts for a Gemma 4 target "
                              "and cannot answer on its own")
        self.target = self._open(Path(target), target_load, LoadStage.TARGET, cancel)
        self.costs = CostModel()
        self.stop_event = StopRequest()
        """The running reply's stop request (a fresh one per reply: a late stop of the last reply cannot
        end the next one); the models watch it while the reply runs, so it ends a pass part-way."""
        self._render, self._template_note, self.stop_strings = self._chat_renderer()
        self.spec = DraftSpec()
        self.draft_model: LlamaModel | None = None
        self._loaded_drafters: dict[Path, LlamaModel | Assistant] = {}
        self.assistant: Assistant | None = None
        """A drafter that rides the target (a Gemma 4 assistant), where one drafts (draft_model is then None)."""
        self._drafter_costs: dict[int, tuple[Ewma, BlockCost, float, DepthLine | None, QuietDrafter]] = {}
        """Per loaded drafter (id): its step, catch-up and interference as this session last had them, so a
        switch back neither measures nor reads the store again (kept figures are at another moment's speed)."""
        self.drafter: Drafter | None = None
        self._drafter_note: list[str] = []
        self._cpu_note: list[str] = []  # why a drafter runs without its copy for this CPU, if it does
        self.history: HistoryIndex | None = None  # past conversations prompt lookup may draft from (opt-in)
        self._auto = ReplyAuto()  # what Auto learned in the last reply, for a continuation of it
        self._calibrate = calibrate
        # DRAFTLIGHT_CONTROL_ROUNDS=0 turns them off: where they fall depends on measured times, and
        # tests that check a reply's exact rounds on tiny models want the rounds a fixed k makes.
        self.control_rounds = os.environ.get("DRAFTLIGHT_CONTROL_ROUNDS", "1") != "0"
        """Now and then a plain round where it costs next to nothing, so the verdict prices plain
        decoding in the same minute (engine.decoding.verdict.ControlRounds)."""
        self._opening: list[int] | None = None  # Session.opening, once worked out
        self._keys: dict[int, str] = {}  # calibration keys of the loaded models (Session._key)
        self._quiet: dict[str, bool] = {}  # per calibration key: measured on an undisturbed machine
        self.kept_calibration: list[str] = []
        self.provisional_calibration: list[str] = []
        """Models whose kept calibration was measured beside other work: used, refined by undisturbed rounds."""
        self._rounds_before: dict[str, int] = {}  # per provisional key: undisturbed rounds counted at earlier launches
        """Names of the models whose costs came from a kept measurement (no measuring at load)."""
        try:
            if calibrate:
                self.calibrate_target(cancel=cancel)
            self.set_drafter(draft, cancel=cancel)
        except BaseException:
            self.close()
            raise

    @property
    def notes(self) -> list[str]:
        """What the user should know about this pair (fallbacks, missing template)."""
        return self._template_note + self._drafter_note + self._cpu_note + self._kernel_note

    def _open(self, path: Path, load: LoadSettings, stage: LoadStage, cancel: threading.Event | None) -> LlamaModel:
        """Load a model, saying so first where it is tried with llama.cpp's AMX kernels (once per file and
        build), and noting where they crash, since replies then run slower than this CPU can."""
        progress = self._progress
        # Checked as LlamaModel checks it next (engine.gguf_check keeps the answer): one read for both.
        tried = repacking_decided(load.extra_buffers, path, validate_gguf(path, read_tokens=False)) is None
        if progress and tried and amx_check.kept(path) is None:
            progress(LoadStage.CHECKING_KERNELS, 0.0)
        model = LlamaModel(path, load, progress=(lambda v: progress(stage, v)) if progress else None, cancel=cancel)
        found = amx_check.kept(path) if tried else None
        if found is not None and found.verdict is amx_check.AmxVerdict.CRASHES and not self._kernel_note:
            self._kernel_note = [amx_check.crash_note(path)]
        return model

    def set_drafter(self, draft: DraftSpec | str | None, cancel: threading.Event | None = None) -> None:
        """Switch drafters without reloading the target. A model drafter is loaded with the
        target's context length and checked against llama.cpp's pairing rules first. If that
        fails or `cancel` is set, the drafter in use stays, measured as it was."""
        spec = DraftSpec.parse(draft)
        if spec.model is not None and (why := own_heads(self.target.path, spec.model)) is not None:
            if not self.target.can_trim:
                why += f" (and {self.target.path.name} cannot roll back its cache: a hybrid or recurrent model)"
            self.draft_model, self.assistant, self.spec, self.drafter = None, None, spec, None
            self._drafter_note = [why]
            return
        if spec.model is not None and is_assistant(spec.model):
            self._set_assistant(spec, Path(spec.model))
            return
        model = None
        fresh = False
        if spec.model is not None:
            path = Path(spec.model)
            model = self._loaded_drafters.get(path)
            if model is None:
                load = replace(self._draft_load, n_ctx=self.target.n_ctx,  # same context length, as llama.cpp's example
                               flash_attn=drafter_flash_attn(self._draft_load.flash_attn, self._draft_load.n_gpu_layers))
                model = self._open(self._drafter_file(path, load, cancel), load, LoadStage.DRAFTER, cancel)
                fresh = True
        previous = self.draft_model
        changed = model is not previous
        per_token, catchup, quiet = Ewma(), BlockCost(), QuietDrafter.seeded(None, {})
        interference, depth_line = 1.0, None
        try:
            if fresh:
                check_pair(vocab_of_model(self.target), vocab_of_model(model), self.target.path.name, model.path.name)
            if changed and model is not None and id(model) in self._drafter_costs:
                per_token, catchup, interference, depth_line, quiet = self._drafter_costs[id(model)]  # as this session left them
            elif changed and model is not None and self._calibrate:
                interference, depth_line, quiet = self._measure_drafter(model, per_token, catchup, cancel=cancel)
        except BaseException:
            if fresh:
                model.close()
            raise
        if fresh:
            self._loaded_drafters[path] = model  # kept: switching back is instant
        self.draft_model = model
        self.assistant = None
        self.spec = spec
        self.drafter = self._make_drafter()
        if changed:
            c = self.costs
            if previous is not None:
                self._drafter_costs[id(previous)] = (c.draft_per_token, c.catchup, c.interference, c.draft_depth,
                                                     c.quiet_drafter)
            c.draft_per_token, c.catchup, c.interference, c.draft_depth = per_token, catchup, interference, depth_line
            c.quiet_drafter = quiet
        if changed:
            self._prime()

    def _set_assistant(self, spec: DraftSpec, path: Path) -> None:
        """Draft with a Gemma 4 assistant bound to the target: refused, with the reason, before anything loads
        where it does not fit; nothing to measure (Auto prices an unmeasured step at a third of a target step
        and learns its cost from the rounds), nothing to read ahead (it shares the target's cache)."""
        why = misfit(self.target.path, path)
        if why is None and not self.target.can_trim:
            why = f"{self.target.path.name} cannot roll back its cache (recurrent or hybrid model)"
        if why is not None:
            raise EngineError(f"cannot draft with {path.name}: {why}")
        assistant = self._loaded_drafters.get(path)
        if not isinstance(assistant, Assistant):
            assistant = self._loaded_drafters[path] = Assistant(path, self.target, self._draft_load)
        previous, c = self.draft_model, self.costs
        if previous is not None:
            self._drafter_costs[id(previous)] = (c.draft_per_token, c.catchup, c.interference, c.draft_depth,
                                                 c.quiet_drafter)
        if assistant is not self.assistant:
            c.draft_per_token, c.catchup, c.interference, c.draft_depth = Ewma(), BlockCost(), 1.0, None
            c.quiet_drafter = QuietDrafter.seeded(None, {})
        self.draft_model, self.assistant, self.spec = None, assistant, spec
        self.drafter = self._make_drafter()

    def _drafter_file(self, path: Path, load: LoadSettings, cancel: threading.Event | None) -> Path:
        """The file to load for drafter `path`: its copy made for this CPU where one helps (made now,
        once, if missing: engine.llama.cpu_weights), else the file itself."""
        role = cpu_weights.Role.DRAFTER
        offload = offloads(load.n_gpu_layers)
        if load.cpu_drafter is False or (load.cpu_drafter is None and not cpu_weights.wanted(path, role, offload)):
            return path
        if (done := cpu_weights.ready(path, role)) is not None:
            return done
        if self._progress:
            self._progress(LoadStage.DRAFTER_CPU_COPY, 0.0)
        try:
            return cpu_weights.make(path, role, cancel)
        except LoadCancelled:
            raise
        except EngineError as exc:  # the drafter as it is still works: say so, do not fail the load
            self._cpu_note = [f"the drafter runs as it is: {exc}"]
            return path

    def _make_drafter(self) -> Drafter | None:
        self._drafter_note = []
        if not (self.spec.model or self.spec.lookup):
            return None
        models = [m for m in (self.target, self.draft_model) if m is not None]
        if any(not m.can_trim for m in models):
            names = ", ".join(m.path.name for m in models if not m.can_trim)
            self._drafter_note = [f"{names} cannot roll back its cache (recurrent or hybrid model): plain decoding only"]
            return None
        if self.draft_model is not None and self.spec.model is not None and self.draft_model.path != Path(self.spec.model):
            self._drafter_note = [f"drafter: {self.draft_model.path.name}, a copy of {Path(self.spec.model).name} made "
                                  "for this CPU (Q4_0: drafting costs about a third less; replies are the same)"]
        lookup = LookupDrafter(history=self.history) if self.spec.lookup else None
        model: Drafter | None = (ModelDrafter(self.draft_model, target_vocab=self.target.n_vocab, is_eog=self.target.is_eog)
                                 if self.draft_model is not None else None)
        if self.assistant is not None:
            model = MtpDrafter(self.assistant, target_vocab=self.target.n_vocab, is_eog=self.target.is_eog)
        if lookup and model:
            return CombinedDrafter(lookup, model)
        return lookup or model

    def use_history(self, index: HistoryIndex | None) -> None:
        """Let prompt lookup draft from past conversations too (None: stop). The index must be for
        this target's vocabulary (HistoryIndex.open_for): another's ids would mean other tokens."""
        if index is not None and index.fingerprint != vocab_fingerprint(self.target):
            raise EngineError("the history index was built for another vocabulary than this model's")
        self.history = index
        self.drafter = self._make_drafter()

    # -- measuring --------------------------------------------------------------
    def render(self, messages: Sequence[dict[str, str]], reserve: int = 0,
               reply_prefix: Sequence[int] = ()) -> RenderedPrompt:
        """Chat template, then tokens; drops the oldest exchanges by the module's rule. `reply_prefix`:
        the start of the assistant's reply, already written (Continue): the prompt ends with it, so the
        reply goes on from there and a cache that holds it is reused whole."""
        msgs = [dict(m) for m in messages]
        if not msgs or msgs[-1].get("role") != "user":
            raise EngineError("a chat request must end with a user message")
        earlier = earlier_part(msgs[-1])
        reserve = min(reserve, self.target.n_ctx // 2)
        first = 1 if msgs[0].get("role") == "system" else 0
        # Where each droppable exchange begins (a user message and the replies after it; the newest stays).
        cuts = [first] + [j for j in range(first + 1, len(msgs) - 1) if msgs[j].get("role") == "user"]
        cuts.append(max(first, len(msgs) - 1))

        def fitting(drop: int) -> tuple[bool, list[int], str]:
            tokens, text = self._tokens_for(msgs[:first] + msgs[cuts[drop]:])
            tokens += reply_prefix
            return len(tokens) + reserve <= self.target.n_ctx, tokens, text

        # The fewest oldest exchanges to drop, found by halving: a long imported history took one render and
        # tokenization of the whole chat per exchange dropped.
        fits, tokens, text = fitting(0)
        drop = 0
        if not fits:
            drop = len(cuts) - 1
            fits, tokens, text = fitting(drop)  # all dropped: when even that is too long, no search
            lo, hi = 1, drop - 1
            while fits and lo <= hi:
                mid = (lo + hi) // 2
                got = fitting(mid)
                if got[0]:
                    drop, (fits, tokens, text), hi = mid, got, mid - 1
                else:
                    lo = mid + 1
        del msgs[first:cuts[drop]]
        dropped = cuts[drop] - first
        notes = [f"dropped the {dropped} oldest messages to fit the context"] if dropped else []
        if not fits and earlier is not None:
            # The newest question holds messages it followed (questions in a row are sent as one turn): that
            # history goes as any other, and the question is sent alone.
            count, chars = earlier
            msgs[-1]["content"] = msgs[-1]["content"][chars:]
            tokens, text = self._tokens_for(msgs)
            tokens += reply_prefix
            dropped += count
            notes = [f"the chat's history does not fit the context: dropped the {dropped} oldest messages, "
                     "including the questions the newest one followed"]
        if len(tokens) >= self.target.n_ctx:
            raise ContextFullError(
                f"the message is too long: {len(tokens)} tokens with the chat template, and the context holds "
                f"{self.target.n_ctx}. Shorten it or load the model with a longer context.",
                needed=len(tokens), holds=self.target.n_ctx,
            )
        # A continued reply goes on from its answer: what it adds is answer, whatever the template opened.
        return RenderedPrompt(tokens, dropped, notes, opens_thinking(text) and not reply_prefix,
                              len(tokens) - len(reply_prefix))

    def reply_tokens(self, text: str, token_ids: Sequence[int] = ()) -> list[int]:
        """The tokens of a reply written so far, for `render(reply_prefix=...)`: its own ids when they spell
        its text in this vocabulary (the cache that holds them is then reused), else the text tokenized."""
        t = self.target
        if token_ids and all(0 <= i < t.n_vocab for i in token_ids):
            spelled = b"".join(t.piece(i) for i in token_ids).decode("utf-8", "replace")
            if spelled == text:
                return list(token_ids)
        return t.tokenize(text, add_special=False, parse_special=False)

    def conversation_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        """How many tokens the whole conversation is with the chat template, nothing dropped (as render counts)."""
        return len(self._tokens_for([dict(m) for m in messages])[0])

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` is for the target, as it stands inside a message."""
        return len(self.target.tokenize(text, add_special=False, parse_special=False))

    def _chat_renderer(self) -> tuple[Callable[[list[dict[str, str]]], str], list[str], tuple[str, ...]]:
        """The template's renderer, what to tell the user about it, and the stop strings of chat replies."""
        t = self.target
        facts = t.vocab_facts()
        bos = t.special_text(facts.bos) if facts.bos >= 0 else ""
        eos = t.special_text(facts.eos) if facts.eos >= 0 else ""
        fallback = "using a plain 'Role: text' layout"
        if not t.chat_template:
            return (chat_renderer(FALLBACK_TEMPLATE, bos, eos), [f"{t.path.name} has no chat template: {fallback}"],
                    FALLBACK_STOPS)
        try:
            return chat_renderer(t.chat_template, bos, eos), [], ()
        except Exception as exc:  # a template is code from the file: it may not even compile
            return (chat_renderer(FALLBACK_TEMPLATE, bos, eos),
                    [f"{t.path.name}'s chat template is broken ({exc}): {fallback}"], FALLBACK_STOPS)

    def render_text(self, messages: Sequence[dict[str, str]]) -> str:
        """The conversation as the chat template renders it (what other tools can be given)."""
        try:
            return self._render([plain_turn(m) for m in messages])
        except Exception as exc:
            raise EngineError(f"the model's chat template failed: {exc}") from None

    def _tokens_for(self, msgs: list[dict[str, str]]) -> tuple[list[int], str]:
        t = self.target
        facts = t.vocab_facts()
        try:
            text = self._render([plain_turn(m) for m in msgs])
        except Exception as exc:  # the template may refuse a conversation (e.g. roles must alternate)
            raise EngineError(f"the model's chat template failed: {exc}") from None
        # The template writes BOS itself when the model wants it: do not add a second one.
        tokens = t.tokenize(text, add_special=False, parse_special=True)
        if facts.add_bos and (not tokens or tokens[0] != facts.bos):
            tokens.insert(0, facts.bos)
        return tokens, text

    # -- replies ----------------------------------------------------------------
    def policy_for(self, settings: GenerationSettings, prompt: Sequence[int] = (), continues: bool = False) -> DraftPolicy:
        """Auto learns acceptance per reply (ReplyAuto): a continuation of the reply it last ran (`continues`,
        after the same `prompt`) goes on from what that one learned; any other reply starts afresh."""
        if self.drafter is None:
            return NoDraft()
        if settings.draft_max.is_auto:
            return self._auto.for_reply(self.costs, self.drafter.uses_model, self.spec, prompt, continues,
                                        self.drafter.model_key)
        return make_policy(settings.draft_max, self.costs, self.drafter.uses_model, self.drafter.model_key)

    def chat(self, messages: Sequence[dict[str, str]], settings: GenerationSettings = GenerationSettings(),
             reply_prefix: Sequence[int] = ()) -> Iterator[Event]:
        """Reply to a conversation (list of {'role', 'content'}, system first if any); with `reply_prefix`
        (Session.reply_tokens), continue that reply instead: the events are those of what it adds."""
        return self.reply(self.render(messages, reserve=settings.max_tokens, reply_prefix=reply_prefix), settings)

    def reply(self, rendered: RenderedPrompt, settings: GenerationSettings) -> Iterator[Event]:
        """The reply to a rendered conversation (Session.render): its stop strings, its thinking apart, its
        notes, prompt lookup within the reply."""
        return self.generate_tokens(rendered.tokens, settings, rendered.notes, chat=True,
                                    thinking_open=rendered.thinking_open, reply_from=rendered.reply_from)

    def complete(self, prompt: str, settings: GenerationSettings = GenerationSettings()) -> Iterator[Event]:
        """Continue raw text, no chat template."""
        return self.generate_tokens(self.target.tokenize(prompt, add_special=True), settings)

    def generate_tokens(self, tokens: list[int], settings: GenerationSettings, notes: Sequence[str] = (),
                        chat: bool = False, thinking_open: bool = False, reply_from: int | None = None) -> Iterator[Event]:
        """`chat`: the tokens are a rendered conversation, so the reply ends at the template's stop strings
        and its thinking, if it thinks, comes apart from its answer (`thinking_open`: the prompt opened it);
        `reply_from`: where the reply starts in them (RenderedPrompt.reply_from)."""
        self.stop_event = stop = StopRequest()
        for m in self._models():
            m.watch(stop)
        options = LoopOptions(
            settings.sampling, max_tokens=settings.max_tokens, note="; ".join([*self.notes, *notes]),
            control=self.control_rounds, stop_strings=(*(self.stop_strings if chat else ()), *settings.stop),
            p_min=settings.p_min,
            reply_from=reply_from,
        )
        events = generate(
            self.target, tokens, options, drafter=self.drafter,
            policy=self.policy_for(settings, tokens[:reply_from], continues=reply_from is not None and reply_from < len(tokens)),
            stop=stop, costs=self.costs,
        )
        return self._keeping(_thinking_apart(events, thinking_open) if chat else events)

    def _keeping(self, events: Iterator[Event]) -> Iterator[Event]:
        """The reply's events; afterwards the costs its rounds refined are kept for the next launch."""
        try:
            yield from events
        finally:
            for m in self._models():
                m.watch(None)  # measuring and loading are never cut short by a late stop
            self.keep_calibration()

    def _models(self) -> list[LlamaModel]:
        return [m for m in (self.target, self.draft_model) if m is not None]

    def stop(self) -> None:
        """Ask the running reply to end; safe from any thread, returns at once. The pass in progress
        ends part-way (llama_backend.StopRequest) or, where that cannot be, the reply ends after it."""
        self.stop_event.set()

    def reset_state(self) -> None:
        """Empty both caches, the lookup index and what Auto learned about acceptance (the
        benchmark does this between runs, so nothing is replayed). Measured costs are kept:
        they describe this machine and this pair, not one text."""
        self.target.clear()
        self._auto.forget()
        if self.drafter is not None:
            self.drafter.reset()
            self._prime()  # as after a load

    def opening(self, messages: Sequence[dict[str, str]] = ()) -> list[int]:
        """The tokens every continuation of `messages` (none: a new conversation) opens with before the next
        user message's text: the chat template's turns so far (its system turn as it writes it when none is
        set) and the start of the user's next one. [] where the template refuses such a conversation."""
        if not messages and self._opening is not None:
            return self._opening
        try:
            a, b = (self._tokens_for([*messages, {"role": "user", "content": text}])[0] for text in ("A", "7"))
        except EngineError:  # e.g. a template that refuses a lone user message, or two in a row
            a, b = [], []
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if not messages:
            self._opening = a[:same]
        return a[:same]

    def read_ahead(self, messages: Sequence[dict[str, str]], stop: StopRequest | None = None) -> int:
        """While nothing waits on it (after a reply, while the user writes the next message), the model drafter
        reads the conversation so far and the start of the next user turn, so the next reply's first model draft
        or look reads only the new message (a reply decoded plainly left itself and the next question, 100-200
        tokens, to the next reply's look). `stop` ends it between or inside passes (what was read stays).
        Returns how many of those tokens the drafter holds (0: no model drafter)."""
        m = self.draft_model
        if self.drafter is None or m is None or not messages:
            return 0
        tokens = self.opening(messages)
        if len(tokens) >= m.n_ctx:  # a conversation its context cannot hold: the reply will say so
            return 0
        m.watch(stop)
        try:
            self.drafter.prime(tokens, stop)
        finally:
            m.watch(None)
        return m.common_prefix(tokens)

    def _prime(self) -> None:
        """The model drafter reads the opening at load: a reply's first draft or look then reads only its own
        conversation (the default pair's opening is 24 tokens; a translation's look read 65 + 12 before)."""
        if self.drafter is not None:
            self.drafter.prime(self.opening())

    def close(self) -> None:
        for m in [*getattr(self, "_loaded_drafters", {}).values(), getattr(self, "target", None)]:
            if m is not None:
                m.close()
        self._loaded_drafters = {}
        self.draft_model = self.assistant = None


def _thinking_apart(events: Iterator[Event], opened: bool) -> Iterator[Event]:
    """A chat reply's events, its end split into thinking and answer (engine.decoding.reasoning), with how
    long it thought: from its first token to the one that closed the thinking (to its end if none did)."""
    text: list[str] = []
    first: float | None = None
    closed_at: float | None = None
    for ev in events:
        if isinstance(ev, TokenEvent):
            now = time.perf_counter()
            first = now if first is None else first
            text.append(ev.text)
            # Cheap until a close tag may have come: the split reads the whole text.
            if closed_at is None and CLOSE[-1] in ev.text and split_reply("".join(text), opened, final=False).closed:
                closed_at = now
        elif isinstance(ev, RoundEvent) and opened:
            ev = replace(ev, thinking_open=True)
        elif isinstance(ev, DoneEvent):
            parts = split_reply(ev.text, opened)
            if parts.thinking is not None:
                thinking, answer = parts.split(ev.text)
                end = closed_at if closed_at is not None else time.perf_counter()
                seconds = end - first if first is not None else 0.0
                ev = replace(ev, text=answer, thinking=thinking, stats=replace(ev.stats, thinking_s=seconds))
        yield ev
