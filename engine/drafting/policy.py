"""How long a draft to ask for: a fixed k, or "Auto", which prices every k from measured costs.

Auto picks, each round, the k (0 = plain decoding) that maximises expected tokens per second:

    E(k) = 1 + sum_{i=1..k} prod_{j<=i} a_j        tokens a round emits on average
    T(k) = D * k + V(k + 1) + O(k)                 seconds it costs

a_j is the chance that draft position j is accepted given that the ones before it were, D the
drafter's cost per drafted token, V(n) the target's cost to score a block of n tokens (measured,
interpolated between measured sizes, and dearer where plain rounds next to drafting ones measure
blocks dearer than that: CostModel.verify_cost) and O the engine's own overhead per round.

What each price covers, so that none is inflated by how long drafting was off:
- D is one drafter step: a model drafter that must first read tokens it has not seen (after plain
  or lookup rounds) reports that catch-up apart, priced per token of a batched read like prefill.
- Catch-up is a cost of turning drafting back on, so it is charged to probes, not to the
  steady-state choice of k. When that choice says draft but the drafter is behind (the prompt, at a
  reply's first round: Auto does not have the drafter read it with the target's prefill), drafting
  starts only if what it is expected to save over the reply's next tokens (at most REPLY_HORIZON)
  pays for the whole read; otherwise the read waits for a probe's budget like any other.
- Acceptance is a Beta posterior per kind of draft: a prior for the kind (a model drafter usually
  agrees, a lookup often does not), updated by the judgements of the last 16 rounds, and per
  position by that position's own judgements of the last 32 rounds. The windows count rounds, so
  the estimate turns over within a few dozen rounds when the drafter starts (or stops) agreeing.
  A free draft (lookup, history) pruned away unverified is judged all the same, against the tokens
  its round emitted: a lookup that starts being right (a reply that begins copying a passage) is
  seen within a round or two, where an unverified kind would wait for a probe's budget. Lookup
  drafts are learned by the length of their match (lookup_key), which reaches back up to 32
  tokens, so a long copy is learned apart from a chance match of five.
- Leaving plain decoding needs a 2% margin (do not draft for a tie); among draft lengths the best
  one wins outright.
- Where a long draft wholly rejected costs many plain steps (CPUs), Auto is cautious: a fresh key is
  as sure as its parent, and a draft's length grows with the runs its key has kept (CAUTIOUS).
While drafting of a kind is off, Auto probes with a one-token draft when the probe's expected net
cost fits in a 1.5% budget of the time spent since that kind last drafted:
- a model drafter never tried is tried at once if that look costs at most a plain round;
- a free kind (lookup, history) is probed only where Auto is not cautious: its proposal pruned away is
  judged against the round's tokens anyway (counted as a probe, so its budget starts again), which is
  all a one-token probe would tell, and on a CPU a rejected probe costs most of a plain round;
- a probe that is fully accepted is followed straight away by another, so a drafter that starts
  agreeing again is back within a few rounds;
- a probe pays for the model drafter's backlog only beyond 2% of a plain round per token read: where
  reading is that cheap, keeping the drafter in step is a standing price that lets it come back at all.
Auto never probes when even a perfect drafter could not beat plain decoding.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence

from engine.drafting.acceptance import PRIORS, Acceptance
from engine.drafting.costs import CostModel, RoundOutcome
from engine.drafting.draft_choice import AUTO_TEXT, DraftKind, DraftLength
from engine.drafting.request import MODEL_KEY, DraftKey, DraftRequest

#: Draft length of a probe (drafting is off, is it worth turning back on?): the cheapest look.
PROBE_K = 1
#: A model drafter nothing has judged yet looks before it drafts (DraftRequest.look): once LOOK_TOKENS of the
#: reply are in, its predictions of the last LOOK_MAX count as LOOK_WINDOW-token drafts from each position;
#: 12, not 6 or 16: enough words to tell a translation from code, yet short replies are not all look
#: (docs/how-it-works.md, "Why these numbers"; test_replay.py's look-after-twelve test).
LOOK_TOKENS, LOOK_MAX, LOOK_WINDOW = 12, 16, 4
#: A look that finds drafting barely worth it (best draft under LOOK_CLEAR x plain) is judged again after
#: LOOK_AGAIN more tokens, LOOKS looks at most: a reply's first words are not always like the rest, and a
#: third look kept a wrong drafter drafting (test_a_look_that_finds_drafting_barely_worth_it_is_judged_again).
LOOK_CLEAR, LOOK_AGAIN, LOOKS = 1.2, 8, 2
#: A prompt's read before the first token is a wait paid whatever the drafter turns out to be: a draft on the prior
#: must repay it this many times over (AutoK._first_read_pays; tests/engine/drafting/test_first_token.py).
FIRST_REPAY = 4.0
#: Tokens behind that a model drafter reads with its first draft step, not as a read of their own (model.CATCHUP_MIN).
FIRST_STEP_READS = 2
#: Share of decoding time that probing may cost while drafting is off.
PROBE_BUDGET = 0.015
#: A model drafter's backlog read is charged to a probe beyond this share of a plain round per
#: token read: below it (a GPU, Apple silicon) keeping the drafter in step is a small standing
#: price, paid whenever it drafts again, and charging it all to one probe would keep it off for good.
BACKLOG_ALLOWANCE = 0.02
#: Tokens of a reply ahead that must repay reading a model drafter's backlog before it drafts (fewer
#: when max_tokens leaves fewer): about a short answer, so a long prompt is read only when it pays soon.
REPLY_HORIZON = 256
#: Margin a draft must win by over plain decoding.
MARGIN = 1.02
#: Where verifying k_max + 1 tokens costs more than CAUTIOUS single steps (CPUs; not GPUs) a wholly rejected long
#: draft costs many plain rounds, so Auto is cautious: a fresh key starts as sure as up to PARENT_WEIGHT of its
#: parent's judgements, and a draft is at most its key's reach (acceptance.REACH_GROWTH).
CAUTIOUS = 3.0
PARENT_WEIGHT = 16.0


def expected_remaining(remaining: int | None, so_far: int) -> int:
    """The tokens a reply that has run `so_far` is expected to go on for, within what its limit leaves
    (`remaining`): about as many again (a reply's length has a long tail: the longer it has run, the longer
    it runs on), at least LOOK_TOKENS, at most REPLY_HORIZON. Whether reading the prompt into a model
    drafter pays is judged over these, not over all the limit leaves: a short reply under a long limit would
    pay a whole read for drafts that never come (docs/how-it-works.md, "Why these numbers")."""
    expected = min(REPLY_HORIZON, max(so_far, LOOK_TOKENS))
    return expected if remaining is None else min(remaining, expected)


def look_windows(agree: list[bool], key: DraftKey | None = None) -> tuple[tuple[DraftKey, int, int], ...]:
    """A look's judgements (DraftRequest.look), one per position: (key, tokens judged, of those kept from the
    first), as a draft of up to LOOK_WINDOW tokens from there would have been kept."""
    out = []
    for i in range(len(agree)):
        w = agree[i : i + LOOK_WINDOW]
        out.append((key or MODEL_KEY, len(w), next((j for j, a in enumerate(w) if not a), len(w))))
    return tuple(out)


class DraftPolicy(ABC):
    """Decides how much to draft (before proposing) and how much of a draft to verify (after)."""

    label: str = ""
    rounds_seen: int = 0
    """Rounds this policy has learned from (only AutoK learns; the others stay at 0): a reply's Auto starts at
    0 and a continuation's goes on from its reply's (ReplyAuto)."""

    @abstractmethod
    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        """What to ask of the drafter, at most `limit` tokens; `behind`: tokens a model drafter
        would have to read before drafting; `remaining`: tokens the reply may still emit; `judgeable`:
        of the tokens behind, the reply's own ones a look could judge (DraftRequest.look)."""

    def prune(self, key: DraftKey, proposed: int) -> int:
        """How many of `proposed` draft tokens of kind `key` to verify."""
        return proposed

    def observe(self, outcome: RoundOutcome) -> None:
        """Learn from a finished round."""

    @property
    def drafts(self) -> bool:
        """Whether this policy ever asks for a draft (a drafter need not read the prompt otherwise)."""
        return True

    @property
    def reads_prompt(self) -> bool:
        """Whether the drafter reads the prompt with the target's prefill."""
        return self.drafts


