"""Drafting from past chats in the window: opt-in, what it stores and where, Forget, damaged files, restarts.

Real parts throughout: the tiny llama.cpp models, the engine thread, the index files in the data
folder. The references are worked out here: the n-gram counts of a conversation from its text
(ChatML written out below, tokenized by the model) and the reply's token ids.
"""
from __future__ import annotations

import json
import os
import sqlite3
from collections import Counter, defaultdict

import numpy as np

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QMessageBox  # noqa: E402
from app_support import PROMPT, REPLY_TIMEOUT_MS, install_tiny, open_window, send  # noqa: E402

from app.core.settings import AppSettings, load_settings  # noqa: E402
from app.history.store import database_path  # noqa: E402
from engine.drafting.history_index import (
    FORMAT,
    MAX_CONTEXT,
    TOKEN_BITS,
    VERSION,
    HistoryIndex,
    default_folder,
    index_path,
    vocab_fingerprint,
)
from engine.llama.backend import LlamaModel  # noqa: E402
from engine.llama.types import LoadSettings

#: The tiny models' chat template, written out for one question (tests/tiny_models.py CHATML).
CHATML_PROMPT = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def model_facts(path, text: str) -> tuple[str, list[int]]:
    """The model's vocabulary fingerprint, and `text` as it reads it (BOS first when it wants one)."""
    m = LlamaModel(path, LoadSettings(n_ctx=256, n_threads=1))
    try:
        tokens = m.tokenize(text, add_special=False, parse_special=True)
        facts = m.vocab_facts()
        if facts.add_bos and (not tokens or tokens[0] != facts.bos):
            tokens.insert(0, facts.bos)
        return vocab_fingerprint(m), tokens
    finally:
        m.close()


def ngram_counts(tokens: list[int]) -> dict[tuple[int, ...], Counter]:
    """For every context of 1..MAX_CONTEXT tokens, how often each next token followed it."""
    out: dict[tuple[int, ...], Counter] = defaultdict(Counter)
    for i in range(1, len(tokens)):
        for n in range(1, min(MAX_CONTEXT, i) + 1):
            out[tuple(tokens[i - n : i])][tokens[i]] += 1
    return out


def status_until(qtbot, w, check):
    """Wait for the engine thread's report on past chats to satisfy `check`; return it."""
    pc = w.controller.past_chats
    qtbot.waitUntil(lambda: pc.status is not None and check(pc.status), timeout=REPLY_TIMEOUT_MS)
    return pc.status


def counted(n: int):
    return lambda s: s.open and f" {n} repl" in s.summary


def folder():
    return default_folder()


def test_off_by_default_and_nothing_is_written(qtbot, tiny, isolated_home):
    assert AppSettings().history_drafts is False
    install_tiny(tiny, isolated_home, drafter="lookup")
    w = open_window(qtbot)
    popover = w.bar.sampling
    assert not popover.history_drafts.isChecked()
    status = status_until(qtbot, w, lambda s: True)
    assert not status.enabled and not status.open and status.summary == "Off: nothing is stored."
    reply = send(qtbot, w)
    assert reply.tokens and all(r.drafter != "history" for r in reply.rounds.values())
    w.close()  # the engine thread has ended and freed the models: anything it would save is saved
    assert not folder().exists()
    assert not any(p.name.startswith("history") for p in (isolated_home / "data").rglob("*"))


