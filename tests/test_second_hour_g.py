"""A user's second hour (issue 31), the screen's follow mode: `y` copies what the user sees, and
a resized screen that says "following" shows the newest lines. At 80x24, as the walk-through used it."""

from __future__ import annotations

import pytest

from monitor.model import LogLine
from monitor.session.feeds import LogBatch
from monitor.tui.app import MonitorApp
from monitor.tui.log_view import LogView
from tests.tui_helpers import FixedMetricsFeed, ScriptedLogFeed, host_sample, settle
from tests.zone_helpers import in_time_zone

SIZE = (80, 24)
LINES = 300


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    yield from in_time_zone(monkeypatch, "UTC")


def long_job() -> ScriptedLogFeed:
    """Four ranks' steps, one File line early on (what the walk-through's find landed on)."""
    lines = [LogLine(f"logs/rank{n % 4}.log", n // 4 + 1,
                     f"[rank{n % 4}]: " + ('  File "/home/alice/llm/train.py", line 412, in <module>' if n == 40
                                           else f"step {n} loss 1.{n:03d}"), n % 4)
             for n in range(LINES)]
    return ScriptedLogFeed([LogBatch(lines=lines)])


def make_app(feed) -> MonitorApp:
    return MonitorApp(feed, FixedMetricsFeed(host_sample()), clock=lambda: 0.0)



def on_screen(app) -> list[str]:
    """The log's rows as drawn: the screen's text, not the store's."""
    view = app.query_one(LogView)
    return [view.render_line(y).text.rstrip() for y in range(view.scrollable_content_region.height)]


def last_toast(app) -> str:
    """What the app last answered a key with, on its message line (in the footer's place)."""
    return str(app.query_one("#message").render())


# ----- item 8: `y` in follow mode, and a resize while following
async def test_y_while_following_copies_the_last_line_in_view_and_says_so():
    app = make_app(long_job())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, LINES)
        await pilot.press("f", *"train", "enter")  # the cursor goes to the File line, far above the end
        assert app.query_one(LogView).cursor_index == 40
        await pilot.press("end")
        await pilot.pause()
        assert app.query_one(LogView).follow
        await pilot.press("y")
        await pilot.pause()
        shown = [row for row in on_screen(app) if row.strip()]
        assert app._clipboard == f"[rank3]: step {LINES - 1} loss 1.{LINES - 1:03d}"
        assert shown[-1].endswith(app._clipboard)
        assert "train.py" not in app._clipboard
        assert "last line in view" in last_toast(app)


async def test_y_copies_the_selected_line_when_it_is_in_view_and_says_so():
    app = make_app(long_job())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, LINES)
        await pilot.press("f", *"train", "enter")
        await pilot.press("y")
        await pilot.pause()
        assert "train.py" in app._clipboard
        assert any(row.endswith(app._clipboard) for row in on_screen(app))
        assert "the selected line (logs/rank0.log:11," in last_toast(app)


async def test_y_when_scrolled_away_from_the_selected_line_copies_the_last_line_in_view():
    app = make_app(long_job())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, LINES)
        await pilot.press("f", *"train", "enter")
        await pilot.press("ctrl+f", "ctrl+f", "ctrl+f")  # paged down, the selected line off screen
        await pilot.press("y")
        await pilot.pause()
        shown = [row for row in on_screen(app) if row.strip()]
        assert "train.py" not in app._clipboard
        assert shown[-1].endswith(app._clipboard)
        assert "last line in view" in last_toast(app)


async def test_a_resize_while_following_shows_the_newest_lines():
    app = make_app(long_job())
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, app, LINES)
        view = app.query_one(LogView)
        assert view.follow
        await pilot.resize_terminal(*SIZE)
        await pilot.pause()
        await pilot.pause()
        assert view.follow
        shown = [row for row in on_screen(app) if row.strip()]
        assert shown[-1].endswith(f"step {LINES - 1} loss 1.{LINES - 1:03d}")
