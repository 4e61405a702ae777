"""`python -m engine ...`: the interface other tools (and people) call.

Bad input prints one clear line on stderr and exits 2: never a traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from engine.errors import EngineError
from engine.frontends.options import (
    add_history_options, add_model_options, add_sampling_options, draft_load_settings, generation_settings,
    history_cap_bytes, load_settings,
)
from engine.decoding.events import Certainty, DoneEvent, TokenEvent, TokenSource

EXIT_BAD_INPUT = 2

_COLOURS = {
    TokenSource.ACCEPTED: "\x1b[32m",  # green: the drafter was right
    TokenSource.CORRECTION: "\x1b[31;4m",  # red, underlined: the target corrected it
    TokenSource.BONUS: "\x1b[36;1m",  # bold cyan: the target's extra token after a full accept
    TokenSource.TARGET: "",  # plain decoding: default colour
}
_RESET = "\x1b[0m"
_DIM = "\x1b[2m"


def _use_colour(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    return bool(os.environ.get("FORCE_COLOR")) or stream.isatty()


def cmd_generate(args) -> int:
    from engine.decoding.session import Session

    settings = generation_settings(args)
    cap = history_cap_bytes(args) if args.history_index else 0
    session = Session(args.target, args.draft, target_load=load_settings(args), draft_load=draft_load_settings(args))
    try:
        history = _open_history(session, args.history_index, cap) if args.history_index else None
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        messages.append({"role": "user", "content": args.prompt})
        prompt = session.render(messages, reserve=settings.max_tokens).tokens
        reply: list[int] = []
        events = _recording(session.chat(messages, settings), reply)
        out = sys.stdout
        if args.json:
            for ev in events:
                out.write(json.dumps(ev.to_dict(), ensure_ascii=False) + "\n")
                out.flush()
            _update_history(history, prompt + reply)
            return 0
        colour = _use_colour(out)
        if colour:
            legend = " ".join(f"{_COLOURS[s]}{s.value}{_RESET}" for s in TokenSource)
            print(f"{_DIM}legend:{_RESET} {legend}", file=sys.stderr)
        done = None
        try:
            for ev in events:
                if isinstance(ev, TokenEvent):
                    out.write(f"{_COLOURS[ev.source]}{ev.text}{_RESET}" if colour and _COLOURS[ev.source] else ev.text)
                    out.flush()
                elif isinstance(ev, DoneEvent):
                    done = ev
        except KeyboardInterrupt:
            session.stop()
            print("\n(stopped)", file=sys.stderr)
            return 130
        out.write("\n")
        if done is not None:
            line = stats_line(done)
            print(f"{_DIM}{line}{_RESET}" if colour else line)
        _update_history(history, prompt + reply)
        return 0
    finally:
        session.close()


def _recording(events, ids: list[int]):
    for ev in events:
        if isinstance(ev, TokenEvent):
            ids.append(ev.token_id)
        yield ev


def _open_history(session, folder, cap: int):
    """The index of past conversations for this target's vocabulary in `folder` (made if need be)."""
    from engine.drafting.history_index import HistoryIndex

    index = HistoryIndex.open_for(folder, session.target, cap)
    for note in index.notes:
        print(f"note: {note}", file=sys.stderr)
    session.use_history(index)
    if not session.spec.lookup:
        print("note: the history index drafts only with --draft lookup or lookup+FILE; this conversation is "
              "still added to it", file=sys.stderr)
    return index


def _update_history(index, tokens: list[int]) -> None:
    """Count this conversation (prompt and reply) in the index and save it."""
    if index is None:
        return
    index.add(tokens)
    try:
        path = index.save()
    except EngineError as exc:  # the reply is out already: say so, do not fail it
        print(f"note: {exc}", file=sys.stderr)
        return
    print(f"history index: {index.describe()} ({path})", file=sys.stderr)


def stats_line(done: DoneEvent) -> str:
    s = done.stats
    parts = [f"{s.tokens} tokens", f"{s.tokens_per_s:.1f} tok/s", f"{s.rounds} rounds"]
    if s.drafted:
        parts += [f"accepted {s.accepted}/{s.drafted} ({s.acceptance_rate:.0%})",
                  f"{s.mean_accepted_per_round:.2f} accepted/round"]
    if s.certainty is Certainty.LOAD_CHANGED:
        parts.append("speedup uncertain (the machine's load changed)")
    elif s.certainty is Certainty.FEW_ROUNDS:
        parts.append("speedup: too few rounds to tell")
    elif s.estimated_speedup is not None:
        parts.append(f"~{s.estimated_speedup:.2f}x plain decoding")
    parts += [f"ttft {s.ttft_s * 1000:.0f} ms", f"draft {s.draft_s:.2f}s / verify {s.verify_s:.2f}s",
              f"k: {s.draft_mode}", f"finish: {done.finish_reason.value}"]
    if s.note:
        parts.append(f"note: {s.note}")
    return " | ".join(parts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Draftlight's speculative decoding engine.")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="reply to one prompt, showing accepted and corrected tokens")
    add_model_options(g)
    add_sampling_options(g)
    g.add_argument("--system", default=None, help="system prompt")
    g.add_argument("--prompt", required=True, help="the user's message")
    g.add_argument("--json", action="store_true", help="one JSON object per event, one per line")
    g.add_argument("--history-index", type=Path, default=None, metavar="DIR",
                   help="opt-in: prompt lookup also drafts from past conversations indexed in DIR (one file per "
                        "vocabulary), and this one is added when the reply ends; needs --draft lookup or lookup+FILE")
    add_history_options(g)
    g.set_defaults(func=cmd_generate)

    from engine.frontends import bench_cli

    from engine.frontends import models_cli, serve

    bench_cli.register(sub)
    models_cli.register(sub)
    serve.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (EngineError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("\n(interrupted)", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: one line for the user, the traceback on request
        if os.environ.get("DRAFTLIGHT_DEBUG"):
            raise
        print(f"internal error ({type(exc).__name__}: {exc}); run with DRAFTLIGHT_DEBUG=1 for details",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
