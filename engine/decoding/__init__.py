"""Decoding: the speculative loop (speculative), what a round cost (round_costs), stats and the verdict, the
event stream, and the session that answers chats (session; its measuring at load: measure).

A token's first steps: `speculative.rounds` drafts (engine.drafting), verifies with the target
(engine.llama.backend) and keeps it; `speculative.generate` counts the round once (`stats.StatsTracker`, whose
`events.RoundTotals` ride on the `RoundEvent`), prices it (`round_costs`) and yields the round's event, then
one `TokenEvent` per kept token.

The kinds a request is made of are types, parsed where text enters (settings file, command line, widget) and
written back as the same text: `engine.drafting.draft_choice.DraftSpec` (which drafter) and `DraftLength` (a
fixed k or Auto); `engine.llama.types.Logits` (which rows a decode returns), `measure.LoadStage` (what a load
is doing) and the event enums in `events`.
"""
