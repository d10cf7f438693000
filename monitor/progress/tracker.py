"""The running state of a job's progress, built from the lines of its leading rank."""

from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace as _replace

from monitor.progress.parse import MAX_PARSED, ProgressEvent, parse_progress

LOSS_HISTORY = 240
# Steps remembered for the step-rate estimate of the ETA.
RATE_WINDOW = 32
# Two steps read closer together than this were read from a backlog, not as they were printed.
BACKLOG_GAP_S = 0.01
# A file's last write is looked up at most this often (a burst of progress lines: one stat).
WRITTEN_CHECK_S = 1.0


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
    # When the file of the last progress line was last written (seconds since the epoch), when
    # it was read from there: that line was written by then, however late it was read (an old,
    # finished log opened today).
    written_by: float | None = None

    @property
    def known(self) -> bool:
        return self.step is not None or self.loss is not None or self.throughput is not None


# The order of the best stream there can be (see ``_rank_order``): it reports a loss, and it
# is rank 0 or lines without a rank.
_BEST_ORDER = (True, True, 0)


def _is_main(rank: int | None) -> bool:
    # Lines without a rank prefix are the main stream: often only rank 0 prints, unprefixed.
    return rank is None or rank == 0


class ProgressTracker:
    """Feeds log lines through ``parse_progress`` and follows one stream of lines (one rank).

    All ranks usually print the same progress; following one avoids a sawtooth of interleaved
    values. The followed stream is the best seen so far: one that reports a loss, then rank 0
    or lines without a rank, then the lowest rank. A non-finite loss on ANY rank is kept, since
    that is the line a user must see.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._state = ProgressState()
        self._losses: deque[float] = deque(maxlen=LOSS_HISTORY)
        self._steps: deque[tuple[float, int]] = deque(maxlen=RATE_WINDOW)
        self._leader: int | None = None
        self._has_leader = False
        # Streams (ranks, None for unprefixed lines) that have reported a loss.
        self._with_loss: set[int | None] = set()
        self._loss_step: int | None = None
        self._written: dict[str, tuple[float, float | None]] = {}  # file -> (looked at, its last write)
        self.version = 0

    @property
    def state(self) -> ProgressState:
        return self._state

    def feed(self, text: str, rank: int | None = None, now: float | None = None, file: str | None = None) -> bool:
        """Read one line (of ``file``, when read from one); True when the state changed."""
        if self._cannot_change(text, rank):
            return False
        event = parse_progress(text)
        if event is None:
            return False
        now = self._clock() if now is None else now
        changed = False
        if not event.loss_is_finite and not self._state.nonfinite_seen:
            self._state = _replace(self._state, nonfinite_seen=True, nonfinite_step=event.step, nonfinite_rank=rank)
            changed = True
        if event.step is None and event.loss is None and event.throughput is None:
            # Only a configured total ("steps=200"), printed alike by every rank.
            if event.total is not None and self._state.total is None:
                self._state = _replace(self._state, total=event.total)
                changed = True
        else:
            if event.loss is not None:
                self._with_loss.add(rank)
            if self._follows(rank):
                self._apply(event, rank, now, self._written_by(file, now))
                changed = True
        if changed:
            self.version += 1
        return changed

    def _cannot_change(self, text: str, rank: int | None) -> bool:
        """True when a line of ``rank`` cannot change the state, told without parsing it (most
        lines of a job of many ranks: parsing every one cost ~25 µs a line, a quarter of a
        core at 10,000 lines/s). That is a line of another stream once the followed one is the
        best there is (it reports a loss and is rank 0 or unprefixed: no stream can take over),
        unless it may hold a configured total still unknown (``=``, see ``parse_progress``) or
        the first non-finite loss (float() reads only "nan" and "inf[inity]" as one)."""
        if not self._has_leader or rank == self._leader or self._rank_order(self._leader) != _BEST_ORDER:
            return False
        if self._state.total is None and "=" in text:
            return False
        if not self._state.nonfinite_seen:
            lower = text[:MAX_PARSED].lower()
            if "nan" in lower or "inf" in lower:
                return False
        return True

    def _rank_order(self, rank: int | None) -> tuple[bool, bool, int]:
        return (rank in self._with_loss, _is_main(rank), -(rank or 0))

    def _follows(self, rank: int | None) -> bool:
        if not self._has_leader:
            self._leader, self._has_leader = rank, True
            return True
        if rank == self._leader:
            return True
        if self._rank_order(rank) > self._rank_order(self._leader):
            # A better stream shows up (rank 0 often starts printing last): follow it from now on.
            self._leader = rank
            self._steps.clear()
            return True
        return False

    def _apply(self, event: ProgressEvent, rank: int | None, now: float, written_by: float | None) -> None:
        state = self._state
        step = event.step if event.step is not None else state.step
        total = event.total if event.total is not None else state.total
        if event.step is not None:
            if self._steps and event.step < self._steps[-1][1]:
                self._steps.clear()  # a new tqdm bar or a restart: the old rate no longer applies
            elif self._steps and now - self._steps[-1][0] < BACKLOG_GAP_S and event.step != self._steps[-1][1]:
                # Steps read in one go (a log opened mid-run): when they were written is unknown,
                # so the rate starts from the lines that come live.
                self._steps.clear()
            self._steps.append((now, event.step))
        if event.loss is not None and not self._repeats_last_loss(event, step):
            self._losses.append(event.loss)
            self._loss_step = step
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
            written_by=written_by,
        )

    def _repeats_last_loss(self, event: ProgressEvent, step: int | None) -> bool:
        # Scripts often print a step twice ("step 5 loss 2.1" and a {'loss': 2.1, ...} dict):
        # the sparkline gets one point per step.
        if event.step is not None or not self._losses or step is None or step != self._loss_step:
            return False
        assert event.loss is not None  # asked only about an event with a loss
        last = self._losses[-1]
        return last == event.loss or (math.isnan(last) and math.isnan(event.loss))

    def steps_per_s(self) -> float | None:
        """Steps a second over the recent steps seen live; None until two were."""
        if len(self._steps) >= 2:
            (t0, s0), (t1, s1) = self._steps[0], self._steps[-1]
            if t1 > t0 and s1 > s0:
                return (s1 - s0) / (t1 - t0)
        return None

    def _eta(self, step: int | None, total: int | None, throughput: float | None, unit: str | None) -> float | None:
        if step is None or not total or step >= total:
            return None
        remaining = total - step
        if (rate := self.steps_per_s()) is not None:
            return remaining / rate
        if unit == "it/s" and throughput and math.isfinite(throughput):
            return remaining / throughput
        return None

    def _written_by(self, file: str | None, now: float) -> float | None:
        """When ``file`` was last written (its lines were written by then); None when unknown."""
        if file is None:
            return None
        looked, written = self._written.get(file, (None, None))
        if looked is None or now - looked >= WRITTEN_CHECK_S:
            try:
                written = os.stat(file).st_mtime
            except OSError:
                written = None
            self._written[file] = (now, written)
        return written
