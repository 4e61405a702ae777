"""The benchmark: every speed claim is a ratio against plain decoding from the same run.

For each prompt, plain decoding and every speculative variant run interleaved (the order
rotates each repeat) after a warm-up; drafter state (lookup index, drafter KV, Auto's learned
acceptance) is cleared before every run so nothing is replayed from an earlier one. Results
are medians over prompts and repeats, per category.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.attachments import read_attachment, user_content
from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent
from engine.decoding.session import GenerationSettings, Session
from engine.drafting.draft_choice import DraftLength, DraftSpec
from engine.drafting.history_index import DEFAULT_CAP_MB, HistoryIndex, vocab_fingerprint
from engine.errors import AttachmentError, EngineError

PLAIN = "plain"
#: Plain decoding once more in every group, across the group from the first: its speedup over plain is
#: how far two measurements of the very same work differ here (the verdict cannot be judged finer).
CONTROL = "plain (control)"
HISTORY = "history"
#: What a variant timed through the local server adds to its name and family (engine.frontends.bench_served).
SERVED = " (served)"


@dataclass(frozen=True, slots=True)
class BenchPrompt:
    """One line of the prompts file."""

    id: str
    category: str
    prompt: str
    """The last user message."""
    history: tuple[dict[str, str], ...] = ()
    """Earlier turns of a multi-turn chat (role, content), oldest first."""
    half: str = ""
    """Which half of a split set it is in ("tune" or "report"; resources/bench/wide/SOURCES.md), if any."""

    @property
    def messages(self) -> list[dict[str, str]]:
        return [*map(dict, self.history), {"role": "user", "content": self.prompt}]


@dataclass(frozen=True, slots=True)
class Variant:
    """A way of decoding to compare against plain decoding."""

    name: str
    draft: DraftSpec
    draft_max: DraftLength
    history: bool = False
    """Prompt lookup drafts from past conversations too (an index of the other conversations)."""
    served: bool = False
    """Through the local server, timed at its HTTP client (engine.frontends.bench_served)."""

    @property
    def family(self) -> str:
        """Which drafter: Auto is compared with the fixed draft lengths of the same drafter (not served ones)."""
        base = HISTORY if self.history else self.draft.label
        return f"{base}{SERVED}" if self.served else base

    @property
    def fixed(self) -> bool:
        return not self.draft_max.is_auto


@dataclass(slots=True)
class RunResult:
    """One generation."""

    prompt_id: str
    category: str
    variant: str
    repeat: int
    tokens: int
    tokens_per_s: float
    acceptance_rate: float
    mean_accepted_per_round: float
    ttft_s: float
    itl_p50_s: float
    itl_p95_s: float
    python_share: float
    estimated_speedup: float | None
    finish_reason: str
    wall_s: float
    same_as_plain: bool | None = None
    diverged_at: int | None = None
    """First reply position where greedy output left plain decoding's."""
    tie_gap: float | None = None
    """How far apart the two candidates were there (logits, the larger of the two passes' margins)."""
    tie: bool | None = None
    """Whether that was a numerical tie (see `divergence`)."""
    python_ms_per_token: float = 0.0
    """The engine's own time (neither llama.cpp nor the consumer) per emitted token."""
    family: str = PLAIN
    """The drafter (Auto is compared with the fixed k of the same drafter, and with plain)."""
    fixed: bool = True
    """A fixed draft length (plain decoding counts as k = 0)."""
    busy: bool = False
    """A busy loop took one core during this run (and the rest of its prompt's group): --busy-half."""
    certainty: str = ""
    """How sure the engine said its estimated speedup was (engine.decoding.events.Certainty)."""
    rounds: list[tuple[int, int, int, float, float, str]] = field(default_factory=list, repr=False)
    """Per round: k asked, drafted, accepted, draft seconds, verify seconds, drafter kind."""
    token_ids: list[int] = field(default_factory=list, repr=False)
    second_choices: list[tuple[int | None, float | None]] = field(default_factory=list, repr=False)


