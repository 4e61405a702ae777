"""Files given with a message: read as text (code, Markdown, plain text, PDF), refused with a reason otherwise.

The models are text-only, so a file becomes text before anything sees it: text files are decoded
(UTF-8, or UTF-16 with a byte-order mark), PDFs have their text layer extracted with pypdf. Images,
other binary files, PDFs without text or behind a password, and files too large to read are refused
with an AttachmentError that says why and what to do.

The text goes to the model in the user turn, before the question, as Markdown: the file's name on
its own line, then its text in a fenced block whose info string is the language Pygments knows the
name by. Chat templates render a message's content as given, so this is also what the template
shows the model; the app, the benchmark and the index of past chats all use `user_content`, so a
conversation reads the same everywhere (and prompt lookup can copy from the file).
"""
from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from engine.errors import AttachmentError

MAX_TEXT_BYTES = 8 * 2**20
"""A text file larger than this is refused unread: no context loaded here holds a tenth of it."""
MAX_PDF_BYTES = 64 * 2**20
"""PDFs carry images and fonts beside their text: they may be larger before their text is read."""
MAX_TEXT_CHARS = 8 * 2**20
"""Text extracted from a PDF is cut off beyond this (the context refuses it anyway, with its count)."""
_SNIFF = 8192

_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM", b"II*\x00", b"MM\x00*",
                b"\x00\x00\x01\x00", b"8BPS")
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".ico", ".heic", ".heif",
                   ".avif", ".psd", ".raw", ".cr2", ".nef"}
_OFFICE_SUFFIXES = {".docx", ".doc", ".odt", ".rtf", ".pages", ".xlsx", ".xls", ".ods", ".pptx", ".ppt", ".odp"}
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


class AttachmentKind(StrEnum):
    """How a file's text was obtained."""

    TEXT = "text"
    """A text or code file, decoded."""
    PDF = "pdf"
    """A PDF's text layer, extracted page by page."""


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file given with a message, as text."""

    name: str
    """The file's name (no folder: the model and the export need no more)."""
    size: int
    """The file's size in bytes, as it was read."""
    kind: AttachmentKind
    """Text file or PDF."""
    text: str
    """What the model reads (newlines normalised to \\n)."""


def human_size(n: int) -> str:
    """'812 bytes', '12.3 KB', '4.1 MB'."""
    if n < 1000:
        return f"{n} byte{'s' if n != 1 else ''}"
    if n < 1000 * 1000:
        return f"{n / 1000:.1f} KB"
    return f"{n / 1e6:.1f} MB"


def read_attachment(path: str | Path) -> Attachment:
    """The file at `path` as an Attachment; AttachmentError (one sentence, what to do) when it cannot be one."""
    path = Path(path)
    name = path.name or str(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise AttachmentError(f"{name} was not found: it was moved or deleted. Attach it again from where it is "
                              "now") from None
    except OSError as exc:
        raise AttachmentError(f"{name} cannot be read: {exc.strerror or exc}") from None
    if path.is_dir():
        raise AttachmentError(f"{name} is a folder: attach the files in it instead")
    suffix = path.suffix.lower()
    if suffix in _IMAGE_SUFFIXES:
        raise _image(name)
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF)
    except OSError as exc:
        raise AttachmentError(f"{name} cannot be read: {exc.strerror or exc}") from None
    if head.startswith(_IMAGE_MAGIC) or head[:4] == b"RIFF" and head[8:12] == b"WEBP" or head[4:12] in (
            b"ftypheic", b"ftypavif", b"ftypmif1"):
        raise _image(name)
    if head.startswith(b"%PDF-"):
        if st.st_size > MAX_PDF_BYTES:
            raise _too_big(name, st.st_size, MAX_PDF_BYTES)
        return Attachment(name, st.st_size, AttachmentKind.PDF, _pdf_text(path, name))
    if st.st_size > MAX_TEXT_BYTES:
        raise _too_big(name, st.st_size, MAX_TEXT_BYTES)
    if suffix in _OFFICE_SUFFIXES or head.startswith(b"PK\x03\x04"):
        what = "document in an office format" if suffix in _OFFICE_SUFFIXES else "ZIP archive"
        raise AttachmentError(f"{name} is a {what}, not text: save or export it as PDF or plain text, and attach that")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AttachmentError(f"{name} cannot be read: {exc.strerror or exc}") from None
    return Attachment(name, len(data), AttachmentKind.TEXT, _decode(data, name))