def test_a_reply_is_counted_into_the_index_file_in_the_data_folder(qtbot, tiny, isolated_home):
    installed = install_tiny(tiny, isolated_home, drafter="lookup", history_drafts=True)
    w = open_window(qtbot)
    status = status_until(qtbot, w, counted(0))
    assert status.enabled and status.drafting and status.folder == isolated_home / "data" / "history-index"
    assert "0 n-grams" in status.summary and "of 64 MB" in status.summary
    assert w.bar.sampling.history_drafts.isChecked()
    assert str(status.folder) in w.bar.sampling.history_drafts.toolTip()
    reply = send(qtbot, w)
    status = status_until(qtbot, w, counted(1))  # saved after the first reply (a small index)
    assert "in 1 chat," in status.summary

    fp, prompt = model_facts(installed["target"], CHATML_PROMPT.format(PROMPT))
    path = index_path(folder(), fp)
    assert path.is_file()
    index = HistoryIndex.open(path, fp)
    assert index.notes == [] and index.conversations == 1
    conversation = prompt + [t.token_id for t in reply.tokens]
    reference = ngram_counts(conversation)
    assert index.entries == sum(len(c) for c in reference.values())
    for context, nexts in reference.items():
        assert index.continuations(context) == dict(nexts), context
    # A run of the reply seen once proposes what followed it there.
    ids = [t.token_id for t in reply.tokens]
    unique = [i for i in range(MAX_CONTEXT, len(ids)) if len(reference[tuple(ids[i - MAX_CONTEXT : i])]) == 1]
    assert unique
    for i in unique:
        assert index.propose(ids[i - MAX_CONTEXT : i], 1).tokens == [ids[i]]
    assert f"{index.entries:,} n-grams from 1 reply in 1 chat" in w.bar.sampling.history_status.text()


def test_a_new_chat_repeating_the_first_drafts_from_it(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, drafter="lookup", history_drafts=True)
    w = open_window(qtbot)
    status_until(qtbot, w, counted(0))
    first = send(qtbot, w)
    status_until(qtbot, w, counted(1))
    assert all(r.drafter != "history" for r in first.rounds.values())  # nothing to draft from yet
    w.controller.new_conversation()
    second = send(qtbot, w)
    status_until(qtbot, w, lambda s: "from 2 replies in 2 chats" in s.summary)
    assert second.text == first.text  # greedy: drafts are only proposals
    history = [r for r in second.rounds.values() if r.drafter == "history"]
    assert history and sum(r.accepted for r in history) > 0
    with sqlite3.connect(database_path()) as db:  # as stored, read by another reader
        stored = [json.loads(d) for (d,) in db.execute("SELECT data FROM rounds WHERE message_id=? ORDER BY round",
                                                      (second.id,))]
    assert [r["drafter"] for r in stored] == [str(r.drafter) for r in second.rounds.values()]
    assert "history" in {r["drafter"] for r in stored}


def test_forget_deletes_every_file_and_drafting_starts_from_nothing(qtbot, tiny, isolated_home, monkeypatch):
    install_tiny(tiny, isolated_home, drafter="lookup", history_drafts=True)
    w = open_window(qtbot)
    status_until(qtbot, w, counted(0))
    send(qtbot, w)
    status_until(qtbot, w, counted(1))
    aside = folder() / "history-0123456789abcdef.npz.damaged"  # a file set aside earlier counts too
    aside.write_bytes(b"old")
    answers, asked = [QMessageBox.StandardButton.No], []
    monkeypatch.setattr(QMessageBox, "question", lambda _p, _t, text, *a: asked.append(text) or answers[0])
    popover = w.bar.sampling
    popover.popup_under(w.bar.sampling_button)
    qtbot.mouseClick(popover.forget, Qt.MouseButton.LeftButton)
    assert len(asked) == 1 and str(folder()) in asked[0] and "Your chats themselves stay" in asked[0]
    assert len(list(folder().iterdir())) == 2  # No: nothing deleted
    answers[0] = QMessageBox.StandardButton.Yes
    loaded = w.controller.loaded
    popover.popup_under(w.bar.sampling_button)
    qtbot.mouseClick(popover.forget, Qt.MouseButton.LeftButton)
    status = status_until(qtbot, w, counted(0))
    assert not folder().exists()
    assert status.enabled and status.drafting and "0 n-grams from 0 replies in 0 chats" in status.summary
    assert w.controller.loaded is loaded  # nothing was reloaded
    # Drafting starts again from nothing: the next reply makes a new file holding only itself.
    send(qtbot, w)
    status_until(qtbot, w, counted(1))
    assert len(list(folder().iterdir())) == 1


