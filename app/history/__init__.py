"""Conversations on disk and in memory: the SQLite store (database opens the file, store queries it), its
records, what a reply measured, import and export."""
