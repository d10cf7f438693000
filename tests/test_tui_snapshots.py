"""Snapshots of the main screen at 80x24 and 200x50, on fixed data (no clocks, no live metrics).

Review changes with ``pytest tests/test_tui_snapshots.py --snapshot-update`` and the HTML report.
"""

from __future__ import annotations

import pytest

from monitor.tui.app import MonitorApp
from tests.tui_helpers import FixedMetricsFeed, crash_feed, host_sample
from tests.zone_helpers import in_time_zone


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    yield from in_time_zone(monkeypatch, "UTC")


def crash_app(with_gpus: bool) -> MonitorApp:
    # One metrics sample only (the next would come in an hour): the sparklines do not depend on timing.
    return MonitorApp(
        crash_feed(), FixedMetricsFeed(host_sample(with_gpus=with_gpus)), title="watching logs/",
        metrics_interval=3600, clock=lambda: 0.0,
    )


async def until_finished(pilot) -> None:
    app = pilot.app
    for _ in range(200):
        await pilot.pause(0.02)
        if app.finished_note and app.metrics_feed.calls:
            break
    await pilot.pause(0.1)


def test_main_screen_80x24(snap_compare):
    assert snap_compare(crash_app(with_gpus=False), terminal_size=(80, 24), run_before=until_finished)


def test_main_screen_200x50_with_gpus(snap_compare):
    assert snap_compare(crash_app(with_gpus=True), terminal_size=(200, 50), run_before=until_finished)


def test_filtered_by_rank_and_errors_120x40(snap_compare):
    async def filtered(pilot) -> None:
        await until_finished(pilot)
        await pilot.press("end", "r", "r", "r", "e")
        await pilot.pause(0.05)

    assert snap_compare(crash_app(with_gpus=False), terminal_size=(120, 40), run_before=filtered)


def test_light_theme_100x30(snap_compare):
    async def light(pilot) -> None:
        await until_finished(pilot)
        await pilot.press("t")
        await pilot.pause(0.05)

    assert snap_compare(crash_app(with_gpus=True), terminal_size=(100, 30), run_before=light)
