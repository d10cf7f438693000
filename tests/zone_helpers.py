"""Running a test in a chosen time zone: log stamps without a zone are local time."""

from __future__ import annotations

import time


def in_time_zone(monkeypatch, zone: str):
    """Generator body for a fixture: the process's zone is ``zone`` until the test ends."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