def _with_files(message: dict, folder: Path, where: str) -> str:
    """A message's content with its attached files (paths relative to the prompts file) as the app gives them
    to the model: each file's name and text in a fence, before the words (engine.attachments.user_content)."""
    files = message.get("attachments") or []
    if not files:
        return message["content"]
    if message["role"] != "user" or not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise EngineError(f"{where}: 'attachments' must be a list of file paths, on a user message")
    try:
        return user_content(message["content"], [read_attachment(folder / f) for f in files])
    except AttachmentError as exc:
        raise EngineError(f"{where}: {exc}") from None


def load_prompts(path: Path) -> list[BenchPrompt]:
    """The prompts file: one JSON object a line, a 'category' and a 'prompt' or 'messages' (role/content; a user
    message may name 'attachments', files relative to the prompts file)."""
    prompts = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise EngineError(f"cannot read the prompts file {path}: {exc.strerror}") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EngineError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        if isinstance(obj, dict) and isinstance(obj.get("messages"), list) and obj["messages"]:
            msgs = obj["messages"]
            if not all(isinstance(m, dict) and isinstance(m.get("content"), str) and m.get("role") in ("system", "user", "assistant")
                       for m in msgs) or msgs[-1]["role"] != "user":
                raise EngineError(f"{path}:{n}: 'messages' must be role/content pairs ending with a user message")
            msgs = [{"role": m["role"], "content": _with_files(m, Path(path).parent, f"{path}:{n}")} for m in msgs]
            obj = {**obj, "prompt": msgs[-1]["content"], "history": tuple(msgs[:-1])}
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str) or not isinstance(obj.get("category"), str):
            raise EngineError(f"{path}:{n}: each line needs a 'prompt' (or 'messages') and a 'category' (strings)")
        prompts.append(BenchPrompt(id=str(obj.get("id", f"{obj['category']}-{n}")), category=obj["category"], prompt=obj["prompt"],
                                   history=obj.get("history", ()), half=str(obj.get("half", ""))))
    if not prompts:
        raise EngineError(f"{path} holds no prompts")
    return prompts


CONTROL_VARIANT = Variant(CONTROL, DraftSpec(), DraftLength.fixed(0))


def parse_variants(items: Sequence[str], draft_max: DraftLength) -> list[Variant]:
    """'none', 'lookup', 'history' (lookup that also drafts from an index of other conversations),
    a GGUF path, 'lookup+PATH' (lookup first, then that model), or 'auto' (lookup first, then the first
    model drafter given); 'ITEM@K' gives that variant its own draft length K (a number or 'auto')."""
    parsed = []
    for item in items:
        name, _, k = item.partition("@")
        parsed.append((name, DraftLength.parse(k) if k else draft_max))
    models = [Path(n) for n, _ in parsed if n not in ("none", "lookup", "auto", HISTORY) and not n.startswith("lookup+")]
    variants = []
    for name, k in parsed:
        if name == "none":
            continue  # plain decoding always runs: it is the baseline
        if name == "auto":
            spec = DraftSpec(model=models[0], lookup=True) if models else DraftSpec(lookup=True)
            variants.append(Variant("auto", spec, DraftLength.AUTO))
        elif name == "lookup":
            variants.append(Variant(f"lookup k={k}", DraftSpec(lookup=True), k))
        elif name.startswith("lookup+"):
            spec = DraftSpec.parse(name)
            variants.append(Variant(f"{spec.label} k={k}", spec, k))
        elif name == HISTORY:
            variants.append(Variant(f"history k={k}", DraftSpec(lookup=True), k, history=True))
        else:
            variants.append(Variant(f"{Path(name).stem} k={k}", DraftSpec(model=Path(name)), k))
    return variants