def test_a_damaged_index_file_gives_a_notice_and_is_kept_aside(qtbot, tiny, isolated_home):
    installed = install_tiny(tiny, isolated_home, drafter="lookup", history_drafts=True)
    fp, _ = model_facts(installed["target"], "")
    path = index_path(folder(), fp)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"PK\x03\x04 not really a zip file")
    w = open_window(qtbot)
    status = status_until(qtbot, w, counted(0))
    assert status.drafting
    text = w.notice.text()
    assert "Drafting from past chats" in text and "damaged" in text and "Traceback" not in text
    send(qtbot, w)  # replies go on, and the next save keeps the damaged file beside the new one
    status_until(qtbot, w, counted(1))
    assert path.with_name(path.name + ".damaged").read_bytes() == b"PK\x03\x04 not really a zip file"
    assert HistoryIndex.open(path, fp).conversations == 1


def test_the_toggle_works_without_a_reload_and_survives_a_restart(qtbot, tiny, isolated_home):
    install_tiny(tiny, isolated_home, drafter="lookup")
    w = open_window(qtbot)
    status_until(qtbot, w, lambda s: not s.enabled)
    loaded = w.controller.loaded
    popover = w.bar.sampling
    popover.popup_under(w.bar.sampling_button)
    qtbot.mouseClick(popover.history_drafts, Qt.MouseButton.LeftButton)
    status = status_until(qtbot, w, counted(0))
    assert status.drafting and w.controller.settings.history_drafts
    assert w.controller.loaded is loaded  # turned on without loading anything again
    popover.hide()
    send(qtbot, w)
    status_until(qtbot, w, counted(1))
    w.close()
    assert load_settings()[0].history_drafts is True

    w2 = open_window(qtbot)
    assert w2.bar.sampling.history_drafts.isChecked()
    status = status_until(qtbot, w2, counted(1))  # the saved index, opened again
    assert status.drafting
    # Off: drafting stops at once, the file stays until Forget, and the status says so.
    w2.bar.sampling.popup_under(w2.bar.sampling_button)
    qtbot.mouseClick(w2.bar.sampling.history_drafts, Qt.MouseButton.LeftButton)
    status = status_until(qtbot, w2, lambda s: not s.enabled)
    assert not status.open and status.summary.startswith("Off: ") and "kept from before (Forget deletes it)" in status.summary
    assert not status.drafting


def test_compare_leaves_past_chats_out_and_says_so(qtbot, tiny, isolated_home):
    from app.stats.compare_dialog import CompareDialog

    install_tiny(tiny, isolated_home, drafter="lookup", history_drafts=True)
    w = open_window(qtbot)
    status_until(qtbot, w, counted(0))
    send(qtbot, w)
    status_until(qtbot, w, counted(1))
    w.controller.new_conversation()
    reply = send(qtbot, w)  # drafted from the first chat
    status_until(qtbot, w, counted(2))
    assert any(r.drafter == "history" for r in reply.rounds.values())
    dlg = CompareDialog(w.controller, w.controller.messages, w)
    qtbot.addWidget(dlg)
    assert dlg.start()
    qtbot.waitUntil(lambda: dlg.complete, timeout=REPLY_TIMEOUT_MS)
    assert dlg.spec.done.text == reply.text
    kinds = {r.drafter for r in dlg.spec.message.rounds.values()}
    assert "history" not in kinds and "lookup" in kinds  # the index holds this very reply: not used
    assert "Drafting from past chats is left out" in " ".join(dlg.runs.notes)
    # The chat drafts from past chats again afterwards; Compare's two runs were not counted.
    w.controller.new_conversation()
    again = send(qtbot, w)
    assert any(r.drafter == "history" for r in again.rounds.values())
    status = status_until(qtbot, w, lambda s: " repl" in s.summary and " 2 repl" not in s.summary)
    assert "from 3 replies in 3 chats" in status.summary


