"""Shared by the chat view's tests: a recorded reply (pieces, sources, rounds), messages, a view, and reading it back."""
from __future__ import annotations

from __future__ import annotations
from PySide6.QtCore import QPoint, Qt  # noqa: E402
from PySide6.QtGui import QTextCursor  # noqa: E402
from app.chat.chat_pane import ChatPane  # noqa: E402
from app.chat.chat_view import ChatView, ViewOptions  # noqa: E402
from app.history.records import Message, Role  # noqa: E402
from engine.decoding.events import FinishReason, RoundEvent, Stats, TokenEvent, TokenSource  # noqa: E402


PIECES = [
    "Here", " is", " **", "the", "**", " code", ":\n\n",                          # 0-6
    "```", "python", "\n", "def", " add", "(a", ", b", "):", "\n",                 # 7-15
    "   ", " return", " a", " +", " b", "\n```", "\n\n",                          # 16-22
    "-", " one", "\n-", " two", "\n\n",                                            # 23-27
    "|", " x", " |", " y", " |\n", "|---|---|\n", "|", " 1", " |", " 2", " |\n",   # 28-38
]
TEXT = "".join(PIECES)
#: What the reader sees, piece by piece, and the token each piece comes from.
SHOWN = [("Here", 0), (" is", 1), (" ", 2), ("the", 3), (" code", 5), (":", 6),
         ("def", 10), (" add", 11), ("(a", 12), (", b", 13), ("):", 14),
         ("   ", 16), (" return", 17), (" a", 18), (" +", 19), (" b", 20),
         ("one", 24), ("two", 26), ("x", 29), ("y", 31), ("1", 35), ("2", 37)]
CODE = "def add(a, b):\n    return a + b\n"
SOURCES = [TokenSource.ACCEPTED, TokenSource.ACCEPTED, TokenSource.CORRECTION, TokenSource.BONUS]
SETTINGS = {"draft_max": 4, "temperature": 0.7, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "system_prompt": "Be brief."}
#: A fixed instant for every message: two renders a minute apart must still read the same.
CREATED = 1_796_000_000.0


def source_of(i: int) -> TokenSource:
    return SOURCES[i % 4]


def tokens_of(pieces: list[str], sources=source_of) -> list[TokenEvent]:
    return [TokenEvent(p, 1000 + i, sources(i), i // 4 + 1, 0.9, 0.7, i) for i, p in enumerate(pieces)]


def rounds_for(n_tokens: int, rejected: str = "no\n") -> dict[int, RoundEvent]:
    """Each round of four tokens drafted three, kept two, and rejected `rejected` (shown before the correction)."""
    return {r: RoundEvent(r, 4, (1, 2, 3), ("a", "b", "c"), 2, (3,), (rejected,), 4, 0.01, 0.03, "model", 20.0, 1.3)
            for r in range(1, n_tokens // 4 + 2)}


def stats(tokens: int) -> Stats:
    return Stats(tokens=tokens, rounds=tokens // 4, drafted=30, accepted=20, acceptance_rate=2 / 3,
                 mean_accepted_per_round=2.0, tokens_per_round=4.0, acceptance_by_position=(0.9, 0.7),
                 target_passes=10, drafter_passes=30, prompt_tokens=12, prompt_tokens_reused=0, ttft_s=0.1,
                 tokens_per_s=42.5, itl_p50_s=0.02, itl_p95_s=0.05, wall_s=1.0, prefill_s=0.1, draft_s=0.2, verify_s=0.6, python_s=0.05,
                 estimated_plain_tokens_per_s=30.0, estimated_speedup=1.42, draft_mode="fixed")


def reply(pieces=PIECES, mid: int = 2, finish=FinishReason.CANCELLED, **kw) -> Message:
    toks = tokens_of(pieces)
    fields = dict(target="qwen-1.5b.gguf", drafter="qwen-0.5b.gguf", tokens=toks, rounds=rounds_for(len(toks)),
                  finish_reason=finish, stats=stats(len(toks)) if finish else None, created=CREATED,
                  settings=dict(SETTINGS))
    fields.update(kw)
    return Message(mid, Role.ASSISTANT, "".join(pieces) if finish else "", **fields)


def user(mid: int = 1, text: str = "show me *add*") -> Message:
    return Message(mid, Role.USER, text, created=CREATED)


def make_view(qtbot, options: ViewOptions | None = None, cls=ChatView):
    v = cls()
    qtbot.addWidget(v)
    v.resize(760, 900)
    v.show()
    qtbot.waitExposed(v)
    v.activateWindow()
    qtbot.waitUntil(v.isActiveWindow)
    view = v.view if cls is ChatPane else v
    if options is not None:
        view.set_options(options)
    return v


def merged(view: ChatView) -> list[tuple[str, int]]:
    """Shown text per token (neighbouring pieces of one token joined)."""
    out: list[tuple[str, int, int]] = []
    for f in view.token_fragments():
        if out and out[-1][1] == f.index and out[-1][2] == f.position:
            out[-1] = (out[-1][0] + f.text, f.index, f.position + len(f.text))
        else:
            out.append((f.text, f.index, f.position + len(f.text)))
    return [(t, i) for t, i, _ in out]


def block_texts(view: ChatView) -> list[str]:
    out, b = [], view.document().begin()
    while b.isValid():
        out.append(b.text())
        b = b.next()
    return out


def anchor_position(view: ChatView, href: str) -> int:
    b = view.document().begin()
    while b.isValid():
        it = b.begin()
        while not it.atEnd():
            frag = it.fragment()
            if frag.charFormat().anchorHref() == href:
                return frag.position()
            it += 1
        b = b.next()
    raise AssertionError(f"no link {href}")


def click_link(qtbot, view: ChatView, href: str) -> None:
    """A real mouse click on the link's first character."""
    cur = QTextCursor(view.document())
    cur.setPosition(anchor_position(view, href))
    view.setTextCursor(cur)
    view.ensureCursorVisible()
    rect = view.cursorRect(cur)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(rect.left() + 3, rect.center().y()))


# -- Markdown with provenance ------------------------------------------------------------------------------
