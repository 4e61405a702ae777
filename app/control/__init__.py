"""The controller between widgets, the store and the engine thread, and the model bookkeeping it drives (scans,
download tasks). A reply being written is one object here (streaming_reply.StreamingReply): it folds the
engine's events once, saves them, and announces `changed(message_id, from_token)` to whoever shows it."""
