"""The engine thread: one QThread that loads models and drives replies, in the order they were asked for.

`worker.EngineWorker` lives on it (requests arrive as queued slot calls, what it learns leaves as
signals); `past_chats_index` is what it keeps of past chats for drafting. Only this thread runs the
engine's Session and writes that index; the rest of the app speaks to it through the request and
status types declared here. Short background jobs use app.core.background instead.
"""
