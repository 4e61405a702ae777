"""Speculative sampling follows the target's distribution: statistical tests of the whole engine.

Reference. For every prefix the engine's replies reach, the exact next-token distribution is
the target's own logits row for that prefix (decoded alone, no drafter) through the sampling
chain written out plainly in float64 (tests/llama_oracle.py), and that is checked against
llama.cpp's own sampler chain on the same row for each prefix. No engine sampling code is in
the reference.

Test. Replies of a few tokens over many seeds. At every position, replies are grouped by the
tokens before it (the first position is one group: all replies); in every group of at least
MIN_GROUP replies the next tokens are counted against the exact distribution (Pearson
chi-square, cells expecting fewer than 5 pooled). The statistics of all groups and positions
add up to one chi-square with the summed degrees of freedom: under a correct sampler each
group's counts are multinomial given the tokens before them, so the sum is chi-square. A token
the reference gives probability 0 fails at once. End of generation is a token like any other.

False alarms. A test passes at p > ALPHA = 1e-3: a correct engine fails each test with
probability 1e-3 over the choice of seeds (about 1% for the nine cases together). Seeds are
fixed, so the outcome is repeatable. Negative controls: the same test must reject (p < 1e-6)
samplers broken in each transform (temperature, top-k, top-p, min-p), in the residual after a
model draft and after a lookup draft, and in the acceptance test.

Time: about 35 s on the 2-core CI machine (tiny models on one thread each; replies of 6 to 8
tokens, 200 to 1000 seeds a case).
"""
from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pytest
import tiny_models
from llama_oracle import Row, assert_same, float64_reference, llama_distribution, llama_rtol
from scipy import stats as sst

import engine.sampling as sampling
from engine.decoding.events import DoneEvent, FinishReason, RoundEvent, TokenEvent
from engine.decoding.session import GenerationSettings, Session
from engine.llama.backend import LlamaModel
from engine.llama.types import LoadSettings, Logits
from engine.sampling import SamplingParams

ALPHA = 1e-3
REJECT = 1e-6
MIN_GROUP = 30
EOG = -1  # any end-of-generation token
ONE_THREAD = LoadSettings(n_ctx=256, n_threads=1, n_threads_batch=1)  # tiny models: threads only add waiting

PROMPT = "hello world the"
#: PROMPT, the target's own greedy reply to it, PROMPT again (written by the `rig` fixture):
#: prompt lookup proposes that reply, which the target finds likely but not certain, so lookup
#: drafts are kept and rejected both, and the residual without the drafted token carries weight.
LOOKUP = "lookup prompt"
PROMPTS = {PROMPT: PROMPT}


@dataclass(frozen=True)
class Case:
    drafter: str  # "none", "model", "lookup", "lookup+model"
    k: int
    params: SamplingParams
    tokens: int = 6
    p_min: float = 0.0
    prompt: str = PROMPT
    n: int = 600


CASES = {
    "plain, T=1 top-k 6": Case("none", 0, SamplingParams(1.0, 6, 1.0, 0.0)),
    "model k=1, T=0.7": Case("model", 1, SamplingParams(0.7, 40, 1.0, 0.0)),
    "model k=3, top-p 0.9, top-k 0": Case("model", 3, SamplingParams(1.0, 0, 0.9, 0.0)),
    "model k=8, min-p 0.05, T=1.5": Case("model", 8, SamplingParams(1.5, 0, 1.0, 0.05), tokens=8, n=800),
    "model k=3, all cuts, p_min 0.3": Case("model", 3, SamplingParams(0.8, 40, 0.9, 0.05), p_min=0.3),
    "model k=3, top-k 0 only, T=1.5": Case("model", 3, SamplingParams(1.5, 0, 1.0, 0.0), n=1000),
    "lookup k=3": Case("lookup", 3, SamplingParams(0.6, 40, 0.95, 0.02), prompt=LOOKUP, tokens=8),
    "lookup+model k=3": Case("lookup+model", 3, SamplingParams(0.6, 40, 0.95, 0.02), prompt=LOOKUP, tokens=8),
    "lookup k=8, T=1": Case("lookup", 8, SamplingParams(1.0, 40, 1.0, 0.0), prompt=LOOKUP, tokens=8),
}


