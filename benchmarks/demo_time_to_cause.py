"""How long `monitor demo` takes, at 80x24 and its default speed, to show the root cause, its rank
and where to start (the README's "within 10 s"): the bundled recording replayed through the real
pipeline into the real app (headless, ``App.run_test``), as tests/test_second_hour_g_demo.py does.

    python benchmarks/demo_time_to_cause.py [--runs 5]

Per run: when the replay wrote the root cause's exception line (the recording's pacing, the same
every run) and when the screen showed it; the difference is the pipeline's lag (reading, the
diagnosis, the screen's gather and redraw), which a loaded machine stretches. The load average is
printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from monitor.demo.replay import Replayer, load_recording  # noqa: E402
from monitor.diagnosis.catalogue import load_catalogue  # noqa: E402
from monitor.tui import demo_app  # noqa: E402

SIZE = (80, 24)
SPEED = 2.0  # `monitor demo`'s default
SHOWN = ("ROOT CAUSE  ValueError on rank 2", "start there")


def due_s(replayer: Replayer) -> float:
    """When (seconds after the start, at the replay's speed) the root cause's exception line is written."""
    due = replayer.written_at("[rank2]: ValueError")
    if due is None:
        raise SystemExit("the bundled recording has no rank 2 ValueError line")
    return due


async def one_run(target: str) -> tuple[float, float]:
    replayer = Replayer(load_recording(), target, speed=SPEED)
    app = demo_app(replayer, catalogue=load_catalogue())
    started = time.monotonic()
    replayer.start()
    try:
        async with app.run_test(size=SIZE) as pilot:
            while time.monotonic() - started < 60:
                await pilot.pause(0.05)
                text = "\n".join(strip.text for strip in app.screen._compositor.render_strips())
                if all(words in text for words in SHOWN):
                    return due_s(replayer), time.monotonic() - started
            raise SystemExit("the root cause was not shown within 60 s")
    finally:
        replayer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ["TZ"] = "UTC"
    shown, lags = [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory() as target:
            due, took = asyncio.run(one_run(target))
        shown.append(took)
        lags.append(took - due)
        print(f"run {run + 1}: exception line written at {due:.2f} s, shown at {took:.2f} s (lag {took - due:.2f} s), "
              f"load {os.getloadavg()[0]:.1f}")
    print(f"median: shown at {statistics.median(shown):.2f} s, lag {statistics.median(lags):.2f} s; "
          f"worst {max(shown):.2f} s")


if __name__ == "__main__":
    main()
