"""What a person can do to one message from the chat view (links in its header and footer)."""
from __future__ import annotations

from enum import StrEnum


class MessageAction(StrEnum):
    """Emitted by ChatView.action_requested with the message's database id; the window acts on it."""

    REGENERATE = "regenerate"
    """A new alternative reply with the settings this reply was made with."""
    REGENERATE_CURRENT = "regenerate_current"
    """A new alternative reply with the model bar's current pair, k and sampling."""
    EDIT = "edit"
    """Put a message in the input to change: a question is resent, a reply's text kept (each as an alternative)."""
    CONTINUE = "continue"
    """Go on writing the last reply where it was stopped or cut at the max tokens limit (the same message)."""
    FORK = "fork"
    """A new chat holding the conversation up to this message."""
    DELETE = "delete"
    """Delete this one message."""
    PREVIOUS = "previous"
    """Show the previous alternative of this message."""
    NEXT = "next"
    """Show the next alternative of this message."""
