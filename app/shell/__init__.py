"""The window's frame: commands (one QAction each), the menu bar, the toolbar, folding panes."""
