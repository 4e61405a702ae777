"""A message's header and footer in the chat document: who and how, then speed, verdict, time and actions.

Header: 'You', or 'target ← drafter · k=4 · T=0.7, top-p 0.95 …' (the settings the reply was made with,
all of them in its tooltip), and '‹ 2 / 3 ›' among alternatives. A finished reply ends with its note
(why it stopped) on its own line, then a footer: tokens/s, acceptance, the verdict as a chip, the time
and the action links. Links are this run's app links (app.chat.app_links: a scheme no reply can
write): 'action:<MessageAction>:<id>' (the view emits them) and 'copy:<id>' (the view copies)."""
from __future__ import annotations

from PySide6.QtGui import QTextBlockFormat, QTextCharFormat

from engine.attachments import Attachment, AttachmentKind, human_size
from engine.decoding.events import FinishReason

from app.chat.actions import MessageAction
from app.chat.app_links import LinkKind, href as app_href
from app.chat.message_labels import footer, pair_label, settings_label, settings_tip, time_label
from app.core.drafter_names import recorded_drafter
from app.chat.reply_document import ReplyWriter
from app.history.chat_import import PROVENANCE, UNKNOWN
from app.history.records import Message, Role
from app.history.reply_stats import Tone

COPY = "copy"
"""The copy link's name (handled by the view, not a MessageAction)."""
FINISH_NOTES = {
    FinishReason.CANCELLED: "stopped",
    FinishReason.LENGTH: "stopped at the max tokens limit; raise it under Sampling",
    FinishReason.CONTEXT_FULL: "the context is full",
}
_LINK_TIPS = {
    COPY: "Copy this message's text",
    MessageAction.REGENERATE: "A new reply with the settings this one was made with (kept as an alternative)",
    MessageAction.REGENERATE_CURRENT: "A new reply with the pair, k and sampling chosen now (kept as an alternative)",
    MessageAction.EDIT: "Change this message and send it again (the old one is kept as an alternative)",
    MessageAction.DELETE: "Delete this message",
    MessageAction.CONTINUE: "Go on writing this reply from where it stopped (the same reply grows)",
    MessageAction.FORK: "Start a new chat with the conversation up to here (this chat stays as it is)",
}
_REPLY_EDIT_TIP = "Change this reply's text (the reply as written is kept as an alternative)"
_USER_LINKS = (("Copy", COPY), ("Edit", MessageAction.EDIT), ("Fork", MessageAction.FORK),
               ("Delete", MessageAction.DELETE))
#: A question left without a reply (the reply failed to start, or the app stopped first): answer it.
_UNANSWERED_LINKS = (("Retry", MessageAction.REGENERATE), *_USER_LINKS)
_RETRY_TIP = "This question has no reply: answer it now, with the pair, k and sampling chosen now"
_REPLY_LINKS = (("Copy", COPY), ("Regenerate", MessageAction.REGENERATE),
                ("Regenerate with current settings", MessageAction.REGENERATE_CURRENT), ("Edit", MessageAction.EDIT),
                ("Fork", MessageAction.FORK), ("Delete", MessageAction.DELETE))
#: The last reply, stopped or cut at the max tokens limit: it can go on.
_CONTINUE_LINKS = (_REPLY_LINKS[0], ("Continue", MessageAction.CONTINUE), *_REPLY_LINKS[1:])
_SEP = "  ·  "
UNKNOWN_WORDS = "imported: which model wrote each token is unknown"
UNKNOWN_TIP = ("The export this chat came from held tokens that do not spell this reply's text (edited by hand?): the "
               "text is kept, its tokens and statistics were set aside")


def write_header(w: ReplyWriter, m: Message, actions: bool, unanswered: bool = False) -> None:
    """The header block (a user message's carries its time and links too: it has no footer).
    `unanswered`: a question last on the path with no reply, offered Retry."""
    f = w.formats
    bf = QTextBlockFormat()
    bf.setTopMargin(16)
    bf.setBottomMargin(4)
    w.start_block(bf)
    if m.role == Role.USER:
        w.insert("You", f.header)
    elif m.edited:
        w.insert("Edited by you", _with_tip(f.header, f"Edited from a reply of {pair_label(m)}" if m.target else ""))
    else:
        tip = settings_tip(m) if (m.settings or m.target) else ""
        w.insert(pair_label(m) or "Draftlight", _with_tip(f.header, tip))
        words = settings_label(m.settings, drafted=recorded_drafter(m.drafter).drafts)
        if words:
            w.insert(_SEP + words, _with_tip(f.small, tip))
        if m.settings.get(PROVENANCE) == UNKNOWN:
            w.insert(_SEP + UNKNOWN_WORDS, _with_tip(f.small, UNKNOWN_TIP))
    if m.variants > 1:
        _write_alternatives(w, m, actions)
    if m.role == Role.USER:
        when = time_label(m.created)
        if when:
            w.insert(_SEP + when, f.small)
        if actions:
            _write_links(w, m, _UNANSWERED_LINKS if unanswered else _USER_LINKS, unanswered)


