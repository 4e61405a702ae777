"""Moved to app.core.engine_thread.worker; this name stays only until app.control.replies imports it from there.

(Issue 23: replies.py is rewritten on another branch; its import moves there, then this file goes.)
"""
from app.core.engine_thread.worker import ContinueFrom, EngineWorker, ReplyRequest  # noqa: F401
