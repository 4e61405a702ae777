"""Decoding: the speculative loop, drafters, the draft-length policy and what a round cost (round_costs), sampling, events, stats, the llama.cpp backend and pairing rules.

The kinds a request is made of are types here, parsed where text enters (settings file, command line,
widget) and written back as the same text: `draft_choice.DraftSpec` (which drafter) and
`draft_choice.DraftLength` (a fixed k or Auto); `llama_backend.Logits` (which rows a decode returns),
`session.LoadStage` (what a load is doing) and the event enums in `events`.
"""
