"""The screen's memory is bounded: it keeps the newest lines, a paused view stays on its lines
as older ones go, and a screen that falls behind skips drawing, never the findings."""

from __future__ import annotations

from monitor.model import LogLine
from monitor.session.feeds import LogBatch
from monitor.tui.app import MAX_PENDING_LINES
from monitor.tui.log_store import LogStore
from monitor.tui.log_view import LogView
from tests.test_tui_app import make_app, settle, shown_text
from tests.tui_helpers import ScriptedLogFeed, crash_findings


def _lines(start: int, count: int) -> list[LogLine]:
    return [LogLine("job.log", n + 1, f"[rank{n % 2}]: line {n}", n % 2) for n in range(start, start + count)]


async def test_a_paused_view_keeps_its_lines_as_older_ones_are_dropped():
    feed = ScriptedLogFeed([LogBatch(lines=_lines(0, 900))])
    app = make_app(feed)
    app.store = LogStore(max_lines=1000, max_bytes=1 << 20)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 900)
        view = app.query_one(LogView)
        await pilot.press("home")  # paused, at the top: line 0
        await pilot.pause()
        view.scroll_to(y=500, animate=False)
        await pilot.pause()
        before = shown_text(view)[0]
        assert "line 500" in before
        feed.batches.put(LogBatch(lines=_lines(900, 600)))  # 1500 in all: the oldest go
        await settle(pilot, app, 1500)
        await pilot.pause(0.1)
        assert app.store.first > 0
        assert shown_text(view)[0] == before  # the same line on top
        status = str(app.query_one("#log-status").render())
        assert "1,500 lines" in status and f"the newest {1500 - app.store.first:,} kept" in status


async def test_a_screen_behind_by_more_than_it_keeps_skips_drawing_not_findings():
    findings, root = crash_findings()
    feed = ScriptedLogFeed([LogBatch(lines=_lines(0, MAX_PENDING_LINES + 3000), findings=findings, root_cause=root)])
    app = make_app(feed)
    app.store = LogStore(max_lines=1000, max_bytes=1 << 20)
    async with app.run_test(size=(120, 40)) as pilot:
        total = MAX_PENDING_LINES + 3000
        await settle(pilot, app, total)
        assert app.store.first >= total - 1000 and app.store.text(total - 1) == f"[rank1]: line {total - 1}"
        assert app._root is root and len(app._findings) == len(findings)