def history_indexes(session: Session, prompts: Sequence[BenchPrompt], chats: Sequence[BenchPrompt],
                    base: HistoryIndex | None = None, cap_bytes: int = int(DEFAULT_CAP_MB * 2**20),
                    reply_tokens: int = 0) -> dict[str, HistoryIndex]:
    """Per measured prompt, an index of the conversations in `chats` other than that prompt's own
    (by id or by messages), on top of `base` if given: a history variant is never helped by the
    conversation it is measured on. With `reply_tokens`, each conversation is indexed with the
    target's own plain greedy reply to it (that many tokens at most), as a past chat would hold."""
    fp = vocab_fingerprint(session.target)
    tokens = {c.id: session.render(c.messages).tokens for c in chats}  # as the chat template renders them
    if reply_tokens > 0:
        session.use_history(None)
        session.set_drafter(None)
        for c in chats:
            session.reset_state()
            settings = GenerationSettings(draft_max=DraftLength.fixed(0), max_tokens=reply_tokens)
            tokens[c.id] += [e.token_id for e in session.chat(c.messages, settings) if isinstance(e, TokenEvent)]
    out = {}
    for p in prompts:
        index = base.copy() if base is not None else HistoryIndex(fp, cap_bytes)
        for c in chats:
            if c.id != p.id and c.messages != p.messages:
                index.add(tokens[c.id])
        out[p.id] = index
    return out


def _one_run(session: Session, prompt: BenchPrompt, variant: Variant | None, max_tokens: int, repeat: int,
             histories: dict[str, HistoryIndex] | None = None) -> RunResult:
    history = histories.get(prompt.id) if histories and variant is not None and variant.history else None
    if variant is not None and variant.history and history is None:
        raise EngineError(f"no history index for {prompt.id}")
    session.use_history(history)
    session.set_drafter(variant.draft if variant else None)
    session.reset_state()  # nothing replayed: lookup index, drafter KV and Auto's learned acceptance start empty
    if prompt.history:  # as in the app, which reads a conversation into the drafter after each reply
        session.read_ahead(prompt.history)
    settings = GenerationSettings(draft_max=variant.draft_max if variant else DraftLength.fixed(0), max_tokens=max_tokens)
    if variant is not None and variant.served:
        return _served(session, prompt, variant, settings, repeat)
    ids: list[int] = []
    seconds: list[tuple[int | None, float | None]] = []
    rounds: list[tuple[int, int, int, float, float, str]] = []
    done: DoneEvent | None = None
    for ev in session.chat(prompt.messages, settings):
        if isinstance(ev, RoundEvent):
            rounds.append((ev.k, len(ev.drafted), ev.accepted, round(ev.draft_s, 6), round(ev.verify_s, 6), ev.drafter.value))
        elif isinstance(ev, TokenEvent):
            ids.append(ev.token_id)
            seconds.append((ev.runner_up, ev.margin))
        elif isinstance(ev, DoneEvent):
            done = ev
    assert done is not None
    s = done.stats
    return RunResult(
        prompt_id=prompt.id, category=prompt.category, variant=variant.name if variant else PLAIN, repeat=repeat,
        tokens=s.tokens, tokens_per_s=s.tokens_per_s, acceptance_rate=s.acceptance_rate,
        mean_accepted_per_round=s.mean_accepted_per_round, ttft_s=s.ttft_s, itl_p50_s=s.itl_p50_s,
        itl_p95_s=s.itl_p95_s, python_share=s.python_s / s.wall_s if s.wall_s else 0.0,
        estimated_speedup=s.estimated_speedup, finish_reason=done.finish_reason.value, wall_s=s.wall_s, token_ids=ids,
        certainty=str(s.certainty),
        second_choices=seconds, python_ms_per_token=1000 * s.python_s / s.tokens if s.tokens else 0.0,
        family=variant.family if variant else PLAIN, fixed=variant.fixed if variant else True, rounds=rounds,
    )