class NoDraft(DraftPolicy):
    label = "none"

    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        return DraftRequest()

    @property
    def drafts(self) -> bool:
        return False


class FixedK(DraftPolicy):
    """The user's k, exactly as asked (capped by what fits)."""

    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError("draft length must be 0 or more")
        self.k = k
        self.label = f"fixed k={k}"

    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        k = max(0, min(self.k, limit))
        return DraftRequest(k, k)

    @property
    def drafts(self) -> bool:
        return self.k > 0


class _Probe:
    """While drafting of one kind is off: when to try it again."""

    def __init__(self) -> None:
        # Decoding time since drafting of this kind last ran (or was judged): a kind never tried is
        # due at once when its look costs at most `first_look` (it teaches the most, and a short
        # reply cannot wait for the budget).
        self.idle_s = math.inf
        self.again = False  # the last probe was fully accepted: look again at once

    def due(self, net_cost: float, first_look: float = math.inf) -> bool:
        if self.idle_s == math.inf and net_cost > first_look:
            # A first look dearer than `first_look` (a plain round) earns its budget like any other:
            # on a CPU, reading a long prompt into the drafter costs seconds (measured: 0.84x).
            self.idle_s = 0.0
        return self.again or net_cost <= PROBE_BUDGET * self.idle_s


