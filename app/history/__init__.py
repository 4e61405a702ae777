"""Conversations on disk and in memory: the SQLite store, its records, what a reply measured, export, the list."""
