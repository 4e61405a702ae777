"""What everything else in the window builds on: settings, theme, notices, files set aside, background work
(one Worker type), and the engine thread (engine_thread/)."""
