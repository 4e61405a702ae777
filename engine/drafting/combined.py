"""Lookup first, the model where lookup has nothing: the default drafter."""
from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from engine.drafting.base import Draft, Drafter, Prune, keep_all
from engine.drafting.lookup import LookupDrafter
from engine.drafting.request import DraftRequest
from engine.sampling import SamplingParams


class CombinedDrafter(Drafter):
    """Prompt lookup first; when it has nothing worth verifying, the model drafter."""

    uses_model = True

    def __init__(self, lookup: LookupDrafter, model: Drafter) -> None:
        """`model`: a drafter that runs a model (engine.drafting.model, or one riding the target: engine.drafting.mtp)."""
        self.lookup, self.model = lookup, model
        self.model_key = model.model_key
        self.name = f"lookup+{model.name}"

    @property
    def passes(self) -> int:
        return self.model.passes

    def begin(self, context: Sequence[int], stop: threading.Event | None = None) -> None:
        self.lookup.begin(context)
        self.model.begin(context, stop)

    def reply_starts(self, at: int | None) -> None:
        self.lookup.reply_starts(at)

    def behind(self, context: Sequence[int]) -> int:
        return self.model.behind(context)

    def prime(self, opening: Sequence[int], stop: threading.Event | None = None) -> None:
        self.model.prime(opening, stop)

    def propose(self, context: Sequence[int], request: DraftRequest, params: SamplingParams,
                rng: np.random.Generator, prune: Prune = keep_all, stop: threading.Event | None = None) -> Draft:
        draft = self.lookup.propose(context, request, params, rng, prune, stop)
        if draft.tokens:
            return draft
        spent, aside = draft.seconds, draft.aside
        draft = self.model.propose(context, request, params, rng, prune, stop)
        draft.seconds += spent
        draft.aside = aside + draft.aside
        return draft

    def commit(self, context: Sequence[int]) -> None:
        self.model.commit(context)

    def reset(self) -> None:
        self.lookup.reset()
        self.model.reset()
