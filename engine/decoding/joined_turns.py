"""Questions in a row are sent as one turn (many chat templates refuse turns that do not alternate); the turn
says how much of it is earlier messages, so that the context rule can drop those as history
(engine.decoding.session.Session.render) rather than call the newest question too long."""
from __future__ import annotations

EARLIER_MESSAGES = "earlier_messages"
"""A user turn's key: how many earlier messages were joined into it (questions in a row are sent as one turn)."""
EARLIER_CHARS = "earlier_chars"
"""A user turn's key: how many of its first characters are those earlier messages (and the gap after them)."""


def earlier_part(turn: dict) -> tuple[int, int] | None:
    """(messages, characters) of earlier messages joined into this turn, taken out of it; None when none."""
    count, chars = turn.pop(EARLIER_MESSAGES, None), turn.pop(EARLIER_CHARS, None)
    try:
        count, chars = int(count), int(chars)
    except (TypeError, ValueError):
        return None
    return (count, chars) if count > 0 and 0 < chars < len(turn.get("content", "")) else None


def plain_turn(turn: dict) -> dict:
    """The turn as the chat template is given it (without the keys that say what was joined into it)."""
    if EARLIER_MESSAGES not in turn and EARLIER_CHARS not in turn:
        return dict(turn)
    return {k: v for k, v in turn.items() if k not in (EARLIER_MESSAGES, EARLIER_CHARS)}
