"""What everything else in the window builds on: settings, theme, notices, background work, the engine thread."""