class AutoK(DraftPolicy):
    """Maximise expected tokens per second from measured costs (see the module docstring)."""

    label = AUTO_TEXT

    def __init__(self, costs: CostModel, k_max: int = 16, drafter_is_model: bool = True,
                 model_key: DraftKey = MODEL_KEY) -> None:
        self.costs = costs
        self.k_max = k_max
        self.drafter_is_model = drafter_is_model
        self.model_key = model_key
        """The key the drafter that runs a model drafts under (a family model, or an MTP assistant)."""
        self.tables: dict[DraftKey, Acceptance] = {}
        self.probes: dict[DraftKind, _Probe] = {}
        """Per kind, not per key: a kind's match lengths and buckets share one probe budget."""
        self._probing: set[DraftKey] = set()
        self.rounds_seen = 0
        self._looks = 0  # looks at the model drafter so far (DraftRequest.look)
        self._model_drafted = False  # whether the model drafter has drafted yet

    def table(self, key: DraftKey) -> Acceptance:
        if key not in self.tables:
            parent = self.table(key.parent) if key.parent is not None else None
            self.tables[key] = Acceptance(self.k_max, PRIORS.get(key.kind, PRIORS[DraftKind.LOOKUP]), parent,
                                          inherit=PARENT_WEIGHT if self.cautious() else 0.0)
        return self.tables[key]

    # -- the model -----------------------------------------------------------
    def rates(self, key: DraftKey, limit: int, with_draft_cost: bool) -> list[float]:
        """Expected tokens per second for k = 0 .. limit (0 where nothing is measured)."""
        n = max(0, min(limit, self.k_max))
        acc = self.table(key).values(n)
        out, tokens, run = [], 1.0, 1.0
        for k in range(n + 1):
            if k:
                run *= acc[k - 1]
                tokens += run
            cost = self.costs.round_cost(k, with_draft_cost)
            out.append(tokens / cost if cost else 0.0)
        return out

    def rate(self, key: DraftKey, k: int, with_draft_cost: bool, perfect: bool = False) -> float:
        cost = self.costs.round_cost(k, with_draft_cost)
        return self.table(key).expected_tokens(k, perfect) / cost if cost else 0.0

    def best_k(self, key: DraftKey, limit: int, with_draft_cost: bool) -> int:
        """The fastest k, or 0 unless it beats plain decoding by the margin."""
        rates = self.rates(key, limit, with_draft_cost)
        best = max(range(len(rates)), key=lambda k: (rates[k], -k))  # a tie goes to the shorter draft
        return best if best and rates[best] > rates[0] * MARGIN else 0

    def perfect_wins(self, limit: int, with_draft_cost: bool) -> bool:
        """Whether a drafter that is never wrong beats plain decoding by the margin at some k <= limit: as best_k
        would find for it, but done at the first k that does (the fastest k beats the margin if any k does),
        so a CPU prices two or three lengths a round where the model drafter is off, not all seventeen."""
        plain = self.costs.round_cost(0, with_draft_cost)
        bar = (1.0 / plain if plain else 0.0) * MARGIN
        for k in range(1, max(0, min(limit, self.k_max)) + 1):
            cost = self.costs.round_cost(k, with_draft_cost)
            rate = (k + 1.0) / cost if cost else 0.0  # a perfect draft of k emits k + 1 tokens
            if rate > bar:
                return True
        return False

    def _probe_net_cost(self, key: DraftKey, k: int, behind: int, with_draft_cost: bool,
                        remaining: int | None = None) -> float:
        """What a probe of k tokens costs over a plain round, less what it is expected to save."""
        plain = self.costs.round_cost(0, with_draft_cost) or 0.0
        cost = (self.costs.round_cost(k, with_draft_cost) or 0.0) - plain
        if with_draft_cost and behind > 1:
            cost += self._backlog_price(behind - 1, remaining)
        gain = (self.table(key).expected_tokens(k) - 1.0) * plain
        return max(0.0, cost - gain)

    def _backlog_price(self, n: int, remaining: int | None = None) -> float:
        """The part of reading n unseen tokens that a probe is charged (see BACKLOG_ALLOWANCE): the
        allowance is a standing price spread over the tokens to come, so it covers at most the tokens
        the reply may still emit (`remaining`, at most REPLY_HORIZON). Uncapped, a 3,000-token attached
        document read into the drafter for a 1-token probe at a reply's start was charged next to
        nothing where reads cost 2.7% of a plain round a token: 5.8 s of a 12-s reply, 0.47x of plain
        decoding (a Xeon with AMX)."""
        horizon = REPLY_HORIZON if remaining is None else min(max(0, remaining), REPLY_HORIZON)
        covered = min(n, horizon)
        allowance = BACKLOG_ALLOWANCE * covered * (self.costs.round_cost(0, True) or 0.0)
        return max(0.0, self.costs.catchup_cost(n) - allowance)

    def _repays_backlog(self, key: DraftKey, k: int, behind: int, remaining: int | None, times: float = 1.0) -> bool:
        """Whether drafting k a round saves, over the reply's next tokens, all that reading the backlog costs.
        The whole read, not a probe's share of it (_backlog_price): this read is paid now, for a saving
        that only comes if the drafter goes on drafting. Priced at a probe's share, a translation's prompt
        read into the drafter on a CPU cost more than the reply's drafts saved (replayed on the fast
        copy's costs: 0.86x of plain; 0.98x priced whole)."""
        if behind <= 1:
            return True
        rates = self.rates(key, k, True)
        saving = 1.0 / rates[0] - 1.0 / rates[k]  # seconds a token; rates[k] > rates[0]: k is the best
        horizon = REPLY_HORIZON if remaining is None else min(remaining, REPLY_HORIZON)
        return saving * horizon >= times * self.costs.catchup_cost(behind - 1)

    def cautious(self) -> bool:
        """Whether a long draft wholly rejected costs many plain steps here (CAUTIOUS; unmeasured: yes)."""
        v1, v_max = self.costs.verify_cost(1), self.costs.verify_cost(self.k_max + 1)
        return not v1 or not v_max or v_max > CAUTIOUS * v1

    def _reach(self, key: DraftKey, limit: int) -> int:
        """The longest draft worth asking for now: Acceptance.reach where Auto is cautious, or longer while
        even a wholly rejected draft costs at most one plain step more."""
        if not self.cautious():
            return limit
        reach = min(limit, self.table(key).reach())
        v1 = self.costs.verify_cost(1) or 0.0
        while reach < limit and (self.costs.verify_cost(reach + 2) or math.inf) <= 2 * v1:
            reach += 1
        return reach

    def _decide(self, key: DraftKey, limit: int, with_draft_cost: bool, behind: int = 0,
                remaining: int | None = None) -> int:
        if limit <= 0 or self.costs.verify_cost(1) is None:
            return 0  # nothing measured yet: plain decoding first, everything is priced against it
        k = self.best_k(key, self._reach(key, limit), with_draft_cost)
        probe = self.probes.setdefault(key.kind, _Probe())
        if k > 0 and (not with_draft_cost or self._repays_backlog(key, k, behind, remaining)):
            return k
        if not with_draft_cost and self.cautious():
            return 0  # judged aside for free (observe), as a probe would be; a rejected probe costs here (docstring)
        probe_k = min(limit, PROBE_K)
        if not self.perfect_wins(limit, with_draft_cost):
            return 0  # even a perfect drafter could not win here
        # A first look at a model drafter reads its backlog (the whole prompt): at once only when that costs at most
        # a plain round. A free draft is judged unverified every round anyway (observe: aside), so where it is probed at
        # all (not cautious) its first verified look earns its budget too: taken at once, one failed lookup cost a
        # 15-token reply 5% (wide set, EPYC costs, before cautious machines stopped probing free kinds).
        first_look = (self.costs.round_cost(0, True) or 0.0) if with_draft_cost else 0.0
        if probe.due(self._probe_net_cost(key, probe_k, behind, with_draft_cost, remaining), first_look=first_look):
            self._probing.add(key)
            return probe_k
        return 0

    # -- the policy ----------------------------------------------------------
    @property
    def reads_prompt(self) -> bool:
        return False  # the first round decides whether reading it pays, and prices it (_repays_backlog)

    def request(self, limit: int, behind: int = 0, remaining: int | None = None, judgeable: int = 0) -> DraftRequest:
        with self.costs.held():
            return self._request(limit, behind, remaining, judgeable)

    def _request(self, limit: int, behind: int, remaining: int | None, judgeable: int) -> DraftRequest:
        if behind - 1 > judgeable:  # the prompt is unread: judgeable is the whole reply so far
            remaining = expected_remaining(remaining, judgeable)
        model_k = (self._decide(self.model_key, limit, with_draft_cost=True, behind=behind, remaining=remaining)
                   if self.drafter_is_model else 0)
        lookup_k = min(limit, self.k_max)
        unjudged = model_k and not self.table(self.model_key).rounds and behind - 1 > judgeable
        if unjudged and not self.cautious() and not judgeable and not self._first_read_pays(model_k, behind, remaining):
            model_k = 0  # not before the first token: from the next round the read is priced as any backlog's
        elif unjudged and self.cautious():
            # Nothing judged the model yet, it must read the prompt anyway, and a rejected draft costs plain
            # rounds here (a CPU): a look, not a draft on the prior. Where blocks cost next to one token (a
            # GPU) the prior's draft loses little and wins at once: replayed, looks cost 5% there.
            if judgeable >= LOOK_TOKENS:
                return DraftRequest(lookup_k=lookup_k, look=min(judgeable, LOOK_MAX))
            model_k = 0  # until the reply has tokens to judge
        elif model_k and self._unsure_after_looks(model_k):
            if judgeable >= LOOK_AGAIN:
                return DraftRequest(lookup_k=lookup_k, look=min(judgeable, LOOK_MAX))
            model_k = 0  # until the reply has tokens to judge again
        return DraftRequest(model_k, lookup_k)

    def _first_read_pays(self, k: int, behind: int, remaining: int | None) -> bool:
        """Whether a first model draft on the prior may read the unread prompt before the reply's first token: a token
        or two (read with the first draft step, as ModelDrafter does), or a read the draft repays FIRST_REPAY times
        over the tokens the reply is expected to run."""
        return behind <= FIRST_STEP_READS or self._repays_backlog(self.model_key, k, behind, remaining, FIRST_REPAY)

    def _unsure_after_looks(self, k: int) -> bool:
        """Whether a model draft of k, judged by looks alone, wins by too little to be paid for before
        another look (LOOK_CLEAR; only where a rejected draft costs plain rounds: cautious)."""
        if self._model_drafted or not 0 < self._looks < LOOKS or not self.cautious():
            return False
        rates = self.rates(self.model_key, k, True)
        return rates[k] < rates[0] * LOOK_CLEAR

    def prune(self, key: DraftKey, proposed: int) -> int:
        if key.kind.runs_model:
            return proposed  # k was already chosen for it, drafting cost included
        with self.costs.held():
            return self._decide(key, proposed, with_draft_cost=False)

    def observe(self, o: RoundOutcome) -> None:
        self.rounds_seen += 1
        # Time passes for every kind not drafted this round (the probe budget grows with it).
        spent = o.verify_s + o.draft_s + o.catchup_s + o.overhead_s
        for kind, probe in self.probes.items():
            if not (o.drafted and kind is o.key.kind):
                probe.idle_s += spent
        self._looks += any(key.kind.runs_model for key, _, _ in o.aside)  # a look's judgements
        for key, judged, kept in o.aside:
            if judged:  # as good as a probe of that kind, at no cost: its budget starts again
                self.table(key).observe(judged, kept)
                probe = self.probes.setdefault(key.kind, _Probe())
                probe.idle_s, probe.again = 0.0, False
        if not o.drafted:
            return
        self.table(o.key).observe(o.drafted, o.accepted)
        self._model_drafted |= o.key.kind.runs_model
        probe = self.probes.setdefault(o.key.kind, _Probe())
        was_probe = o.key in self._probing
        self._probing.discard(o.key)
        probe.idle_s = 0.0
        probe.again = was_probe and o.accepted == o.drafted


