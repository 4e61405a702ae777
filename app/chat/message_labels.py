"""The words in a message's header and footer: pair, draft length, sampling, speed, verdict, time (no Qt)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from app.history.records import Message
from engine.drafting.draft_choice import DraftLength
from engine.decoding.events import Certainty

from app.core.drafter_names import recorded_drafter
from app.history.reply_stats import ReplyStats, Tone, modes_label, pace, verdict

_MODEL_SUFFIX = ".gguf"


def model_name(name: str) -> str:
    return name[: -len(_MODEL_SUFFIX)] if name.lower().endswith(_MODEL_SUFFIX) else name


def pair_label(m: Message) -> str:
    """'target ← drafter', 'target alone', or '' when the reply does not say."""
    target = model_name(m.target)
    if not target:
        return ""
    if not recorded_drafter(m.drafter).drafts:
        return f"{target} alone"
    return f"{target} ← {model_name(m.drafter)}"


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def recorded_length(s: dict[str, Any]) -> DraftLength | None:
    """The draft length a reply's recorded settings name; None when they name none (or none readable)."""
    try:
        return DraftLength.parse(s["draft_max"])
    except (KeyError, ValueError):
        return None


def settings_label(s: dict[str, Any], drafted: bool = True) -> str:
    """Draft length and sampling in a few words: 'k=4 · T=0.7, top-p 0.95, top-k 40, min-p 0.05'."""
    parts = []
    k = recorded_length(s)
    if drafted and k is not None:
        parts.append(k.label)
    t = s.get("temperature")
    if t is not None:
        if t == 0:
            parts.append("greedy")
        else:
            sampling = [f"T={_num(t)}"]
            for key, label, off in (("top_p", "top-p", 1), ("top_k", "top-k", 0), ("min_p", "min-p", 0)):
                v = s.get(key)
                if v is not None and v != off:
                    sampling.append(f"{label} {_num(v)}")
            parts.append(", ".join(sampling))
    if s.get("seed") is not None:
        parts.append(f"seed {s['seed']}")
    if s.get("system_prompt"):
        parts.append("system prompt")
    return " · ".join(parts)


def settings_tip(m: Message) -> str:
    """Everything the reply was made with, one item a line (the header's tooltip)."""
    s = m.settings
    lines = [f"Target: {m.target or '–'}", f"Drafter: {m.drafter or '–'}"]
    k = recorded_length(s)
    if k is not None:
        lines.append(f"Draft length: {'Auto' if k.is_auto else k.k}")
    for key, label in (("temperature", "Temperature"), ("top_k", "Top-k"), ("top_p", "Top-p"), ("min_p", "Min-p"),
                       ("seed", "Seed"), ("max_tokens", "Max tokens")):
        if key in s:
            lines.append(f"{label}: {'random' if s[key] is None else _num(s[key])}")
    prompt = s.get("system_prompt")
    if prompt:
        short = prompt if len(prompt) <= 200 else prompt[:199] + "…"
        lines.append(f"System prompt: {short}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Footer:
    """A finished reply's numbers."""

    numbers: str
    """'42.1 tok/s · 67% accepted'."""
    chip: str
    """The verdict in a word or two (stats panel's words), or ''."""
    tone: Tone
    """The chip's colour."""
    sentence: str
    """The stats panel's verdict sentence (the chip's tooltip)."""


def footer(m: Message) -> Footer:
    recorded = recorded_length(m.settings)
    auto = (recorded is not None and recorded.is_auto) if m.settings else (m.stats is not None and m.stats.auto)
    # The engine's totals, once known, give every number shown here (the rounds add only the speed
    # series, which a footer does not show): a redraw need not read the rounds back.
    rounds = [] if m.stats is not None else list(m.rounds.values())
    snap = ReplyStats.of_rounds(rounds, m.stats, auto).snapshot()
    numbers = [f"{snap.tokens_per_s:.1f} tok/s"] if snap.tokens_per_s else []
    if snap.drafted:
        numbers.append(f"{snap.acceptance_rate:.0%} accepted")
        ran = modes_label(snap.modes)  # which mode ran (lookup, model, plain rounds)
        if ran:
            numbers.append(ran)
    if snap.rounds == 0:
        chip, tone = "", Tone.NEUTRAL
    elif not snap.drafted:
        chip, tone = "plain decoding", Tone.NEUTRAL
    elif snap.estimated_speedup is None or snap.certainty in (Certainty.UNKNOWN, Certainty.FEW_ROUNDS):
        chip, tone = "", Tone.NEUTRAL
    elif snap.certainty is Certainty.LOAD_CHANGED:
        chip, tone = "load changed", Tone.NEUTRAL
    else:
        v = pace(snap.estimated_speedup)
        chip, tone = str(v), v.tone
    return Footer(" · ".join(numbers), chip, tone, str(verdict(snap)) if snap.rounds else "")


def time_label(created: float, now: float | None = None) -> str:
    """'14:05' today, '3 Mar 14:05' earlier this year, '3 Mar 2024' before."""
    if not created:
        return ""
    t, n = time.localtime(created), time.localtime(now if now is not None else time.time())
    day = f"{t.tm_mday} {time.strftime('%b', t)}"  # no %-d: it is glibc's
    if t.tm_year != n.tm_year:
        return f"{day} {t.tm_year}"
    if (t.tm_mon, t.tm_mday) != (n.tm_mon, n.tm_mday):
        return f"{day} {time.strftime('%H:%M', t)}"
    return time.strftime("%H:%M", t)
