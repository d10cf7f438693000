"""A user's second hour (issue 31), the screen's items: keys typed into the find box, scrolling
sideways, the detail pane's scroll, less's keys, a stall's end worded by what came back, and the
root cause of a big log outside the loaded lines. At 80x24, as the walk-through used it."""

from __future__ import annotations

import pytest
from textual import events

from monitor.session.feeds import LogBatch
from monitor.tui.app import MonitorApp
from monitor.tui.log_view import LogView
from tests.tui_helpers import FixedMetricsFeed, ScriptedLogFeed, crash_feed, crash_lines, host_sample
from tests.zone_helpers import in_time_zone

SIZE = (80, 24)


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    yield from in_time_zone(monkeypatch, "UTC")


def make_app(feed=None, **kwargs) -> MonitorApp:
    return MonitorApp(feed or crash_feed(), FixedMetricsFeed(host_sample()), clock=lambda: 0.0, **kwargs)


async def settle(pilot, app, lines: int) -> None:
    """Wait until the app holds ``lines`` lines (the feed runs in a worker thread)."""
    for _ in range(200):
        await pilot.pause(0.02)
        if len(app.store) >= lines:
            await pilot.pause()
            return
    raise AssertionError(f"only {len(app.store)} of {lines} lines arrived")


def burst(app, keys: str) -> None:
    """Keys as a terminal delivers a paste or tmux send-keys: all at once, none waited for."""
    names = {"/": "slash", " ": "space"}
    for char in keys:
        event = events.Key(names.get(char, char), char)
        event.set_sender(app)
        app._driver.send_message(event)


# ----- item 3: "/" in the find box, and in a burst in the filter box
async def test_a_slash_is_text_in_the_find_box_and_stays_in_place_in_a_burst():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, len(crash_lines()))
        view = app.query_one(LogView)
        await pilot.press("f", *"tcp/pair")
        find_input = app.query_one("#find-input")
        assert find_input.value == "tcp/pair"
        assert not app.query_one("#filter-input").display and not view.line_filter.active
        await pilot.press("enter")
        assert view.find_text == "tcp/pair" and "tcp/pair" in app.store.text(view.cursor_index)
        burst(app, "/a/b/c")
        await pilot.pause(0.2)
        assert app.query_one("#filter-input").value == "a/b/c"
        assert view.line_filter.pattern == "a/b/c"


# ----- item 5: each finding's detail opens at its top
async def test_the_next_finding_opens_at_what_to_do_not_where_the_last_was_scrolled():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, len(crash_lines()))
        detail = app.query_one("#finding-detail")
        await pilot.press("c", "d", "pagedown", "pagedown")
        await pilot.pause()
        assert detail.scroll_y > 0
        await pilot.press("escape", "n")  # the next finding
        await pilot.pause()
        assert detail.scroll_y == 0
        await pilot.press("d", "pagedown", "escape")
        await pilot.pause()
        scrolled = detail.scroll_y
        assert scrolled > 0
        # The same finding redrawn (its count grew) keeps the place the user scrolled to.
        app.query_one("#findings").show(app.query_one("#findings").findings, app._root)
        await pilot.pause()
        assert detail.scroll_y == scrolled
