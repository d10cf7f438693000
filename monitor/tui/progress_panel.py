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


class ProgressPanel(Widget):
    DEFAULT_CSS = """
    ProgressPanel { height: auto; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = ProgressState()
        self.ended = False  # the job has ended: nothing is left to forecast
        self._clock = clock
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
        idle = self._clock() - self._updated
        return idle if idle >= STALE_S else None

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
            if state.loss is not None:
                bad = not math.isfinite(state.loss)
                row.append("  loss ")
                row.append(f"{state.loss:.4g}", style="bold red" if bad else "bold")
                spark_width = 16 if width >= 100 else 8
                row.append(" " + fmt.sparkline(state.losses, spark_width), style="cyan")
            if state.throughput is not None:
                row.append(f"  {state.throughput:.3g} {state.throughput_unit}")
            if state.eta_seconds is not None and not self.ended:
                if (stalled := self._stalled_for()) is not None:
                    row.append(f"  no progress for {fmt.duration(stalled)}", style="yellow")
                else:
                    row.append(f"  ETA {fmt.duration(state.eta_seconds)}")
        if state.nonfinite_seen:
            where = f" at step {state.nonfinite_step}" if state.nonfinite_step is not None else ""
            rank = f" on rank {state.nonfinite_rank}" if state.nonfinite_rank is not None else ""
            row.append("\n")
            row.append(f"       loss became non-finite (NaN/inf){where}{rank}", style="bold white on red")
        return row
