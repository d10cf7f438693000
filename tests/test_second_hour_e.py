"""A user's second hour (issue 31), the screen's items: keys typed into the find box, scrolling
sideways, the detail pane's scroll, less's keys, a stall's end worded by what came back, and the
root cause of a big log outside the loaded lines. At 80x24, as the walk-through used it."""

from __future__ import annotations

import io
import os
import shlex
import shutil
import sys
import time

import pytest
from rich.console import Console
from textual import events

from monitor.session.feeds import LogBatch
from monitor.tui.app import MonitorApp
from monitor.tui.log_view import LogView
from tests.clock_helpers import FakeClock
from tests.tui_helpers import FixedMetricsFeed, ScriptedLogFeed, crash_feed, crash_lines, host_sample, settle, until
from tests.zone_helpers import in_time_zone
from tests.tmux_helpers import Terminal

SIZE = (80, 24)


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    yield from in_time_zone(monkeypatch, "UTC")


def make_app(feed=None, **kwargs) -> MonitorApp:
    return MonitorApp(feed or crash_feed(), FixedMetricsFeed(host_sample()), clock=lambda: 0.0, **kwargs)



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
        await until(pilot, lambda: view.line_filter.pattern == "a/b/c", "the burst's filter")
        assert app.query_one("#filter-input").value == "a/b/c"


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


# ----- item 13: less's keys
def numbered_lines(count: int, file: str = "logs/rank0.log") -> list:
    from monitor.model import LogLine

    return [LogLine(file, n, f"[rank0]: step {n} loss 1.0" + (" Watchdog caught" if n % 50 == 0 else ""), 0)
            for n in range(1, count + 1)]


async def test_less_keys_move_through_the_log():
    lines = numbered_lines(300)
    app = make_app(ScriptedLogFeed([LogBatch(lines=lines)]))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 300)
        view = app.query_one(LogView)
        bottom = view.max_scroll_y
        assert view.follow and view.scroll_y == bottom
        await pilot.press("g")
        assert not view.follow and view.scroll_y == 0
        await pilot.press("j", "j")
        assert view.scroll_y == 2
        await pilot.press("k")
        assert view.scroll_y == 1
        await pilot.press("ctrl+f")
        page = view.scroll_y - 1
        assert page >= view.scrollable_content_region.height - 1
        await pilot.press("ctrl+b")
        assert view.scroll_y == 1
        await pilot.press("G")
        assert view.follow and view.scroll_y == bottom


async def test_n_is_the_next_match_while_a_find_is_active_and_find_is_smart_case():
    lines = numbered_lines(300)
    app = make_app(ScriptedLogFeed([LogBatch(lines=lines)]))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, 300)
        view = app.query_one(LogView)
        await pilot.press("f", *"watchdog", "enter")  # lower case: any case, as less -i / lnav
        matches = [i for i in range(len(app.store)) if "Watchdog" in app.store.text(i)]
        assert view.cursor_index == matches[0]
        await pilot.press("n", "n")
        assert view.cursor_index == matches[2]
        await pilot.press("N")
        assert view.cursor_index == matches[1]
        await pilot.press("f", *"WATCHDOG", "enter")  # a capital letter: exact case
        assert "(none)" in str(app.query_one("#log-status").render())
        await pilot.press("escape")
        assert not view.find_text


async def test_help_says_which_keys_differ_from_less():
    from monitor.tui.screens import HelpScreen

    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, len(crash_lines()))
        await pilot.press("question_mark")
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        console = Console(width=200, record=True, file=io.StringIO())
        for static in help_screen.query("Static"):
            console.print(static.content)
        text = console.export_text()
        for keys in ("G / g", "j / k", "ctrl+f / ctrl+b"):
            assert keys in text
        assert "Unlike less" in text
        for differs in ("/ filters", "f finds", "space pauses", "n / N", "q quits"):
            assert differs in text, differs