def _served(session: Session, prompt: BenchPrompt, variant: Variant, settings: GenerationSettings,
            repeat: int) -> RunResult:
    from engine.frontends.bench_served import served_run

    got = served_run(session, prompt.messages, settings)
    s, times = got["stats"], got["arrivals"]
    n = len(got["token_ids"])
    gen_s = (times[-1] - s["prefill_s"]) if times else 0.0
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    return RunResult(
        prompt_id=prompt.id, category=prompt.category, variant=variant.name, repeat=repeat, tokens=n,
        tokens_per_s=n / gen_s if gen_s > 0 else 0.0, acceptance_rate=s["acceptance_rate"],
        mean_accepted_per_round=s["mean_accepted_per_round"], ttft_s=times[0] if times else 0.0,
        itl_p50_s=gaps[len(gaps) // 2] if gaps else 0.0, itl_p95_s=gaps[int(0.95 * (len(gaps) - 1))] if gaps else 0.0,
        python_share=s["python_s"] / got["wall_s"], estimated_speedup=s["estimated_speedup"],
        finish_reason=got["finish"], wall_s=got["wall_s"], token_ids=got["token_ids"], certainty=s["certainty"],
        second_choices=[(None, None)] * n, python_ms_per_token=1000 * s["python_s"] / n if n else 0.0,
        family=variant.family, fixed=variant.fixed, rounds=got["rounds"],
    )


@dataclass(frozen=True, slots=True)
class NativeVariant:
    """One of llama.cpp's own speculative modes (llama-speculative-simple), run on the same rendered
    prompt, model files, threads and repacking as Draftlight's runs, interleaved with them."""

    spec_type: str
    draft_max: int | None = None
    drafter: Path | None = None

    @property
    def name(self) -> str:
        return f"llama.cpp {self.spec_type}" + (f" k={self.draft_max}" if self.draft_max else "")


def _native_run(session: Session, tools, prompt: BenchPrompt, v: NativeVariant, max_tokens: int, repeat: int) -> RunResult:
    import tempfile

    from engine.frontends import native

    text = session.render_text(prompt.messages)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8", delete=False) as fh:
        fh.write(text)
    try:
        r = native.speculative(tools, session.target.path, fh.name, n_predict=max_tokens,
                               threads=session.target.n_threads, drafter=v.drafter, spec_type=v.spec_type,
                               draft_max=v.draft_max, repack=session.target.extra_buffers,
                               flash_attn=session.target.flash_attn)
    finally:
        Path(fh.name).unlink(missing_ok=True)
    return RunResult(
        prompt_id=prompt.id, category=prompt.category, variant=v.name, repeat=repeat, tokens=r.n_decoded,
        tokens_per_s=r.tokens_per_s, acceptance_rate=r.n_accepted / r.n_drafted if r.n_drafted else 0.0,
        mean_accepted_per_round=0.0, ttft_s=0.0, itl_p50_s=0.0, itl_p95_s=0.0, python_share=0.0,
        estimated_speedup=None, finish_reason="native", wall_s=r.decode_seconds, family="llama.cpp", fixed=True,
    )


def run_bench(
    session: Session,
    prompts: Sequence[BenchPrompt],
    variants: Sequence[Variant],
    max_tokens: int = 128,
    repeats: int = 3,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
    native: tuple[object, Sequence[NativeVariant]] | None = None,
    histories: dict[str, HistoryIndex] | None = None,
    busy_half: bool = False,
) -> list[RunResult]:
    """`native`: (tools, modes) to run llama.cpp's own speculative modes beside Draftlight's;
    `histories`: per prompt id, the index a history variant drafts from (`history_indexes`);
    `busy_half`: a busy loop takes one core for every other prompt group (plain decoding and every
    variant of one prompt and repeat run under the same load), so the verdict must follow the load."""
    order: list[Variant | None] = [None, *variants]
    tools, natives = native if native else (None, ())
    log(f"warm-up: {len(order)} runs")
    for v in order:
        _one_run(session, prompts[0], v, min(max_tokens, 16), -1, histories)
    results = []
    everything: list = [*order, *natives]
    total = repeats * len(prompts) * (len(everything) + 1)
    n = 0
    group = 0
    for r in range(repeats):
        for p in prompts:
            shift = r % len(everything)  # rotate so no variant always runs first after a prompt change
            runs = {}
            group += 1
            busy = busy_half and group % 2 == 0
            loop = BusyLoop() if busy else None
            rotated = everything[shift:] + everything[:shift]
            rotated.insert((rotated.index(None) + len(rotated) // 2 + 1) % (len(rotated) + 1), CONTROL_VARIANT)
            try:
                _run_group(session, tools, p, rotated, max_tokens, r, histories, runs, results, busy, log, (n, total))
            finally:
                if loop is not None:
                    loop.stop()
            n += len(everything) + 1
            plain = runs[PLAIN]
            for res in runs.values():
                if res.variant != PLAIN:
                    res.same_as_plain = res.token_ids == plain.token_ids
                    if not res.same_as_plain:
                        res.diverged_at, res.tie_gap, res.tie = divergence(plain, res, session.target.is_eog)
                        log(f"    {res.variant} left plain decoding at token {res.diverged_at}: candidates "
                            f"{res.tie_gap:.3f} logits apart ({'a tie' if res.tie else 'NOT a tie'})")
                results.append(res)
    return results


class BusyLoop:
    """Another program taking one core (a build, a browser): a process spinning until stopped."""

    def __init__(self) -> None:
        import multiprocessing

        self._proc = multiprocessing.get_context("spawn").Process(target=_spin, args=(os.getpid(),), daemon=True)
        self._proc.start()

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.join(5)


def _spin(parent: int) -> None:
    """Spin until stopped, or until the benchmark that started it is gone (killed: no atexit runs)."""
    n = 0
    while True:
        n += 1
        if n % 5_000_000 == 0 and os.getppid() != parent:
            return


def _run_group(session, tools, p, order, max_tokens, r, histories, runs, results, busy, log, progress) -> None:
    n, total = progress
    for v in order:
        if isinstance(v, NativeVariant):
            res = _native_run(session, tools, p, v, max_tokens, r)
            res.busy = busy
            n += 1
            log(f"[{n}/{total}] {p.id} {res.variant}: {res.tokens} tok, {res.tokens_per_s:.2f} tok/s, "
                f"acceptance {res.acceptance_rate:.2f}" + (" (busy loop)" if busy else ""))
            results.append(res)
            continue
        res = _one_run(session, p, v, max_tokens, r, histories)
        res.busy = busy
        runs[res.variant] = res
        n += 1
        est = f", estimated {res.estimated_speedup:.2f}x" if res.estimated_speedup else ""
        log(f"[{n}/{total}] {p.id} {res.variant}: {res.tokens} tok, {res.tokens_per_s:.2f} tok/s, "
            f"acceptance {res.acceptance_rate:.2f}{est}" + (" (busy loop)" if busy else ""))


#: Two candidates closer than this (in logits) can swap places between a batched and a
#: single-token pass of a quantized model on the CPU (seen here: up to ~0.5 logits apart
#: somewhere in the vocabulary, ~0.2 between top candidates).
TIE_LOGITS = 0.25


def divergence(plain: RunResult, spec: RunResult, is_eog) -> tuple[int, float, bool]:
    """Where a greedy speculative reply left the plain one, the margin there, and whether it was
    a tie: each pass put the other's choice second, within TIE_LOGITS (or, where one reply
    ended, the end-of-generation token was the other's close second)."""
    a, b = plain.token_ids, spec.token_ids
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if i < min(len(a), len(b)):
        (ra, ma), (rb, mb) = plain.second_choices[i], spec.second_choices[i]
        gap = max(ma or 0.0, mb or 0.0)
        return i, gap, ra == b[i] and rb == a[i] and gap < TIE_LOGITS
    longer = plain if len(a) > len(b) else spec
    r, m = longer.second_choices[i]
    return i, m or 0.0, r is not None and is_eog(r) and (m or 0.0) < TIE_LOGITS
