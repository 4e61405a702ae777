"""Draftlight's desktop app (PySide6). It never imports llama_cpp: the engine does that."""