# ----- item 4: the gutter and the rank badges stay while scrolled sideways
def wide_lines() -> list:
    from monitor.model import LogLine

    lines = [LogLine(f"logs/rank{n % 2}.log", n // 2 + 1, f"[rank{n % 2}]: step {n} " + "x" * 150, n % 2)
             for n in range(30)]
    lines.append(LogLine("logs/rank1.log", 16, "[rank1]: " + "y" * 200 + " needle at the far right", 1))
    return lines


async def test_sideways_scroll_keeps_the_badges_and_esc_home_end_bring_it_back():
    lines = wide_lines()
    app = make_app(ScriptedLogFeed([LogBatch(lines=lines)]))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, len(lines))
        view = app.query_one(LogView)
        await pilot.press("f", *"needle", "enter")
        assert view.scroll_x > 0
        row = view.row_of(view.cursor_index) - int(view.scroll_offset.y)
        shown = view.render_line(row).text
        assert shown.startswith(" r1 ") and "needle" in shown  # pinned as lnav does, the match in view
        for y in range(view.scrollable_content_region.height):
            assert view.render_line(y).text[1:3] in ("r0", "r1")
        await pilot.press("escape")  # the find cleared: back to the start of the lines
        assert view.scroll_x == 0 and not view.find_text
        await pilot.press("right", "right", "right")
        assert view.scroll_x > 0 and view.render_line(0).text[1:3] in ("r0", "r1")
        await pilot.press("end")
        assert view.scroll_x == 0 and view.follow
        await pilot.press("right", "right", "home")
        assert view.scroll_x == 0 and view.scroll_y == 0
        await pilot.press("right", "escape")  # Esc with nothing else to clear
        assert view.scroll_x == 0


# ----- item 1: c and Enter on a root cause before the lines loaded of a big log
def big_log_with_early_root(path, filler: int) -> int:
    """A log over ATTACH_BYTES whose root cause (an OOM) lies near its start; returns its line."""
    with open(path, "w") as handle:
        for i in range(100):
            handle.write(f"[rank{i % 4}]: step {i // 4} loss 1.0 lr 3e-4 grad_norm 0.91 tokens/s 12345\n")
        handle.write("[rank2]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 2 has a "
                     "total capacity of 79.11 GiB of which 1.19 GiB is free.\n")
        for i in range(filler):
            handle.write(f"[rank{i % 4}]: eval batch {i} of the held-out set, nothing wrong here at all\n")
    return 101


async def wait_for(pilot, condition, what: str) -> None:
    for _ in range(200):
        await pilot.pause(0.05)
        if condition():
            return
    raise AssertionError(f"never happened: {what}")


async def test_c_on_a_root_cause_before_the_loaded_lines_reads_them_back_and_jumps_there(tmp_path):
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.session import job_session
    from monitor.tui import watch_app

    log = tmp_path / "train.log"
    root_line = big_log_with_early_root(log, 150_000)  # ~11 MB: the screen gets only the tail
    assert log.stat().st_size >= 10 << 20
    app = watch_app([log], catalogue=load_catalogue(include_user=False), bell=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, job_session.ATTACH_TAIL_LINES)
        await wait_for(pilot, lambda: app._root is not None, "the root cause")
        assert app._root.file == str(log) and app._root.line == root_line
        assert app.store.find(str(log), root_line) is None  # not among the lines loaded
        view = app.query_one(LogView)
        await pilot.press("c")
        await wait_for(pilot, lambda: app.store.find(str(log), root_line) is not None, "the root's line read back")
        await pilot.pause(0.1)
        root_index = app.store.find(str(log), root_line)
        assert view.cursor_index == root_index and view.marks[root_index] == "root"
        assert "OutOfMemoryError" in view.render_line(view.row_of(root_index) - int(view.scroll_offset.y)).text
        numbers = [app.store.line(i).line for i in range(app.store.first, len(app.store))]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)  # in file order, none twice
        assert numbers[0] == 1 and numbers[-1] == root_line + 150_000  # the lines before it, and the tail kept
        # The lines between the two are said to be in the file only (not silently skipped).
        status = str(app.query_one("#log-status").render())
        assert "not loaded" in status
        # L goes on from before what was read back: here nothing is left before line 1.
        await pilot.press("L")
        await pilot.pause(0.3)
        assert app.store.line(app.store.first).line == 1


