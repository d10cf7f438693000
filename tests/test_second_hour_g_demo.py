"""A user's second hour (issue 31, item 12): `monitor demo` at 80x24 shows the cause, its rank
and the first actionable line of what to do within 10 s of its start, without scrolling; the
other findings' titles read; no toast covers the top rows as the root cause comes. The real
bundled recording at the default speed, through the real pipeline."""

from __future__ import annotations

import time

import pytest

from monitor.demo.replay import Replayer, load_recording
from monitor.diagnosis.catalogue import load_catalogue
from monitor.tui import demo_app
from tests.zone_helpers import in_time_zone

SIZE = (80, 24)
DEFAULT_SPEED = 2.0


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    yield from in_time_zone(monkeypatch, "UTC")


def screen_rows(app) -> list[str]:
    """The screen as the terminal shows it: what lies under a toast is hidden by it."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def test_the_demo_shows_cause_rank_and_where_to_start_within_10_s_at_80x24(tmp_path):
    replayer = Replayer(load_recording(), tmp_path, speed=DEFAULT_SPEED)
    app = demo_app(replayer, catalogue=load_catalogue())
    started = time.monotonic()
    replayer.start()
    try:
        async with app.run_test(size=SIZE) as pilot:
            shown = False
            while not shown and time.monotonic() - started < 20:
                await pilot.pause(0.1)
                text = "\n".join(screen_rows(app))
                shown = "ROOT CAUSE  ValueError on rank 2" in text and "start there" in text
            took = time.monotonic() - started
            assert shown, "\n".join(screen_rows(app))
            # Within 10 s: the replay writes the exception line before 8 s (its pacing, the same
            # every run), leaving the pipeline 2 s; that lag is measured, with the load, by
            # benchmarks/demo_time_to_cause.py (0.3-0.6 s idle). Here only a lag no load explains.
            due = exception_line_due(replayer)
            assert due <= 8.0, f"the replay writes the root cause's line at {due:.1f} s"
            assert took - due <= 5.0, f"cause, rank and remedy shown {took - due:.1f} s after their line"
            # The raise site (its long path broken after a folder: the file and line whole) and
            # "start there", in view.
            detail = [row.split("│")[-1] for row in text.splitlines()]
            assert any("monitor/demo/train.py:125 in" in row for row in detail), text
            assert any("start there" in row for row in detail), text
            # The findings' titles read well past their first 30 characters, cut at a word (the
            # severity is the mark, the ranks are in the detail).
            assert await titles_read(pilot, app)
            # Up to the end of the replay, no toast covers the top rows (the job and train rows).
            while not replayer.done.is_set() and time.monotonic() - started < 30:
                await pilot.pause(0.2)
            await pilot.pause(1.0)
            assert not list(app._notifications), [n.message for n in app._notifications]
    finally:
        replayer.stop()


def exception_line_due(replayer: Replayer) -> float:
    """Seconds after the start at which the replay writes rank 2's exception line (there is one)."""
    due = replayer.written_at("[rank2]: ValueError")
    assert due is not None
    return due


async def titles_read(pilot, app) -> bool:
    for _ in range(50):
        text = "\n".join(screen_rows(app))
        if "Gloo lost its connection to" in text:
            assert "torchrun: local rank 2 exited with…" in text and "torchrun: monitor.demo.train failed" in text, text
            return True
        await pilot.pause(0.2)
    raise AssertionError("\n".join(screen_rows(app)))
