"""A clock the test moves (``monitor.logs.clock.Clock``): a follower's safety poll, a session's
stall and its progress happen when the test says, not after real seconds of sleeping."""

from __future__ import annotations

import time


class FakeClock:
    """Starts at ``monotonic`` and at ``wall`` (seconds since the epoch; default: now, so files
    written by the test have modification times in its past, not far in its future); both move
    together, only by ``advance`` and by a wait, which passes its time at once."""

    def __init__(self, monotonic: float = 1000.0, wall: float | None = None) -> None:
        self.now = monotonic
        self._wall_offset = (time.time() if wall is None else wall) - monotonic

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.now + self._wall_offset

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, seconds, block):
        self.advance(max(0.0, seconds))
        return block(0)