class ReplyAuto:
    """Hands each reply its Auto: a fresh AutoK (the kinds' priors; on a CPU its model drafter looks before it
    drafts) for every new reply, and the same AutoK again only for a continuation of the reply it last served
    (Continue: same drafter, same cost model, same prompt). Acceptance describes a text, not the machine, so it
    is not carried from one reply to the next (test_each_reply_of_a_chat_learns_acceptance_afresh)."""

    def __init__(self) -> None:
        self._last: tuple[object, tuple[int, ...], AutoK] | None = None  # (drafter, prompt, its Auto)

    def for_reply(self, costs: CostModel, drafter_is_model: bool, drafter: object, prompt: Sequence[int],
                  continues: bool = False, model_key: DraftKey = MODEL_KEY) -> AutoK:
        """`drafter`: what drafts (compared by equality); `prompt`: the tokens the reply starts after (a
        continuation's too, without the reply so far); `continues`: the reply so far is part of the context."""
        last = self._last
        if continues and last is not None and last[0] == drafter and last[2].costs is costs and last[1] == tuple(prompt):
            return last[2]
        auto = AutoK(costs, drafter_is_model=drafter_is_model, model_key=model_key)
        self._last = (drafter, tuple(prompt), auto)
        return auto

    def forget(self) -> None:
        self._last = None


def make_policy(draft_max: DraftLength, costs: CostModel, drafter_is_model: bool,
                model_key: DraftKey = MODEL_KEY) -> DraftPolicy:
    """The policy for a request's draft length: Auto, k=0 (plain) or a fixed k."""
    if draft_max.is_auto:
        return AutoK(costs, drafter_is_model=drafter_is_model, model_key=model_key)
    return NoDraft() if draft_max.k == 0 else FixedK(draft_max.k)