class Reference:
    """Exact next-token distributions of the target under one set of sampling parameters."""

    def __init__(self, model: LlamaModel, prompt: list[int], params: SamplingParams) -> None:
        self.model, self.prompt = model, prompt
        self.chain = (params.temperature, params.top_k, params.top_p, params.min_p)
        self.eog = {t for t in range(model.n_vocab) if model.is_eog(t)}
        self.cache: dict[tuple[int, ...], dict[int, float]] = {}

    def __call__(self, prefix: tuple[int, ...]) -> dict[int, float]:
        if prefix not in self.cache:
            tokens = self.prompt + list(prefix)
            have = self.model.sync(tokens)
            if have == len(tokens):
                self.model.truncate(have - 1)
                have -= 1
            row = Row(np.array(self.model.decode(tokens[have:], Logits.LAST)[0], dtype=np.float32))
            ref = float64_reference(row, *self.chain)
            assert_same(row, ref, llama_distribution(row.logits, *self.chain), self.chain, 1e-4, "llama.cpp",
                        llama_rtol(row.logits, self.chain[0]))
            dist: dict[int, float] = defaultdict(float)
            for t, p in zip(ref[0].tolist(), ref[1].tolist()):
                dist[EOG if t in self.eog else t] += p
            self.cache[prefix] = dict(dist)
        return self.cache[prefix]


@dataclass
class Rig:
    session: Session
    """The engine under test: the sharp tiny target, drafters switched per case."""
    oracle: LlamaModel
    """A second copy of the target, for the reference's logits."""
    drafter: str
    """Path of the sharp tiny drafter."""


def replies(rig: Rig, case: Case, params: SamplingParams | None = None, seed0: int = 0) -> list[tuple[int, ...]]:
    """One reply per seed, as token ids, EOG standing for the end-of-generation token."""
    params = params or case.params
    session = rig.session
    session.set_drafter({"none": None, "model": rig.drafter, "lookup": "lookup", "lookup+model": f"lookup+{rig.drafter}"}[case.drafter])
    out, rounds = [], Counter()
    for seed in range(seed0, seed0 + case.n):
        settings = GenerationSettings(sampling=replace(params, seed=seed), draft_max=case.k, max_tokens=case.tokens, p_min=case.p_min)
        events = list(session.complete(PROMPTS[case.prompt], settings))
        toks = [e.token_id for e in events if isinstance(e, TokenEvent)]
        toks = [EOG if session.target.is_eog(t) else t for t in toks]
        done = events[-1]
        assert isinstance(done, DoneEvent)
        if EOG not in toks and done.finish_reason is FinishReason.STOP:
            toks.append(EOG)
        out.append(tuple(toks[: toks.index(EOG) + 1] if EOG in toks else toks))
        for e in events:
            if isinstance(e, RoundEvent):
                rounds["rounds"] += 1
                rounds["drafted"] += len(e.drafted)
                rounds["rejected"] += bool(e.rejected)
                rounds["later"] += e.round > 1 and e.accepted > 0
    replies.rounds = rounds
    return out


def goodness_of_fit(samples: list[tuple[int, ...]], reference: Reference, positions: int) -> tuple[float, int, int]:
    """(p-value, degrees of freedom, positions tested) of the summed chi-square; p = 0 when a
    sample holds a token the reference cannot produce."""
    stat, df, tested = 0.0, 0, set()
    for j in range(positions):
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for s in samples:
            if len(s) > j and EOG not in s[:j]:
                groups[s[:j]].append(s[j])
        for prefix, nexts in groups.items():
            if len(nexts) < MIN_GROUP:
                continue
            exact, n, counts = reference(prefix), len(nexts), Counter(nexts)
            if any(exact.get(t, 0.0) <= 0.0 for t in counts):
                return 0.0, df, len(tested)
            big = [t for t, p in exact.items() if p * n >= 5]
            obs = [counts.get(t, 0) for t in big]
            exp = [exact[t] * n for t in big]
            rest_obs, rest_exp = n - sum(obs), n - sum(exp)
            if rest_exp >= 5 or not big:
                obs, exp = obs + [rest_obs], exp + [rest_exp]
            elif big:  # too small to stand alone: into the smallest cell
                i = int(np.argmin(exp))
                obs[i] += rest_obs
                exp[i] += rest_exp
            if len(obs) < 2:
                continue
            stat += float(sum((o - e) ** 2 / e for o, e in zip(obs, exp)))
            df += len(obs) - 1
            tested.add(j)
    return float(sst.chi2.sf(stat, df)) if df else 1.0, df, len(tested)


