"""Draftlight's desktop app (PySide6). It never imports llama_cpp: the engine does that.

Its rooms, top to bottom (import-linter holds the order): window, shell, stats, chat | models, control,
history, core. A token from the engine reaches the screen through core.engine_thread (the worker sends
it as a signal), control.replies (one timer gathers a batch), control.streaming_reply (folds, saves,
announces `changed`) and chat.chat_view (draws it); see docs/development.md, "From the engine loop to the chat view".
"""
