"""Kinds are types where they enter: a settings file, a widget, a command line. Whatever a stranger's
settings.json holds reads as typed settings (a bad value falls back to its default, never a traceback),
and the text the file holds is the text earlier versions wrote ('auto', 4, 'lookup+PATH')."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from app.core.drafter_names import drafter_label, recorded_drafter
from app.core.settings import AUTO, AppSettings, load_settings, save_settings, typed_changes
from app.core.theme import Theme
from engine.drafting.draft_choice import DraftLength, DraftSpec
from engine.frontends.options import draft_max_arg

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                    max_leaves=6)
KINDS = st.sampled_from(["auto", "lookup", "none", "dark", "light", "system", "lookup+/m/d.gguf", "/m/d.gguf", "lookup+"])
VALUE = JSON | KINDS | st.integers(-2, 20)


def check_typed(s: AppSettings) -> None:
    assert isinstance(s.theme, Theme) and isinstance(s.drafter, DraftSpec) and isinstance(s.draft_max, DraftLength)
    assert s.draft_max.is_auto or 1 <= s.draft_max.k <= 16
    assert isinstance(s.notes_seen, tuple) and len(s.notes_seen) <= 32 and all(isinstance(n, str) for n in s.notes_seen)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["theme", "drafter", "draft_max", "temperature", "seed", "top_k", "n_threads",
                                        "window_geometry", "history_drafts", "target", "notes_seen", "unknown"]),
                       VALUE | st.lists(st.text(max_size=8), max_size=40), max_size=6))
@example({"draft_max": True, "drafter": 3, "theme": ["dark"]})
@example({"notes_seen": [f"note {i}" for i in range(40)]})
@example({"notes_seen": ["a", 1]})
@example({"draft_max": "4", "drafter": "", "theme": None})
def test_any_json_in_the_settings_file_reads_as_typed_settings(tmp_path, values):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(values), encoding="utf-8")
    s, note = load_settings(path)
    assert note is None
    check_typed(s)
    save_settings(s, path)  # and what it reads writes back as itself
    assert load_settings(path) == (s, None)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["theme", "drafter", "draft_max"]), VALUE | st.builds(DraftLength.fixed, st.integers(0, 20)))
def test_a_value_from_a_widget_is_typed_or_refused_with_its_name(name, value):
    try:
        changes = typed_changes({name: value})
    except ValueError as exc:
        assert repr(name) in str(exc)
    else:
        check_typed(AppSettings(**changes))


def test_the_file_holds_the_text_earlier_versions_wrote(tmp_path):
    path = tmp_path / "settings.json"
    for drafter, draft_max in (("lookup+/m/d.gguf", 4), ("/m/d.gguf", "auto"), ("lookup", 16), ("none", 1)):
        path.write_text(json.dumps({"drafter": drafter, "draft_max": draft_max}), encoding="utf-8")
        s = load_settings(path)[0]
        assert s.drafter == DraftSpec.parse(drafter) and s.draft_max == DraftLength.parse(draft_max)
        save_settings(s, path)
        raw = json.loads(path.read_text(encoding="utf-8"))
        assert (raw["drafter"], raw["draft_max"]) == (drafter, draft_max)
    assert load_settings(path)[0].drafter == DraftSpec.NONE
    for bad in (0, 17, "4", "Auto", 2.5, None, True):
        path.write_text(json.dumps({"draft_max": bad}), encoding="utf-8")
        assert load_settings(path)[0].draft_max is AUTO  # the default, one value at a time


def test_draft_length_parses_and_writes_the_same_text():
    assert DraftLength.parse("auto") is DraftLength.AUTO and DraftLength.AUTO.is_auto
    assert DraftLength.parse(4) == DraftLength.parse("4") == DraftLength.fixed(4) and DraftLength.fixed(4).k == 4
    assert [str(DraftLength.AUTO), str(DraftLength.fixed(0))] == ["auto", "0"]
    assert (DraftLength.AUTO.label, DraftLength.fixed(3).label) == ("Auto", "k=3")
    for bad in (-1, "x", "", True, 2.0, None):
        with pytest.raises(ValueError):
            DraftLength.parse(bad)
    assert draft_max_arg("auto") is DraftLength.AUTO and draft_max_arg("0") == DraftLength.fixed(0)
    for bad in ("65", "-1", "four"):
        with pytest.raises(argparse.ArgumentTypeError):
            draft_max_arg(bad)


def test_a_drafter_spec_parses_and_writes_the_same_text():
    for text in ("none", "lookup", "/m/d.gguf", "lookup+/m/d.gguf"):
        assert DraftSpec.parse(text).text == text and DraftSpec.parse(DraftSpec.parse(text)) == DraftSpec.parse(text)
    assert DraftSpec.parse("") == DraftSpec.parse(None) == DraftSpec.NONE and not DraftSpec.NONE.drafts
    assert DraftSpec.parse("lookup+") == DraftSpec.LOOKUP
    assert DraftSpec.parse("lookup+/m/d.gguf") == DraftSpec.with_lookup("/m/d.gguf") == DraftSpec(Path("/m/d.gguf"), True)
    assert DraftSpec.with_lookup("/m/d.gguf").label == "lookup+d.gguf"


def test_a_replys_recorded_drafter_label_reads_back():
    for spec, label in ((DraftSpec.NONE, "none"), (DraftSpec.LOOKUP, "prompt lookup"),
                        (DraftSpec(Path("/m/d.gguf")), "d.gguf"), (DraftSpec.with_lookup("/m/d.gguf"), "prompt lookup + d.gguf")):
        assert drafter_label(spec) == drafter_label(spec.text) == label
        assert recorded_drafter(label).drafts == spec.drafts and recorded_drafter(label).lookup == spec.lookup
    assert not recorded_drafter("").drafts  # a reply whose drafter was not recorded


@pytest.mark.parametrize("k", [True, "3", 2.0, -1])
def test_a_draft_length_is_a_whole_number_of_tokens_from_zero(k):
    with pytest.raises(ValueError, match=f"not {k!r}"):
        DraftLength(k)


@pytest.mark.parametrize("text", ["three", "4.5", ""])
def test_a_draft_length_read_from_text_says_what_it_was_given(text):
    with pytest.raises(ValueError, match=f"not {text!r}"):
        DraftLength.parse(text)
    with pytest.raises(ValueError, match="not None"):
        DraftLength.parse(None)
    with pytest.raises(ValueError, match="not 2.5"):
        DraftLength.parse(2.5)
