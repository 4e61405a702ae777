"""Draftlight's engine: speculative decoding on llama.cpp, with no Qt in sight.

Entry points: `engine.decoding.session.Session` (load a pair, chat, stop), the event types in
`engine.decoding.events`, and the CLI in `engine.frontends.cli` (`python -m engine`).
"""
