"""Decoding: the speculative loop, drafters, the draft-length policy and what a round cost (round_costs),
sampling, events, stats, the llama.cpp backend and pairing rules.

A token's first steps: `speculative.rounds` drafts, verifies and keeps it; `speculative.generate` counts
the round once (`stats.StatsTracker`, whose `events.RoundTotals` ride on the `RoundEvent`), prices it
(`round_costs`) and yields the round's event, then one `TokenEvent` per kept token.

The kinds a request is made of are types here, parsed where text enters (settings file, command line,
widget) and written back as the same text: `draft_choice.DraftSpec` (which drafter) and
`draft_choice.DraftLength` (a fixed k or Auto); `llama_backend.Logits` (which rows a decode returns),
`session.LoadStage` (what a load is doing) and the event enums in `events`.
"""
