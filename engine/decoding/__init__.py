"""Decoding: the speculative loop, drafters, the draft-length policy, sampling, events, stats, the llama.cpp backend and pairing rules."""
