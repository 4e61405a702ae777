"""How the chat view copes with a long conversation: open, toggle highlighting, stream.

    python scripts/long_chat_perf.py [--tokens 50000] [--repeat 5] [--rate 30] [--real]

Generates a conversation of ~50,000 reply tokens (prose, lists, code fences, tables; token events
with rounds of accepted drafts, corrections and bonus tokens) into a ChatStore in a temporary home,
opens it in the real window offscreen, and prints (medians of --repeat runs):

- open: from choosing the chat to its newest messages painted (store read + view), and until every
  older message is rendered too, with the longest event-loop stall meanwhile;
- toggle: Highlight tokens off or on, to painted, and to complete;
- with each, this process's CPU time over the same span (on a busy machine wall time mostly measures the
  others; CPU time much less so);
- stream: the longest event-loop stall while a long reply (prose, then a 150-line code fence) is
  replayed into the view at --rate tokens/s in the controller's 40 ms batches; with --real, while the
  installed real pair writes a reply through the controller instead.

Figures depend on the machine and on what else runs on it; this is a measurement, not a test.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_TOKEN = re.compile(r"\n+| +(?=\n)| {2,}(?=\S)| ?[A-Za-z_]+| ?\d{1,3}| ?[^\sA-Za-z_\d]{1,2}| +")
_WORDS = ("the model draft target token speculative decoding fast slow accept reject round cache verify "
          "sampling temperature greedy context window length batch thread memory layer weight python value "
          "function return list table result speed measure machine plain answer question").split()


def split_tokens(text: str) -> list[str]:
    """The text as a BPE tokenizer would cut it, near enough: words with their leading space, short runs."""
    pieces = _TOKEN.findall(text)
    assert "".join(pieces) == text
    return pieces


def sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 18))]
    if rng.random() < 0.3:
        words[rng.randrange(len(words))] = f"`{rng.choice(_WORDS)}()`"
    if rng.random() < 0.3:
        words[rng.randrange(len(words))] = f"**{rng.choice(_WORDS)}**"
    return " ".join(words).capitalize() + "."


def code_block(rng: random.Random, lines: int) -> str:
    body = ["def step(draft, target, k=4):", '    """Verify a draft against the target."""']
    for i in range(lines):
        kind = rng.random()
        if kind < 0.15:
            body.append(f"    # {sentence(rng)[:-1].lower()}")
        elif kind < 0.3:
            body.append(f"    for i in range({rng.randint(1, 64)}):")
            body.append(f"        total += values[i] * {rng.random():.3f}")
        elif kind < 0.4:
            body.append(f'    name = "{rng.choice(_WORDS)}_{i}"')
        else:
            body.append(f"    x{i} = {rng.choice(_WORDS)}(x{max(i - 1, 0)}, {rng.randint(0, 99)})")
    body.append("    return total")
    return "```python\n" + "\n".join(body) + "\n```"


def reply_text(rng: random.Random, code_lines: int | None = None) -> str:
    parts = [" ".join(sentence(rng) for _ in range(rng.randint(2, 4)))]
    if rng.random() < 0.5:
        parts.append("\n".join(f"- {sentence(rng)}" for _ in range(rng.randint(3, 6))))
    parts.append(code_block(rng, code_lines if code_lines is not None else rng.randint(8, 30)))
    if rng.random() < 0.3:
        rows = [f"| {rng.choice(_WORDS)} | {rng.randint(1, 99)} | {rng.random():.2f} |" for _ in range(rng.randint(2, 5))]
        parts.append("| name | k | rate |\n|---|---:|---:|\n" + "\n".join(rows))
    parts.append(" ".join(sentence(rng) for _ in range(rng.randint(1, 3))))
    return "\n\n".join(parts)


def events_for(text: str, rng: random.Random):
    """Token and round events as a speculative run would emit them: rounds of k=4 drafts, mostly accepted."""
    from engine.drafting.draft_choice import DraftKind
    from engine.decoding.events import RoundEvent, TokenEvent, TokenSource

    pieces = split_tokens(text)
    tokens, rounds, i, rnd = [], [], 0, 0
    while i < len(pieces):
        rnd += 1
        plain = rng.random() < 0.08
        accepted = 0 if plain else min(rng.choice((0, 1, 2, 3, 3, 4, 4, 4)), len(pieces) - i - 1)
        for _ in range(accepted):
            tokens.append(TokenEvent(pieces[i], 1000 + i, TokenSource.ACCEPTED, rnd, 0.9, 0.8, i))
            i += 1
        source = TokenSource.TARGET if plain else (TokenSource.BONUS if accepted == 4 else TokenSource.CORRECTION)
        tokens.append(TokenEvent(pieces[i], 1000 + i, source, rnd, 0.7, None if plain else 0.3, i, 17, 0.8))
        i += 1
        drafted = () if plain else tuple(range(4))
        texts = () if plain else tuple(pieces[max(0, i - 1 - accepted):i - 1]) + ("x",) * (4 - accepted)
        rejected = () if plain or accepted == 4 else (7,)
        rounds.append(RoundEvent(rnd, 0 if plain else 4, drafted, texts[:4], accepted, rejected,
                                 ("x",) if rejected else (), accepted + 1, 0.004, 0.02,
                                 DraftKind.NONE if plain else DraftKind.MODEL, 30.0, 1.3))
    return tokens, rounds


def build_store(total_tokens: int, seed: int) -> tuple[int, int, int]:
    """A long chat and a short one in the temporary home's store: (long id, short id, tokens written)."""
    from app.core.settings import AppSettings
    from app.history.records import Role
    from app.history.store import ChatStore
    from engine.decoding.events import DoneEvent, FinishReason, Stats

    rng = random.Random(seed)
    store = ChatStore()
    settings = AppSettings(target="target.gguf", drafter="drafter.gguf", draft_max=4).to_json()
    long_id = store.new_conversation("A long chat").id
    written = 0
    while written < total_tokens:
        store.add_message(long_id, Role.USER, sentence(rng) + " Show me the code.")
        text = reply_text(rng)
        tokens, rounds = events_for(text, rng)
        m = store.add_message(long_id, Role.ASSISTANT, "", "target.gguf", "drafter.gguf", settings)
        store.append(m.id, rounds, tokens)
        n = len(tokens)
        stats = Stats(tokens=n, rounds=len(rounds), drafted=4 * len(rounds), accepted=int(2.6 * len(rounds)),
                      acceptance_rate=0.65, mean_accepted_per_round=2.6, tokens_per_round=n / len(rounds),
                      acceptance_by_position=(0.9, 0.7, 0.6, 0.5), target_passes=len(rounds),
                      drafter_passes=4 * len(rounds), prompt_tokens=40, prompt_tokens_reused=0, ttft_s=0.1,
                      tokens_per_s=30.0, itl_p50_s=0.03, itl_p95_s=0.06, wall_s=n / 30, prefill_s=0.1, draft_s=1.0,
                      verify_s=3.0, python_s=0.2, estimated_plain_tokens_per_s=22.0, estimated_speedup=1.36,
                      draft_mode="fixed")
        store.finish(m.id, DoneEvent(FinishReason.STOP, text, stats), text)
        written += n
    short_id = store.new_conversation("A short chat").id
    store.add_message(short_id, Role.USER, "hello")
    store.close()
    return long_id, short_id, written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=50_000, help="reply tokens in the long chat (default 50,000)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per figure; medians are printed (default 5)")
    ap.add_argument("--rate", type=float, default=30.0, help="replayed streaming speed, tokens/s (default 30)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--real", action="store_true", help="also stream a reply from the installed real pair")
    ap.add_argument("--freeze", action="store_true",
                    help="gc.freeze() after each opening (the loaded chat leaves the collector's full passes)")
    args = ap.parse_args(argv)

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    real_models = None
    if args.real:
        from engine import paths

        folder = paths.models_dir()  # looked up before the temporary home replaces it
        real_models = (folder / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", folder / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf")
        if not all(p.is_file() for p in real_models):
            print(f"long_chat_perf: --real needs the default pair in {folder}", file=sys.stderr)
            return 2
    home = Path(tempfile.mkdtemp(prefix="draftlight-perf-"))
    os.environ["DRAFTLIGHT_HOME"] = str(home)

    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    from app.core.settings import AppSettings, save_settings

    t0 = time.perf_counter()
    long_id, short_id, written = build_store(args.tokens, args.seed)
    print(f"generated {written:,} reply tokens in {time.perf_counter() - t0:.1f} s (home {home}); {load()}")
    if real_models is not None:
        models = home / "data" / "models"
        models.mkdir(parents=True, exist_ok=True)
        for p in real_models:
            (models / p.name).symlink_to(p)
        save_settings(AppSettings(target=str(models / real_models[0].name), drafter=str(models / real_models[1].name),
                                  draft_max="auto", max_tokens=300, first_run_done=True))
    else:
        save_settings(AppSettings(first_run_done=True))

    app = QApplication.instance() or QApplication(sys.argv[:1])
    from app.window import MainWindow

    w = MainWindow()
    w.resize(1280, 800)
    w.show()
    c, view = w.controller, w.chat
    gaps: list[float] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.nsecsElapsed()]

    def tick() -> None:
        now = clock.nsecsElapsed()
        gaps.append((now - last[0]) / 1e6)
        last[0] = now

    probe = QTimer(interval=5, timeout=tick)

    def spin(cond, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while not cond() and time.monotonic() < end:
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)

    gc_pauses: list[float] = []

    def on_gc(phase: str, _info: dict) -> None:
        if phase == "start":
            on_gc.t = time.perf_counter()
        elif hasattr(on_gc, "t"):
            gc_pauses.append(time.perf_counter() - on_gc.t)

    gc.callbacks.append(on_gc)

    def stall_while(cond, timeout: float = 120.0) -> float:
        gaps.clear()
        last[0] = clock.nsecsElapsed()
        probe.start()
        spin(cond, timeout)
        probe.stop()
        return max(gaps, default=0.0)

    spin(lambda: c.loaded is not None or (real_models is None and w.conversations.list.count() >= 2), 300)
    store_s, view_s, shown_s, full_s, stalls = [], [], [], [], []
    shown_cpu, full_cpu = [], []  # this process's CPU time: less swayed than wall time by other programs
    show = view.show_messages
    spent = []

    def timed_show(messages) -> None:  # the view's share of opening the chat
        t = time.perf_counter()
        show(messages)
        view.viewport().repaint()
        spent.append(time.perf_counter() - t)

    c.sig_messages.disconnect(show)
    c.sig_messages.connect(timed_show)
    for _ in range(args.repeat):
        c.open_conversation(short_id)
        app.processEvents()
        t = time.perf_counter()
        c.store.messages(long_id)
        store_s.append(time.perf_counter() - t)
        t, cpu = time.perf_counter(), time.process_time()
        c.open_conversation(long_id)
        view.viewport().repaint()
        shown_s.append(time.perf_counter() - t)
        shown_cpu.append(time.process_time() - cpu)
        view_s.append(spent[-1])
        if args.freeze:
            gc.freeze()
        stalls.append(stall_while(lambda: view.complete))
        full_s.append(time.perf_counter() - t)
        full_cpu.append(time.process_time() - cpu)
    n_messages = len(view.messages)
    print(f"open {n_messages} messages: newest painted {med(shown_s)} (store read {med(store_s)}, view "
          f"{med(view_s)}; CPU {med(shown_cpu)}) · all rendered {med(full_s)} (CPU {med(full_cpu)}) · longest "
          f"stall while the rest rendered {statistics.median(stalls):.0f} ms (worst {max(stalls):.0f})")

    toggle_s, toggle_full, toggle_stalls, toggle_cpu, toggle_full_cpu = [], [], [], [], []
    for _ in range(args.repeat):
        t, cpu = time.perf_counter(), time.process_time()
        w.act_highlight.trigger()
        view.viewport().repaint()
        toggle_s.append(time.perf_counter() - t)
        toggle_cpu.append(time.process_time() - cpu)
        toggle_stalls.append(stall_while(lambda: view.complete))
        toggle_full.append(time.perf_counter() - t)
        toggle_full_cpu.append(time.process_time() - cpu)
    print(f"toggle highlight: painted {med(toggle_s)} (CPU {med(toggle_cpu)}) · all rendered {med(toggle_full)} "
          f"(CPU {med(toggle_full_cpu)}) · longest stall after {statistics.median(toggle_stalls):.0f} ms "
          f"(worst {max(toggle_stalls):.0f})")
    if not c.settings.highlight:
        w.act_highlight.trigger()
        spin(lambda: view.complete)

    redraws: list[float] = []
    redraws_cpu: list[float] = []
    render_live = view._render_live

    def timed_redraw(*a):  # the view's own share of a stall: one redraw of the streaming reply
        t, cpu = time.perf_counter(), time.process_time()
        out = render_live(*a)
        redraws.append(time.perf_counter() - t)
        redraws_cpu.append(time.process_time() - cpu)
        return out

    view._render_live = timed_redraw
    replay(app, view, args, stall_while)
    print(f"  the view's longest redraw of the streaming reply: {max(redraws, default=0) * 1000:.0f} ms "
          f"(CPU {max(redraws_cpu, default=0) * 1000:.0f} ms; {len(redraws)} redraws)")
    redraws.clear()
    if real_models is not None:
        c.new_conversation()  # a fresh chat: the long one would not fit the context
        spin(lambda: not view.messages)
        w.input.setPlainText("Write a Python function that merges two sorted lists, with a docstring and tests.")
        w._send(w.input.toPlainText())
        spin(lambda: c.busy, 30)
        worst = stall_while(lambda: not c.busy, 900)
        reply = c.messages[-1]
        print(f"stream (real pair, {len(reply.tokens)} tokens): longest event-loop stall {worst:.0f} ms, "
              f"p99 {pct(gaps, 99):.0f} ms over {len(gaps)} ticks of 5 ms; the view's longest redraw "
              f"{max(redraws, default=0) * 1000:.0f} ms ({len(redraws)} redraws)")
        long_gaps = [(i, g) for i, g in enumerate(gaps) if g > 50]
        if long_gaps:
            print(f"  gaps over 50 ms at ticks {long_gaps[:10]} of {len(gaps)}")
    print(f"longest garbage-collector pause seen: {max(gc_pauses, default=0) * 1000:.0f} ms "
          f"({len(gc_pauses)} collections)")
    print(f"at the end: {load()}")
    w.close()
    return 0


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


