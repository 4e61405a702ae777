"""The real Qwen2.5-Coder pair (1.5B target, 0.5B drafter): run when installed, skipped with a reason when not."""
from __future__ import annotations

import numpy as np
import pytest

from engine.drafting.compat import incompatibilities, vocab_of_file, vocab_of_model
from engine.decoding.events import DoneEvent, RoundEvent, TokenEvent, TokenSource
from engine.gguf_check import validate_gguf
from engine.llama.types import LoadSettings, Logits
from engine.decoding.session import GenerationSettings, Session

PROMPT = "Write a Python function that returns the square of a number."


@pytest.fixture(scope="module")
def real(real_pair):
    target, draft = real_pair
    s = Session(target, str(draft), target_load=LoadSettings(n_ctx=1024))
    s.draft_path = draft
    yield s
    s.close()


def tokens(events):
    return [e.token_id for e in events if isinstance(e, TokenEvent)]


def test_pair_is_compatible_from_files_and_from_loaded_models(real, real_pair):
    target, draft = real_pair
    assert incompatibilities(vocab_of_file(validate_gguf(target)), vocab_of_file(validate_gguf(draft))) == []
    assert incompatibilities(vocab_of_model(real.target), vocab_of_model(real.draft_model)) == []


def test_greedy_speculative_equals_plain_on_the_real_pair(real):
    msgs = [{"role": "user", "content": PROMPT}]
    real.set_drafter(None)
    plain = list(real.chat(msgs, GenerationSettings(draft_max=0, max_tokens=40)))
    real.set_drafter(str(real.draft_path))
    spec = list(real.chat(msgs, GenerationSettings(draft_max=4, max_tokens=40)))
    want, got = tokens(plain), tokens(spec)
    if got != want:  # allowed only at a numerical tie between the two candidates
        i = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        prompt = real.render(msgs).tokens
        real.target.clear()
        row = np.array(real.target.decode(prompt + want[:i], Logits.LAST)[0], dtype=np.float64)
        real.target.clear()
        assert abs(row[got[i]] - row[want[i]]) < 1e-2, f"diverged at token {i} without a tie"
    st = spec[-1].stats
    assert st.drafted > 0 and st.acceptance_rate > 0.5, st
    sources = {e.source for e in spec if isinstance(e, TokenEvent)}
    assert TokenSource.ACCEPTED in sources
    print(f"\nreal pair, greedy k=4: acceptance {st.acceptance_rate:.2f}, {st.tokens_per_s:.2f} tok/s; "
          f"plain {plain[-1].stats.tokens_per_s:.2f} tok/s")


def test_lookup_copies_code_from_the_prompt(real):
    real.set_drafter("lookup")
    code = "def add(a, b):\n    total = a + b\n    return total\n\n\ndef sub(a, b):\n    diff = a - b\n    return diff\n"
    msgs = [{"role": "user", "content": f"Rename `total` to `result`. Change nothing else; return the full code.\n\n```python\n{code}```"}]
    # A fixed k: this is about what lookup proposes; whether it pays here is Auto's call (tests/engine/drafting/test_replay.py).
    events = list(real.chat(msgs, GenerationSettings(draft_max=8, max_tokens=60)))
    done = events[-1]
    assert isinstance(done, DoneEvent)
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert sum(r.accepted for r in rounds if r.drafter == "lookup") >= 10, done.stats
    assert "def sub(a, b)" in done.text
