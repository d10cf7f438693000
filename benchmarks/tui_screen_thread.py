"""CPU of the screen's thread alone while the log view follows a busy job (no files read).

    python benchmarks/tui_screen_thread.py [--rate 1000] [--seconds 15] [--size 200x50]

``MonitorApp`` under ``App.run_test`` (headless: composed and drawn, not written to a terminal)
follows a feed that makes the lines of 8 ranks at ``--rate`` lines/s in memory, so the reading
and the diagnosis cost nothing here: what is measured is the event loop's thread (applying the
batches, the compositor drawing them), from /proc, over ``--seconds`` after 2 s of start-up.
`watch_terminal.py` measures the whole of `monitor watch` in a real terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time

from monitor.model import LogLine
from monitor.session.feeds import LogBatch
from monitor.tui.app import MonitorApp


class MadeLines:
    """A LogFeed whose lines are made as the clock goes: ``rate`` a second, 8 ranks in turn."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.made = 0
        self.began = time.monotonic()

    def poll(self, timeout: float) -> LogBatch:
        time.sleep(min(timeout, 0.005))  # a write every few ms, as the ranks of a job
        due = int((time.monotonic() - self.began) * self.rate)
        lines = []
        while self.made < due:
            rank, step = self.made % 8, self.made // 8
            text = f"step {step}/100000 loss {2.5 - step * 1e-4:.4f} lr 1.0e-04 {random.randint(900, 1100)} tokens/s"
            lines.append(LogLine(f"logs/rank{rank}.log", step + 1, text, rank))
            self.made += 1
        return LogBatch(lines=lines)

    def diagnosis(self):
        return None

    def close(self) -> None:
        pass


def thread_cpu() -> float:
    """User + system seconds of this process's main thread (the event loop's)."""
    fields = open(f"/proc/self/task/{os.getpid()}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(rate: float, seconds: float, size: tuple[int, int]) -> float:
    app = MonitorApp(MadeLines(rate))
    async with app.run_test(size=size) as pilot:
        await pilot.pause(2.0)
        cpu0, wall0 = thread_cpu(), time.monotonic()
        await asyncio.sleep(seconds)
        return (thread_cpu() - cpu0) / (time.monotonic() - wall0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--size", default="200x50")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    share = asyncio.run(measure(args.rate, args.seconds, (width, height)))
    print(f"{args.rate:.0f} lines/s, {width}x{height}: the screen's thread {100 * share:.1f}% of one core")


if __name__ == "__main__":
    main()
