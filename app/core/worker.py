"""Moved to app.core.engine_thread.worker; this name stays only until app.control.replies imports it from there.

(Issue 23: replies.py was not this change's to edit; once its import names app.core.engine_thread.worker, this
file goes.)
"""
from app.core.engine_thread.worker import ContinueFrom, EngineWorker, ReplyRequest  # noqa: F401
