"""Files given with a message, in the engine: what is read, what is refused and why, what the model reads,
and that prompt lookup drafts from an attached file and Continue goes on from the cache it left.

Real files in tmp_path (a PDF written out by hand, encrypted by pypdf), the tiny llama.cpp models. The
expected texts are written here.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from attachment_files import write_encrypted_pdf, write_text_pdf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.attachments import (MAX_TEXT_BYTES, Attachment, AttachmentKind, fenced, human_size, read_attachment,
                                user_content)
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent
from engine.decoding.session import GenerationSettings, Session
from engine.errors import AttachmentError, ContextFullError


def refused(path: Path) -> str:
    with pytest.raises(AttachmentError) as e:
        read_attachment(path)
    return str(e.value)


# -- reading ------------------------------------------------------------------------------------------------
def test_text_and_code_files_are_read_as_text(tmp_path):
    code = tmp_path / "totals.py"
    code.write_bytes(b"def total(xs):\r\n    return sum(xs)\r\n")
    a = read_attachment(code)
    assert a == Attachment("totals.py", 36, AttachmentKind.TEXT, "def total(xs):\n    return sum(xs)\n")
    utf16 = tmp_path / "notes.txt"
    utf16.write_bytes("\ufeffcafé ☕\n".encode("utf-16-le"))
    assert read_attachment(utf16).text == "café ☕\n"
    bom = tmp_path / "bom.md"
    bom.write_bytes(b"\xef\xbb\xbf# Title\n")
    assert read_attachment(bom).text == "# Title\n"
    svg = tmp_path / "icon.svg"  # an image format that is text: the model can read it
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg"/>')
    assert read_attachment(svg).text.startswith("<svg")


def test_images_binary_files_and_strangers_are_refused_with_a_reason(tmp_path):
    png = tmp_path / "shot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    assert "shot.png is an image: the models here read text only" in refused(png)
    disguised = tmp_path / "photo.txt"  # the bytes say what it is, not the name
    disguised.write_bytes(b"\xff\xd8\xff\xe0" + bytes(64))
    assert "photo.txt is an image" in refused(disguised)
    webp = tmp_path / "pic.bin"
    webp.write_bytes(b"RIFF\x10\x00\x00\x00WEBPVP8 " + bytes(32))
    assert "pic.bin is an image" in refused(webp)
    binary = tmp_path / "app.dat"
    binary.write_bytes(bytes(range(256)) * 4)
    assert "app.dat is not a text file (it holds binary data)" in refused(binary)
    latin = tmp_path / "old.txt"
    latin.write_bytes("naïve".encode("latin-1"))
    assert refused(latin) == ("old.txt is not UTF-8 text (byte 2 is 0xef, which UTF-8 does not allow there): save it "
                              "as UTF-8 and attach it again")
    docx = tmp_path / "letter.docx"
    docx.write_bytes(b"PK\x03\x04" + bytes(64))
    assert "letter.docx is a document in an office format, not text: save or export it as PDF" in refused(docx)
    (tmp_path / "folder").mkdir()
    assert "folder is a folder" in refused(tmp_path / "folder")
    assert refused(tmp_path / "gone.txt") == ("gone.txt was not found: it was moved or deleted. Attach it again from "
                                              "where it is now")


def test_a_huge_file_is_refused_by_its_size_without_being_read(tmp_path):
    huge = tmp_path / "dump.log"
    with open(huge, "wb") as fh:  # sparse: 2 GB on paper, nothing on the disk
        fh.truncate(2 * 2**30)
    assert refused(huge) == ("dump.log is 2147.5 MB: too large to attach (at most 8.4 MB, and the model's context holds "
                             "far less). Attach the part you need")
    assert MAX_TEXT_BYTES == 8 * 2**20 and human_size(MAX_TEXT_BYTES) == "8.4 MB" and human_size(999) == "999 bytes"


def test_pdfs_give_their_text_layer_and_protected_or_damaged_ones_are_refused(tmp_path):
    pdf = write_text_pdf(tmp_path / "report.pdf", [["Quarterly report (draft)", "Revenue rose 12%"],
                                                   ["Page two: costs fell"]])
    a = read_attachment(pdf)
    assert a.kind is AttachmentKind.PDF and a.size == pdf.stat().st_size
    assert a.text == "Quarterly report (draft)\nRevenue rose 12%\n\nPage two: costs fell"
    # Encrypted with an empty password to open (permissions only): every reader opens it, so do we.
    opened = write_encrypted_pdf(tmp_path / "locked-lightly.pdf", pdf, "")
    assert read_attachment(opened).text == a.text
    locked = write_encrypted_pdf(tmp_path / "locked.pdf", pdf, "secret")
    assert refused(locked).startswith("locked.pdf is protected by a password")
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(pdf.read_bytes()[:200])
    assert refused(broken).startswith("broken.pdf could not be read as a PDF (")
    assert refused(broken).endswith("it may be damaged. Save it again, or attach its text")
    blank = write_text_pdf(tmp_path / "scan.pdf", [[]])
    assert refused(blank).startswith("scan.pdf has no text to read (a scanned PDF holds pictures of pages)")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=2048), name=st.sampled_from(["x.txt", "x.pdf", "x.py", "x", "x.png"]))
def test_any_bytes_are_read_as_text_or_refused_with_a_reason(tmp_path, data, name):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        a = read_attachment(path)
    except AttachmentError as exc:
        assert str(exc).startswith(name + " ") and len(str(exc)) < 300
    else:
        assert isinstance(a.text, str) and "\r" not in a.text and a.size == len(data)


# -- what the model reads ------------------------------------------------------------------------------------
def test_the_model_reads_each_file_by_name_in_a_fence_before_the_question():
    code = Attachment("totals.py", 38, AttachmentKind.TEXT, "def total(xs):\n    return sum(xs)\n")
    notes = Attachment("notes.md", 30, AttachmentKind.TEXT, "Use ```sum``` here:\n```\nok\n```")
    pdf = Attachment("report.pdf", 900, AttachmentKind.PDF, "Revenue rose 12%")
    assert user_content("What does it do?", [code, notes, pdf]) == (
        "totals.py\n```python\ndef total(xs):\n    return sum(xs)\n```\n\n"
        "notes.md\n````markdown\nUse ```sum``` here:\n```\nok\n```\n````\n\n"
        "report.pdf\n```\nRevenue rose 12%\n```\n\n"
        "What does it do?")
    assert user_content("hi", []) == "hi"
    assert fenced(Attachment("a.txt", 1, AttachmentKind.TEXT, "x")) == "a.txt\n```\nx\n```"  # no language for text
    assert user_content("  ", [pdf]) == "report.pdf\n```\nRevenue rose 12%\n```"


# -- the engine with a file in the prompt -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lookup_session(tiny):
    s = Session(tiny["target"], "lookup", calibrate=False)
    yield s
    s.close()


def test_prompt_lookup_drafts_tokens_copied_from_an_attached_file(lookup_session):
    s = lookup_session
    question = "the model is fast"
    # The file: what the model says to the question without it (its phrases come back with it attached).
    s.reset_state()
    doc = list(s.chat([{"role": "user", "content": question}], GenerationSettings(draft_max=0, max_tokens=40)))[-1].text
    a = Attachment("notes.txt", len(doc), AttachmentKind.TEXT, doc)
    s.reset_state()
    events = list(s.chat([{"role": "user", "content": user_content(question, [a])}],
                         GenerationSettings(draft_max=4, max_tokens=40)))
    # Text the model saw outside the file: the template around the question (written out: tests/tiny_models.py).
    outside = f"<|im_start|>user\nnotes.txt\n```\n\n```\n\n{question}<|im_end|>\n<|im_start|>assistant\n"
    reply_so_far, copied = "", []
    for e in events:
        if isinstance(e, RoundEvent) and e.drafted:
            drafted = "".join(e.drafted_text)
            if drafted in doc and drafted not in outside and drafted not in reply_so_far:
                copied.append((drafted, e.accepted))
        elif isinstance(e, TokenEvent):
            reply_so_far += e.text
    assert copied, "no draft came from the attached file"
    assert any(len(d.split()) >= 2 for d, _ in copied)  # a run of words, not a lucky letter
    assert sum(n for _, n in copied) >= 1  # and the target kept some of it


def test_continue_goes_on_from_the_cache_and_equals_one_longer_reply(tiny):
    s = Session(tiny["target"], str(tiny["drafter"]), calibrate=False)
    try:
        msgs = [{"role": "user", "content": "the model is fast"}]
        whole = list(s.chat(msgs, GenerationSettings(draft_max=4, max_tokens=30)))
        s.reset_state()
        first = list(s.chat(msgs, GenerationSettings(draft_max=4, max_tokens=12)))
        assert first[-1].finish_reason is FinishReason.LENGTH
        ids = [e.token_id for e in first if isinstance(e, TokenEvent)]
        prefix = s.reply_tokens(first[-1].text, ids)
        assert prefix == ids  # its own tokens spell its text: they are what the cache holds
        rest = list(s.chat(msgs, GenerationSettings(draft_max=4, max_tokens=18), reply_prefix=prefix))
        done = rest[-1]
        assert isinstance(done, DoneEvent)
        # Only the last token of the prompt (the reply so far) is read again; the rest was in the cache.
        assert done.stats.prompt_tokens_reused == done.stats.prompt_tokens - 1
        assert ids + [e.token_id for e in rest if isinstance(e, TokenEvent)] == \
            [e.token_id for e in whole if isinstance(e, TokenEvent)]  # greedy: as if it never stopped
        assert first[-1].text + done.text == whole[-1].text
        # Text that its ids do not spell (another model's reply, an edit) is tokenized afresh.
        assert s.reply_tokens("the model", [5, 6]) == s.target.tokenize("the model", add_special=False)
    finally:
        s.close()


def test_a_request_too_long_says_how_many_tokens_it_needs(lookup_session):
    s = lookup_session
    with pytest.raises(ContextFullError) as e:
        s.render([{"role": "user", "content": "the model is fast " * 1500}])
    assert e.value.holds == s.target.n_ctx and e.value.needed > s.target.n_ctx
    assert e.value.needed == len(s.target.tokenize(
        "<|im_start|>user\n" + "the model is fast " * 1500 + "<|im_end|>\n<|im_start|>assistant\n",
        add_special=False, parse_special=True)) + 1  # and BOS


# -- the benchmark's prompt files -----------------------------------------------------------------------------------
def test_benchmark_prompts_may_attach_files_read_as_the_app_gives_them(tmp_path):
    import json

    from engine.errors import EngineError
    from engine.frontends.bench import load_prompts

    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.py").write_text("x = 1\n")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "one", "category": "attached file edit", "messages": [
        {"role": "user", "content": "Rename x.", "attachments": ["files/a.py"]},
        {"role": "assistant", "content": "y = 1"},
        {"role": "user", "content": "Thanks. Now z."}]}) + "\n")
    (p,) = load_prompts(prompts)
    assert p.messages == [{"role": "user", "content": "a.py\n```python\nx = 1\n```\n\nRename x."},
                          {"role": "assistant", "content": "y = 1"}, {"role": "user", "content": "Thanks. Now z."}]
    prompts.write_text(json.dumps({"category": "c", "messages": [
        {"role": "user", "content": "q", "attachments": ["files/gone.txt"]}]}) + "\n")
    with pytest.raises(EngineError, match=r"p.jsonl:1: gone.txt was not found"):
        load_prompts(prompts)


def test_the_benchmark_has_multi_turn_chats_about_attached_files_of_a_few_hundred_lines():
    from engine.frontends.bench import load_prompts
    from engine.paths import resources_dir

    bench = resources_dir() / "bench"
    chats = [c for c in load_prompts(bench / "chats.jsonl") if c.category.startswith("attached")]
    assert sorted({c.category for c in chats}) == ["attached document QA", "attached file edit"]
    assert all(len(c.messages) == 3 for c in chats) and len(chats) == 4
    files = sorted((bench / "attachments").iterdir())
    assert [f.name for f in files] == ["backup_runbook.md", "incident_review.txt", "inventory.py", "scheduler.js"]
    assert all(len(f.read_text().splitlines()) >= 130 for f in files)
    for c in chats:  # each file is in its chat's first question, fenced, as the app sends it
        first = c.messages[0]["content"]
        name = first.split("\n", 1)[0]
        assert (bench / "attachments" / name).read_text().rstrip("\n") in first
    singles = [p for p in load_prompts(bench / "prompts.jsonl") if p.category.startswith("attached")]
    assert sorted(p.category for p in singles) == ["attached_document_qa", "attached_file_edit"]
