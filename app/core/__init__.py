"""What everything else in the window builds on: settings (typed when read: the engine's DraftSpec and
DraftLength, Theme), the drafter's words as replies record them, theme, notices, files set aside, background
work (one Worker type), and the engine thread (engine_thread/)."""
