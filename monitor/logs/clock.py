"""The clock a follower and a session read: injected, so a test moves time instead of sleeping.

Two times, never mixed: ``monotonic`` for intervals and deadlines (the safety poll, a stall's
silence), ``wall`` for what is compared with the file system's modification times or stamped on
a finding (seconds since the epoch). ``wait`` is how a follower blocks until something happens
or time passes: the system clock blocks in ``block`` (a sleep, an event queue's ``get``) for up
to ``seconds``; a clock a test moves passes the time at once and only looks (``block(0)``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    def wait(self, seconds: float, block: Callable[[float], T]) -> T: ...


class SystemClock:
    """The real clocks of ``time``."""

    @staticmethod
    def monotonic() -> float:
        return time.monotonic()

    @staticmethod
    def wall() -> float:
        return time.time()

    @staticmethod
    def wait(seconds: float, block: Callable[[float], T]) -> T:
        return block(seconds)


SYSTEM_CLOCK: Clock = SystemClock()