def sharp_rig(folder):
    """The sharp tiny pair in `folder`: a session on its target with no drafter yet, and an oracle copy; closed after."""
    paths = tiny_models.write_set(folder, tiny_models.SHARP)
    rig = Rig(Session(paths["sharp-target"], None, target_load=ONE_THREAD, calibrate=False),
              LlamaModel(paths["sharp-target"], ONE_THREAD), str(paths["sharp-drafter"]))
    yield rig
    rig.session.close()
    rig.oracle.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    for rig in sharp_rig(tmp_path_factory.mktemp("sharp")):
        greedy = [e for e in rig.session.complete(PROMPT, GenerationSettings(SamplingParams(0.0), 0, 12))
                  if isinstance(e, DoneEvent)]
        PROMPTS[LOOKUP] = f"{PROMPT}{greedy[0].text} {PROMPT}"
        yield rig


def reference_for(rig: Rig, case: Case) -> Reference:
    return Reference(rig.oracle, rig.session.target.tokenize(PROMPTS[case.prompt], add_special=True), case.params)


@pytest.mark.parametrize("name", list(CASES))
def test_sampled_replies_follow_the_target(rig, name):
    case = CASES[name]
    samples = replies(rig, case)
    rounds = replies.rounds
    p, df, positions = goodness_of_fit(samples, reference_for(rig, case), case.tokens)
    assert p > ALPHA, f"{name}: replies do not follow the target's distribution (p={p:.2g}, df={df})"
    # several positions, not only the first (hot samplers spread replies thinner: two)
    assert positions >= (2 if case.params.temperature > 1.0 else 3) and df >= 20, (positions, df)
    if case.drafter != "none":
        # the drafts were real: some kept, some rejected, and draft tokens kept after the first round
        assert rounds["drafted"] > case.n and rounds["rejected"] > case.n // 10, rounds
        assert rounds["later"] > (case.n // 10 if "model" in case.drafter else 0), rounds


# -- negative controls: the same test, broken samplers --------------------------------------
def patched(monkeypatch, name: str, fake) -> None:
    """Replace engine.sampling.<name> wherever the engine holds it."""
    original = getattr(sampling, name)
    for mod in [m for k, m in sys.modules.items() if k.startswith("engine.") and m is not None]:
        if getattr(mod, name, None) is original:
            monkeypatch.setattr(mod, name, fake)


BROKEN_SETTINGS = {
    # (case, what the broken sampler does instead, replies needed to see it)
    "temperature ignored": ("model k=1, T=0.7", dict(temperature=1.0), 300),
    "top-k 0 read as the default 40": ("model k=3, top-k 0 only, T=1.5", dict(top_k=40), 600),
    "top-p ignored": ("model k=3, top-p 0.9, top-k 0", dict(top_p=1.0), 200),
    "min-p ignored": ("model k=8, min-p 0.05, T=1.5", dict(min_p=0.0), 200),
    # tempering first turns the cut's 0.9 into about 0.97 of the untempered mass
    "temperature before the cuts": ("model k=3, top-p 0.9, top-k 0", dict(temperature=1.0, top_p=0.97), 200),
}


@pytest.mark.parametrize("broken", list(BROKEN_SETTINGS))
def test_rejects_a_sampler_with_a_wrong_transform(rig, broken):
    name, change, n = BROKEN_SETTINGS[broken]
    case = replace(CASES[name], n=n)
    samples = replies(rig, case, replace(case.params, **change), seed0=50_000)
    p, df, _ = goodness_of_fit(samples, reference_for(rig, case), case.tokens)
    assert p < REJECT, f"{broken}: not detected (p={p:.2g}, df={df})"


def residual_from_p(p, q, token, n_vocab, rng):
    return p.sample(rng)


def residual_keeping_the_lookup_token(p, q, token, n_vocab, rng):
    return p.sample(rng) if q is None else BROKEN_ORIGINALS["sample_residual"](p, q, token, n_vocab, rng)


BROKEN_ORIGINALS = {"sample_residual": sampling.sample_residual, "accept_draft_token": sampling.accept_draft_token}

BROKEN_RULES = {
    "residual drawn from p (model drafts)": ("model k=3, all cuts, p_min 0.3", "sample_residual", residual_from_p, 800),
    "lookup residual keeps the drafted token": ("lookup k=3", "sample_residual", residual_keeping_the_lookup_token, 300),
    "every draft token accepted": ("model k=1, T=0.7", "accept_draft_token", lambda p, q, tok, rng: True, 200),
}


@pytest.mark.parametrize("broken", list(BROKEN_RULES))
def test_rejects_a_broken_speculative_rule(rig, monkeypatch, broken):
    name, function, fake, n = BROKEN_RULES[broken]
    case = replace(CASES[name], n=n)
    patched(monkeypatch, function, fake)
    samples = replies(rig, case, seed0=70_000)
    p, df, _ = goodness_of_fit(samples, reference_for(rig, case), case.tokens)
    assert p < REJECT, f"{broken}: not detected (p={p:.2g}, df={df})"