def _image(name: str) -> AttachmentError:
    return AttachmentError(f"{name} is an image: the models here read text only, so they cannot see it. Describe "
                           "it in words, or attach text, code or PDF files")


def _too_big(name: str, size: int, limit: int) -> AttachmentError:
    return AttachmentError(f"{name} is {human_size(size)}: too large to attach (at most {human_size(limit)}, and "
                           "the model's context holds far less). Attach the part you need")


def _decode(data: bytes, name: str) -> str:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return _normalise(data.decode(codec))
            except UnicodeDecodeError:
                break
    if b"\x00" in data[:_SNIFF]:
        raise AttachmentError(f"{name} is not a text file (it holds binary data): attach text, code or PDF files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AttachmentError(f"{name} is not UTF-8 text (byte {exc.start:,} is {data[exc.start]:#04x}, which UTF-8 "
                              "does not allow there): save it as UTF-8 and attach it again") from None
    if _control_share(text) > 0.1:
        raise AttachmentError(f"{name} is not a text file (it is mostly control characters): attach text, code or "
                              "PDF files")
    return _normalise(text)


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def _control_share(text: str) -> float:
    sample = text[:_SNIFF]
    return len(_CONTROL.findall(sample)) / max(1, len(sample))


def _normalise(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _pdf_text(path: Path, name: str) -> str:
    """Every page's text layer, pages separated by a blank line."""
    from pypdf import PdfReader  # imported when a PDF comes: the app starts without it

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):  # many PDFs are encrypted with no password to open
            raise AttachmentError(f"{name} is protected by a password: open it in a PDF reader, save a copy without "
                                  "the password (or as text), and attach that")
        pages, total = [], 0
        for page in reader.pages:
            text = page.extract_text() or ""
            pages.append(text)
            total += len(text)
            if total > MAX_TEXT_CHARS:
                break
    except AttachmentError:
        raise
    except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds on a damaged file; all mean the same here
        detail = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        raise AttachmentError(f"{name} could not be read as a PDF ({detail}): it may be damaged. Save it again, "
                              "or attach its text") from None
    text = _normalise("\n\n".join(p.strip("\n") for p in pages)).strip()
    if not text:
        raise AttachmentError(f"{name} has no text to read (a scanned PDF holds pictures of pages): attach a PDF "
                              "with text, or the text itself")
    return text[:MAX_TEXT_CHARS]


# -- what the model reads ---------------------------------------------------------------------------------------
def language_of(name: str) -> str:
    """The fence's info string: the language Pygments knows this file name by ('' when none)."""
    from pygments.lexers import get_lexer_for_filename
    from pygments.util import ClassNotFound

    try:
        aliases = get_lexer_for_filename(name).aliases
    except ClassNotFound:
        return ""
    return aliases[0] if aliases and aliases[0] != "text" else ""


def fenced(a: Attachment) -> str:
    """One attachment as the model reads it: its name, then its text in a fence no line of it can close."""
    longest = max((len(m) for m in re.findall(r"`+", a.text)), default=0)
    fence = "`" * max(3, longest + 1)
    lang = "" if a.kind is AttachmentKind.PDF else language_of(a.name)
    body = a.text[:-1] if a.text.endswith("\n") else a.text  # a file's last newline ends its last line, not more
    return f"{a.name}\n{fence}{lang}\n{body}\n{fence}"


def user_content(text: str, attachments: Sequence[Attachment]) -> str:
    """A user turn's content: each attached file (name and fenced text), then what the person typed."""
    if not attachments:
        return text
    files = "\n\n".join(fenced(a) for a in attachments)
    return f"{files}\n\n{text}" if text.strip() else files
