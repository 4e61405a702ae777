"""The controller between widgets, the store and the engine thread, and the model bookkeeping it drives (scans, download tasks)."""
