"""One line of training progress: step, epoch, loss with its sparkline, throughput, ETA; NaN loudly."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from rich.text import Text
from textual.widget import Widget

from monitor.progress import ProgressState
from monitor.tui import text_format as fmt

# An ETA is a forecast from the last progress line: after this long without one (a crash, a
# hang, a killed job) it is no longer shown, and the panel says how long progress has stopped.
STALE_S = 60.0
# The loss sparkline's width: what the row leaves, within these.
MIN_SPARK, MAX_SPARK = 8, 60
# Cells kept for the scale after it (" 0.0741–6.2").
SCALE_ROOM = 13


class ProgressPanel(Widget):
    DEFAULT_CSS = """
    ProgressPanel { height: auto; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = ProgressState()
        self.ended = False  # the job has ended: nothing is left to forecast
        self._clock = clock
        self._wall_clock = wall_clock
        self._updated = clock()

    def on_mount(self) -> None:
        self.set_interval(5.0, self._age)

    def show(self, state: ProgressState) -> None:
        grows = state.nonfinite_seen != self.state.nonfinite_seen
        self.state = state
        self._updated = self._clock()
        self.refresh(layout=grows)

    def end(self) -> None:
        self.ended = True
        self.refresh()

    def _age(self) -> None:
        """Redraw while an ETA is stale, so "no progress for ..." counts up."""
        if self.state.eta_seconds is not None and self._stalled_for() is not None:
            self.refresh()

    def _stalled_for(self) -> float | None:
        # Since the last progress line was shown, or written, if its log says earlier (an old log
        # read today has made no progress for days, not since it was opened).
        idle = self._clock() - self._updated
        if self.state.written_by is not None:
            idle = max(idle, self._wall_clock() - self.state.written_by)
        return idle if idle >= STALE_S else None

    @staticmethod
    def _loss_history(losses: tuple[float, ...], room: int) -> Text:
        """The recent losses as a sparkline as wide as the row allows, with its scale (the lowest and
        highest finite loss drawn): a sparkline alone cannot tell 2.1->2.0 from 9->0.1."""
        spark_width = max(MIN_SPARK, min(MAX_SPARK, room - SCALE_ROOM, len(losses)))
        drawn = losses[-spark_width:]
        finite = [x for x in drawn if math.isfinite(x)]
        text = Text(" " + fmt.sparkline(drawn, spark_width), style="cyan")
        if len(finite) > 1 and room >= spark_width + SCALE_ROOM:
            text.append(f" {min(finite):.3g}–{max(finite):.3g}", style="dim")
        return text

    def get_content_height(self, container, viewport, width: int) -> int:
        return 2 if self.state.nonfinite_seen else 1

    def render(self) -> Text:
        state = self.state
        width = max(self.size.width, 40)
        row = Text("train  ", style="bold")
        if not state.known:
            row.append("no progress lines seen yet (step/loss/it/s)", style="dim")
        else:
            if state.step is not None:
                row.append(f"step {state.step}")
                if state.total:
                    row.append(f"/{state.total} ({100 * state.step / state.total:.0f}%)")
            if state.epoch is not None:
                row.append(f"  epoch {state.epoch:g}")
            tail = Text()
            if state.throughput is not None:
                tail.append(f"  {state.throughput:.3g} {state.throughput_unit}")
            if state.eta_seconds is not None and not self.ended:
                if (stalled := self._stalled_for()) is not None:
                    tail.append(f"  no progress for {fmt.duration(stalled)}", style="yellow")
                else:
                    tail.append(f"  ETA {fmt.duration(state.eta_seconds)}")
            if state.loss is not None:
                bad = not math.isfinite(state.loss)
                row.append("  loss ")
                row.append(f"{state.loss:.4g}", style="bold red" if bad else "bold")
                row.append_text(self._loss_history(state.losses, width - len(row) - len(tail) - 2))
            row.append_text(tail)
        if state.nonfinite_seen:
            where = f" at step {state.nonfinite_step}" if state.nonfinite_step is not None else ""
            rank = f" on rank {state.nonfinite_rank}" if state.nonfinite_rank is not None else ""
            row.append("\n")
            row.append(f"       loss became non-finite (NaN/inf){where}{rank}", style="bold white on red")
        return row
