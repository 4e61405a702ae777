"""The app's own links in the chat (a message's actions, Copy) on a channel a reply cannot write.

A reply is written by a model and may hold any link, `[Details](action:delete:41)` included. The
app's links use a URL scheme made fresh for each run (a random name no reply can know), so a link
in a reply is always content: the view opens it only as http, https or mailto, and only after the
person has seen where it goes.
"""
from __future__ import annotations

import secrets
from enum import StrEnum

SCHEME = "dl" + secrets.token_hex(8)
"""This run's scheme for the app's own links (letters and digits: a valid URL scheme)."""
EXTERNAL = ("http", "https", "mailto")
"""The only schemes a link in a message may open, after asking."""


class LinkKind(StrEnum):
    ACTION = "action"
    """A MessageAction on a message: 'action:<name>:<id>'."""
    COPY = "copy"
    """Copy a message's text: 'copy:<id>'."""
    COPY_CODE = "copy-code"
    """Copy a message's n-th code block: 'copy-code:<id>:<n>'."""
    THINKING = "thinking"
    """Show or hide a reply's thinking: 'thinking:<id>'."""


def href(kind: LinkKind, *parts: object) -> str:
    return ":".join([SCHEME, kind.value, *(str(p) for p in parts)])


def parse(url: str) -> tuple[LinkKind, list[str]] | None:
    """(kind, parts) of one of this run's app links, or None for anything else (a reply's link)."""
    scheme, _, rest = url.partition(":")
    if scheme.lower() != SCHEME:
        return None
    kind, _, tail = rest.partition(":")
    try:
        return LinkKind(kind), tail.split(":") if tail else []
    except ValueError:
        return None
