"""Decoding: the speculative loop, drafters, the draft-length policy and what a round cost (round_costs), sampling, events, stats, the llama.cpp backend and pairing rules."""