def write_index_file(path, fingerprint: str, keys: np.ndarray, counts: np.ndarray, serial: int) -> None:
    """An index file as the format describes it (an .npz with a JSON header), written here by hand."""
    meta = {"format": FORMAT, "version": VERSION, "fingerprint": fingerprint, "serial": serial,
            "max_context": MAX_CONTEXT, "token_bits": TOKEN_BITS}
    path.parent.mkdir(parents=True, exist_ok=True)
    empty = np.empty(0, np.uint64)
    np.savez(path, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), keys=keys, counts=counts,
             last=np.full(len(keys), serial, np.uint32), conv_ids=empty, conv_lens=np.empty(0, np.uint32),
             conv_hashes=empty)


def test_the_cap_is_set_in_the_popover_shrinks_the_file_at_once_and_survives_a_restart(qtbot, tiny, isolated_home):
    installed = install_tiny(tiny, isolated_home, drafter="lookup", history_drafts=True)
    fp, _ = model_facts(installed["target"], "")
    path = index_path(folder(), fp)
    n = 2**20  # 16 bytes an entry: 16 MB
    keys = np.arange(n, dtype=np.uint64) * np.uint64(5) + np.uint64(3)
    counts = (np.random.default_rng(7).permutation(n) + 1).astype(np.uint32)  # 1..n, every one once
    write_index_file(path, fp, keys, counts, serial=5)
    w = open_window(qtbot)
    popover = w.bar.sampling
    status = status_until(qtbot, w, counted(5))
    assert status.summary == "1,048,576 n-grams from 5 replies in 0 chats, 16.0 MB of 64 MB"
    assert popover.history_cap.currentText() == "64 MB"
    assert popover.history_cap.accessibleName() == "Most space for past chats"
    assert "16.0 MB of 64 MB" in popover.history_cap.accessibleDescription()
    assert [popover.history_cap.itemText(i) for i in range(popover.history_cap.count())] == [
        "8 MB", "16 MB", "32 MB", "64 MB", "128 MB", "256 MB", "512 MB"]
    loaded = w.controller.loaded

    popover.popup_under(w.bar.sampling_button)
    popover.history_cap.setFocus()
    qtbot.keyClick(popover.history_cap, Qt.Key.Key_Home)  # the first choice, 8 MB
    # 8 MB hold 524,288 entries; an eviction keeps 90% of that, 471,859, the most counted.
    status = status_until(qtbot, w, lambda s: s.cap_mb == 8)
    assert status.summary == "471,859 n-grams from 5 replies in 0 chats, 7.2 MB of 8 MB"
    assert w.controller.settings.history_cap_mb == 8
    assert w.controller.loaded is loaded  # applied without loading the models again
    assert "7.2\u00a0MB of 8\u00a0MB" in popover.history_status.text()  # each size kept on one line
    assert path.stat().st_size <= 8 * 2**20  # the file shrank at once, before any reply
    kept = counts > n - 471_859
    with np.load(path) as z:
        assert np.array_equal(z["keys"], keys[kept]) and np.array_equal(z["counts"], counts[kept])
    w.close()
    assert load_settings()[0].history_cap_mb == 8

    w2 = open_window(qtbot)
    assert w2.bar.sampling.history_cap.currentText() == "8 MB"
    status = status_until(qtbot, w2, counted(5))
    assert status.summary == "471,859 n-grams from 5 replies in 0 chats, 7.2 MB of 8 MB"


def test_a_cap_from_the_settings_file_not_on_the_list_is_shown_in_order(qtbot):
    from app.models.sampling_popover import SamplingPopover

    popover = SamplingPopover()
    qtbot.addWidget(popover)
    popover.set_values(AppSettings(history_cap_mb=100))
    cap = popover.history_cap
    assert [cap.itemText(i) for i in range(cap.count())] == [
        "8 MB", "16 MB", "32 MB", "64 MB", "100 MB", "128 MB", "256 MB", "512 MB"]
    assert cap.currentText() == "100 MB" and popover.choice().history_cap_mb == 100
