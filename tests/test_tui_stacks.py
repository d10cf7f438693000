"""The stacks screen driven through Pilot: `s` takes the ranks' stacks and shows them side by
side, the odd rank's column first and marked; without a job it says how to get them."""

from __future__ import annotations

from monitor.stacks import compare
from monitor.tui.stacks_screen import StacksScreen
from tests.test_stacks import TRAIN, _capture, _rank, _waiting
from tests.test_tui_app import make_app, settle


class ProbeWithOneCapture:
    """Stands in for the session's HangProbe: a capture of 4 ranks, rank 2 stuck; counts requests."""

    def __init__(self) -> None:
        stuck = _rank(2, ("load_batch", TRAIN, 88), ("train_step", TRAIN, 110), ("main", TRAIN, 200))
        capture = _capture(_waiting(0), _waiting(1), stuck, _waiting(3))
        self.latest = (capture, compare.analyse(capture))
        self.captures = 1
        self.requests: list[str] = []

    def trigger(self, reason: str) -> bool:
        self.requests.append(reason)
        return True

    def busy(self) -> bool:
        return False


def _text(widget) -> str:
    return str(widget.render())


async def test_s_takes_the_stacks_and_shows_the_odd_rank_first_and_marked():
    probe = ProbeWithOneCapture()
    app = make_app(probe=probe)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("s")
        await pilot.pause(0.1)
        assert isinstance(app.screen, StacksScreen) and probe.requests == ["request"]
        summary = _text(app.screen.query_one("#stacks-summary"))
        assert "rank 2 is in load_batch (train.py:88) while ranks 0,1,3 wait in all_reduce" in summary
        columns = list(app.screen.query(".stack-column"))
        assert len(columns) == 2
        assert columns[0].has_class("-odd") and not columns[1].has_class("-odd")
        first = _text(columns[0].query_one("Static"))
        assert first.startswith("rank 2  is in load_batch (train.py:88)") and "> load_batch  train.py:88" in first
        assert "ranks 0,1,3  wait in all_reduce" in _text(columns[1].query_one("Static"))
        await pilot.press("s")
        assert probe.requests == ["request", "request"]
        await pilot.press("escape")
        assert not isinstance(app.screen, StacksScreen)


async def test_without_a_job_s_says_how_to_get_stacks():
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 1)
        await pilot.press("s")
        await pilot.pause()
        assert not isinstance(app.screen, StacksScreen)
        assert "monitor stacks --pid PID" in str(app.query_one("#message").render())