def write_attachments(w: ReplyWriter, m: Message) -> None:
    """A question's attached files, one line: 'Attached', then the name and size of each (its first lines
    in the tooltip)."""
    if not m.attachments:
        return
    f = w.formats
    bf = QTextBlockFormat()
    bf.setBottomMargin(2)
    w.start_block(bf)
    w.insert("Attached  ", f.small)
    for i, a in enumerate(m.attachments):
        if i:
            w.insert("  ", f.small)
        w.insert(f" {a.name} · {human_size(a.size)} ", _with_tip(f.chip(Tone.NEUTRAL, ""), _preview(a)))


def _preview(a: Attachment) -> str:
    lines = a.text.splitlines()
    head = "\n".join(line[:100] for line in lines[:12])
    more = f"\n… {len(lines) - 12:,} more lines" if len(lines) > 12 else ""
    kind = "PDF, " if a.kind is AttachmentKind.PDF else ""
    return f"{a.name} ({kind}{human_size(a.size)}, {len(lines):,} lines)\n\n{head}{more}"


def write_thinking_toggle(w: ReplyWriter, m: Message, label: str, expanded: bool) -> None:
    """The line that stands for a reply's thinking; a link (click, or Tab to it and Enter) shows or hides it."""
    bf = QTextBlockFormat()
    bf.setTopMargin(2)
    bf.setBottomMargin(6)
    w.start_block(bf)
    tip = "Hide the model's thinking" if expanded else "Show the model's thinking (its tokens are marked like the answer's)"
    w.insert(label, w.formats.link(app_href(LinkKind.THINKING, m.id), tip, 0.92))


def write_end(w: ReplyWriter, m: Message, actions: bool, last: bool = False) -> None:
    """A reply's note (why it stopped, or what failed) on its own line, then its footer (`last`: the last
    message of the path, offered Continue when it stopped early)."""
    if m.role == Role.USER:
        return
    f = w.formats
    note = m.error or (FINISH_NOTES.get(m.finish_reason, "") if m.finish_reason else "")
    if note:
        bf = QTextBlockFormat()
        bf.setTopMargin(2)
        w.start_block(bf)
        w.insert(f"({note})", f.note)
    bf = QTextBlockFormat()
    bf.setTopMargin(4)
    w.start_block(bf)
    parts = []
    if m.finish_reason is not None or m.stats is not None:
        ft = footer(m)
        if ft.numbers:
            parts.append((ft.numbers, f.small))
        if ft.chip:
            parts.append((f" {ft.chip} ", f.chip(ft.tone, ft.sentence)))
    when = time_label(m.created)
    if when:
        parts.append((when, f.small))
    for i, (text, fmt) in enumerate(parts):
        if i:
            w.insert(_SEP, f.small)
        w.insert(text, fmt)
    if actions:
        _write_links(w, m, _CONTINUE_LINKS if last and m.continuable else _REPLY_LINKS)


def _write_alternatives(w: ReplyWriter, m: Message, actions: bool) -> None:
    f = w.formats
    w.insert("   ", f.small)
    if actions and m.variant > 1:
        w.insert("‹", f.link(app_href(LinkKind.ACTION, MessageAction.PREVIOUS.value, m.id), "Previous alternative", 1.0))
    else:
        w.insert("‹", f.muted)
    w.insert(f" {m.variant} / {m.variants} ", f.small)
    if actions and m.variant < m.variants:
        w.insert("›", f.link(app_href(LinkKind.ACTION, MessageAction.NEXT.value, m.id), "Next alternative", 1.0))
    else:
        w.insert("›", f.muted)


def _write_links(w: ReplyWriter, m: Message, links, unanswered: bool = False) -> None:
    f = w.formats
    w.insert("     ", f.small)
    for i, (label, name) in enumerate(links):
        if i:
            w.insert(_SEP, f.small)
        href = app_href(LinkKind.COPY, m.id) if name == COPY else app_href(LinkKind.ACTION, MessageAction(name).value, m.id)
        tip = (_RETRY_TIP if unanswered and name == MessageAction.REGENERATE
               else _REPLY_EDIT_TIP if name == MessageAction.EDIT and m.role == Role.ASSISTANT
               else _LINK_TIPS.get(name, ""))
        w.insert(label, f.link(href, tip))


def _with_tip(fmt: QTextCharFormat, tip: str) -> QTextCharFormat:
    if not tip:
        return fmt
    f = QTextCharFormat(fmt)
    f.setToolTip(tip)
    return f
