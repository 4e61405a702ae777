"""An exception in a Qt slot or a worker callback reaches the window as a notice, not only the log.

PySide6 hands an exception raised in a slot to `sys.excepthook` and carries on; left alone that
prints a traceback nobody sees while the window looks as if nothing happened (a theme change once
stopped every send this way). The hook keeps the traceback on stderr for a bug report and tells
the person what happened and what to do.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType

from app.core.errors import Level, Notice


def notice_for(exc: BaseException) -> Notice:
    what = f"{type(exc).__name__}: {str(exc).strip()}".rstrip(": ")
    return Notice(f"Something went wrong inside Draftlight ({what}). Nothing you typed was lost: try again, and "
                  "if it happens again, restart the app (the details are in its log).", Level.ERROR)


def install(show: Callable[[Notice], None]) -> Callable[..., None]:
    """Route uncaught exceptions to `show` (after the previous hook); returns the previous hook."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        previous(kind, exc, tb)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            return
        try:
            show(notice_for(exc))
        except Exception:  # the window is half gone (closing): stderr has it already
            pass

    sys.excepthook = hook
    return previous
