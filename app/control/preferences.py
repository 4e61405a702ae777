"""The person's settings while the app runs: one copy, changed in one place, saved soon after.

Every part reads `settings` from here; a person's change goes through `update` (and the window
hears it), a choice the app makes for them (a pair that finished installing, a drafter that
fits the new target) through `adopt`. Saving waits a moment so a dragged slider is one write.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from PySide6.QtCore import QObject, QTimer, Signal

from app.core.errors import Level, Notice
from app.core.settings import AppSettings, load_settings, save_settings, typed_changes

SAVE_DELAY_MS = 400


class Preferences(QObject):
    """Holds the AppSettings; writes them to the config folder."""

    sig_settings = Signal(object)
    """The settings changed (AppSettings)."""
    sig_notice = Signal(object)
    """The settings could not be saved (Notice)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.settings, self.load_notice = load_settings()
        """The settings now; `load_notice` says why the saved ones could not be used (or None)."""
        self._save_timer = QTimer(self, singleShot=True, interval=SAVE_DELAY_MS)
        self._save_timer.timeout.connect(self.save)

    def update(self, **changes: Any) -> AppSettings | None:
        """A person's change: returns the settings before it, or None when nothing changed.
        Values are typed first (ValueError for one a setting cannot hold), so a widget's `str`
        never reaches the settings where an enum belongs."""
        new = dataclasses.replace(self.settings, **typed_changes(changes))
        if new == self.settings:
            return None
        old, self.settings = self.settings, new
        self._save_timer.start()
        self.sig_settings.emit(new)
        return old

    def adopt(self, announce: bool = False, **changes: Any) -> None:
        """A choice the app made for the person; `announce` tells the window (otherwise the signal
        that carries the choice, e.g. the drafter list, does)."""
        self.settings = dataclasses.replace(self.settings, **typed_changes(changes))
        self._save_timer.start()
        if announce:
            self.sig_settings.emit(self.settings)

    def save(self) -> None:
        try:
            save_settings(self.settings)
        except OSError as exc:
            self.sig_notice.emit(Notice(f"Could not save the settings ({exc.strerror or exc}); they will be lost "
                                        "when the app closes. Check that the config folder is writable.",
                                        Level.WARNING))

    def close(self) -> None:
        """Save now (the app is closing)."""
        self._save_timer.stop()
        self.save()