async def test_enter_on_a_root_cause_before_the_loaded_lines_jumps_there_too(tmp_path):
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.session import job_session
    from monitor.tui import watch_app

    log = tmp_path / "train.log"
    with open(log, "w") as handle:  # the root far from both ends: lines read back on either side
        for i in range(60_000):
            handle.write(f"[rank{i % 4}]: step {i // 4} loss 1.0 lr 3e-4 grad_norm 0.91 tokens/s 12345\n")
    root_line = 60_000 + big_log_with_early_root(tmp_path / "part", 100_000)
    with open(log, "a") as handle, open(tmp_path / "part") as part:
        handle.write(part.read())
    app = watch_app([log], catalogue=load_catalogue(include_user=False), bell=False)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, job_session.ATTACH_TAIL_LINES)
        await wait_for(pilot, lambda: app._root is not None, "the root cause")
        app.query_one("#finding-table").focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.store.find(str(log), root_line) is not None, "the root's line read back")
        await pilot.pause(0.1)
        view = app.query_one(LogView)
        assert view.cursor_index == app.store.find(str(log), root_line)
        numbers = [app.store.line(i).line for i in range(app.store.first, len(app.store))]
        assert numbers[0] < root_line < numbers[-1] and numbers.index(root_line) + 1 < numbers.index(root_line + 1) + 1
        assert root_line + 1 in numbers  # what came just after it, too


# ----- item 14: a stall's end worded by what came back
def stalled_session(tmp_path):
    """A 4-rank job in one file that trained, then went silent past the threshold."""
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.session.job_session import JobSession

    log = tmp_path / "job.log"
    log.touch()
    clock = FakeClock(wall=5000.0)
    session = JobSession([str(log)], load_catalogue(include_user=False), stall_after=0.8, clock=clock)
    for index in range(5):
        with open(log, "a") as handle:
            handle.write("".join(f"[rank{r}]: step {index} loss=0.5\n" for r in range(4)))
        clock.advance(0.03)
        session.step(timeout=0)
    clock.advance(1.0)
    assert any(f.rule == "possible-hang" for f in session.step(timeout=0).new_findings)
    return log, clock, session


def resumed_with(tmp_path, *lines: str):
    log, clock, session = stalled_session(tmp_path)
    with open(log, "a") as handle:
        handle.write("".join(line + "\n" for line in lines))
    clock.now += 0.1
    try:
        (note,) = [f for f in session.step(timeout=0).new_findings if f.rule == "possible-hang-passed"]
    finally:
        session.close()
    return note


def test_a_silence_that_ends_in_an_error_is_not_a_hang_that_passed(tmp_path):
    note = resumed_with(tmp_path, "[rank0]: RuntimeError: [gloo/transport/tcp/pair.cc:598] Gloo recv timed out")
    assert "passed" not in note.title and "resumed" not in note.title
    assert "then rank 0 printed an error: RuntimeError: [gloo/transport/tcp/pair.cc:598] Gloo recv timed out" in note.title
    assert "hang" in note.remedy


def test_a_silence_that_one_rank_of_four_ends_says_the_others_are_still_silent(tmp_path):
    note = resumed_with(tmp_path, "[rank0]: step 5 loss=0.5")
    assert "passed" not in note.title
    assert "then only rank 0 printed again; ranks 1,2,3 still silent" in note.title


def test_a_silence_every_rank_ends_passed(tmp_path):
    note = resumed_with(tmp_path, *(f"[rank{r}]: step 5 loss=0.5" for r in range(4)))
    assert "then output resumed (possible hang passed)" in note.title


# ----- item 3 as a user types it: tmux at 80x24
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_typed_in_a_terminal_a_slash_stays_in_the_find_and_in_a_burst_in_the_filter(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("".join(f"[rank{r}]: step {s} loss 1.0\n" for s in range(20) for r in range(2))
                   + "[rank1]: RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer\n")
    command = f"cd {shlex.quote(os.getcwd())} && TERM=xterm-256color {shlex.quote(sys.executable)} -m monitor watch --no-bell {shlex.quote(str(log))}"
    terminal = Terminal(tmp_path, f"second-hour-e-{os.getpid()}", command)
    try:
        # The last line on the screen first: a find typed before the log reached the store (a loaded
        # machine) rightly finds nothing.
        terminal.wait_for_text("Connection closed by peer", timeout=20)
        terminal.keys("f")
        time.sleep(0.5)
        terminal.keys("tcp/pair", literal=True)
        terminal.keys("Enter")
        shown = terminal.wait_for_text("find /tcp/pair/", timeout=10)
        assert "1 of 1" in shown
        terminal.keys("Escape")
        terminal.keys("/a/b", literal=True)  # one burst
        terminal.wait_for_text("/a/b/", timeout=10)
    finally:
        terminal.close()
