"""Each rank's step time, from the progress its lines print (``progress.parse_progress``).

Synchronous ranks finish their steps together, so the step times mostly say how long the wait
lasts in seconds; a rank that prints its step before the step's collective shows its own time.
"""

from __future__ import annotations

import statistics
from collections import deque

from monitor.progress import parse_progress

# Steps kept per rank: the step time is the median over the last ones.
KEPT_STEPS = 16


class StepTimes:
    """``feed(rank, text, at)`` for each line of a rank, oldest first; ``seconds()`` the step
    time of each rank that printed two steps in a row. One writer (the thread that feeds)."""

    def __init__(self) -> None:
        self._steps: dict[int, deque[tuple[float, int]]] = {}

    def feed(self, rank: int | None, text: str, at: float) -> None:
        if rank is None:
            return
        event = parse_progress(text)
        if event is None or event.step is None:
            return
        kept = self._steps.setdefault(rank, deque(maxlen=KEPT_STEPS))
        if kept and event.step <= kept[-1][1]:
            if event.step < kept[-1][1]:
                kept.clear()  # a restart, a new progress bar: the times before no longer apply
            else:
                return  # the same step printed again (a dict after the step's line)
        kept.append((at, event.step))

    def seconds(self) -> dict[int, float]:
        """rank -> the median seconds per step over its recent steps."""
        found = {}
        for rank, kept in self._steps.items():
            per_step = [(t1 - t0) / (s1 - s0) for (t0, s0), (t1, s1) in zip(kept, list(kept)[1:]) if t1 > t0]
            if per_step:
                found[rank] = statistics.median(per_step)
        return found
