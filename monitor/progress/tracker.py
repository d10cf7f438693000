"""The running state of a job's progress, built from the lines of its leading rank."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as _replace

from monitor.progress.parse import ProgressEvent, parse_progress

LOSS_HISTORY = 240
# Steps remembered for the step-rate estimate of the ETA.
RATE_WINDOW = 32


@dataclass(frozen=True, slots=True)
class ProgressState:
    step: int | None = None
    total: int | None = None
    epoch: float | None = None
    loss: float | None = None
    # Recent finite and non-finite losses, oldest first (what the sparkline draws).
    losses: tuple[float, ...] = ()
    throughput: float | None = None
    throughput_unit: str | None = None
    eta_seconds: float | None = None
    # The first non-finite loss: its step (if known) and rank; stays set once seen.
    nonfinite_step: int | None = None
    nonfinite_rank: int | None = None
    nonfinite_seen: bool = False
    # The rank whose lines the state follows (None: lines without a rank).
    rank: int | None = None

    @property
    def known(self) -> bool:
        return self.step is not None or self.loss is not None or self.throughput is not None


class ProgressTracker:
    """Feeds log lines through ``parse_progress`` and keeps the state of the lowest rank seen.

    All ranks usually print the same progress; following one avoids a sawtooth of interleaved
    values. A non-finite loss on ANY rank is kept, since that is the line a user must see.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._state = ProgressState()
        self._losses: deque[float] = deque(maxlen=LOSS_HISTORY)
        self._steps: deque[tuple[float, int]] = deque(maxlen=RATE_WINDOW)
        self._leader: int | None = None
        self._has_leader = False
        self.version = 0

    @property
    def state(self) -> ProgressState:
        return self._state

    def feed(self, text: str, rank: int | None = None, now: float | None = None) -> bool:
        """Read one line; True when the state changed."""
        event = parse_progress(text)
        if event is None:
            return False
        now = self._clock() if now is None else now
        changed = False
        if not event.loss_is_finite and not self._state.nonfinite_seen:
            self._state = _replace(self._state, nonfinite_seen=True, nonfinite_step=event.step, nonfinite_rank=rank)
            changed = True
        if self._follows(rank):
            self._apply(event, rank, now)
            changed = True
        if changed:
            self.version += 1
        return changed

    def _follows(self, rank: int | None) -> bool:
        if not self._has_leader:
            self._leader, self._has_leader = rank, True
            return True
        if rank == self._leader:
            return True
        if rank is not None and (self._leader is None or rank < self._leader):
            # A lower rank shows up (rank 0 often starts printing last): follow it from now on.
            self._leader = rank
            self._steps.clear()
            return True
        return False

    def _apply(self, event: ProgressEvent, rank: int | None, now: float) -> None:
        state = self._state
        step = event.step if event.step is not None else state.step
        total = event.total if event.total is not None else state.total
        if event.step is not None:
            if self._steps and event.step < self._steps[-1][1]:
                self._steps.clear()  # a new tqdm bar or a restart: the old rate no longer applies
            self._steps.append((now, event.step))
        if event.loss is not None:
            self._losses.append(event.loss)
        throughput = event.throughput if event.throughput is not None else state.throughput
        unit = event.throughput_unit if event.throughput is not None else state.throughput_unit
        self._state = _replace(
            state,
            step=step,
            total=total,
            epoch=event.epoch if event.epoch is not None else state.epoch,
            loss=event.loss if event.loss is not None else state.loss,
            losses=tuple(self._losses),
            throughput=throughput,
            throughput_unit=unit,
            eta_seconds=self._eta(step, total, throughput, unit),
            rank=rank,
        )

    def _eta(self, step: int | None, total: int | None, throughput: float | None, unit: str | None) -> float | None:
        if step is None or not total or step >= total:
            return None
        remaining = total - step
        if len(self._steps) >= 2:
            (t0, s0), (t1, s1) = self._steps[0], self._steps[-1]
            if t1 > t0 and s1 > s0:
                return remaining * (t1 - t0) / (s1 - s0)
        if unit == "it/s" and throughput and math.isfinite(throughput):
            return remaining / throughput
        return None
