"""Draftlight's engine: speculative decoding on llama.cpp, with no Qt in sight.

Entry points: `engine.session.Session` (load a pair, chat, stop), the event types in
`engine.events`, and the CLI in `engine.cli` (`python -m engine`).
"""