def replay(app, view, args, stall_while) -> None:
    """A long reply streamed into the view at --rate tokens/s, in 40 ms batches as the controller sends them."""
    from PySide6.QtCore import QTimer

    from app.history.records import Message, Role
    from engine.decoding.events import FinishReason

    rng = random.Random(args.seed + 1)
    text = reply_text(rng, code_lines=150)
    tokens, rounds = events_for(text, rng)
    question = Message(-10, Role.USER, "And a long one?", created=time.time())
    reply = Message(-11, Role.ASSISTANT, "", "target.gguf", "drafter.gguf", created=time.time())
    view.append_message(question)
    view.append_message(reply)
    per_batch = max(1, round(args.rate * 0.04))
    state = {"i": 0, "done": False}

    def feed() -> None:
        i = state["i"]
        batch = tokens[i:i + per_batch]
        state["i"] = i + len(batch)
        for r in rounds:
            if r.round not in reply.rounds and any(t.round == r.round for t in batch):
                reply.rounds[r.round] = r
        reply.tokens.extend(batch)
        view.reply_changed(reply.id, i)
        if state["i"] >= len(tokens):
            timer.stop()
            reply.content, reply.finish_reason = text, FinishReason.STOP
            view.finish_reply(reply)
            state["done"] = True

    timer = QTimer(interval=40, timeout=feed)
    timer.start()
    worst = stall_while(lambda: state["done"], 600)
    print(f"stream (replayed, {len(tokens)} tokens at {args.rate:g}/s, a 150-line fence): longest event-loop stall "
          f"{worst:.0f} ms")


def med(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms"


def pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * q / 100))]


if __name__ == "__main__":
    sys.exit(main())
