"""The monitor's one screen: metrics and progress on top, the merged log, and the findings."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rich.text import Text
from textual import on
from textual.actions import SkipAction
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.drivers.linux_driver import LinuxDriver
from textual.widgets import Footer, Header, Input, Static
from textual.timer import Timer
from textual.worker import Worker, WorkerState, get_current_worker

from monitor.files import replace_file
from monitor.model import Diagnosis, Finding, any_error
from monitor.text import safe_json, safe_text
from monitor.progress import ProgressState
from monitor.tui.driver import HangUpSafeDriver
from monitor.session.feeds import LogBatch, LogFeed, MetricsFeed, retry_after_failed_sample
from monitor.tui.findings_panel import WIDE, FindingsPanel, JobTimeline, describe
from monitor.tui.log_store import LEVEL_ERROR, LEVEL_INFO, LEVEL_WARNING, FilterError, LineFilter, LogStore
from monitor.tui.log_view import LogView
from monitor.tui.messages import EarlierLines, LinesAround, LogsArrived, MetricsSampled
from monitor.tui.metrics_panel import MetricsPanel
from monitor.tui.progress_panel import ProgressPanel
from monitor.tui.screens import HelpScreen, QuitScreen
from monitor.tui.stacks_screen import StacksScreen

POLL_S = 0.2
# Lines read back per L from before those shown of a log opened big.
EARLIER_LINES = 10_000
# Lines read back around a finding's line that lies before those shown (c, Enter): half after it.
AROUND_LINES = 2_000
# At most one screen update from the log this often: a burst of lines is one update. Each one
# draws every row of a log that scrolled again, most of the screen thread's CPU while a job
# writes fast (benchmarks/README.md, `watch` in a real terminal). A new finding, a new root
# cause or an input problem is posted at once, not held to this pace.
REFRESH_S = 0.5
# After a poll that brought lines, the next one begins no sooner than this after it: what
# the job writes meanwhile is read and diagnosed in one go. Reading each write as it came (a
# job's ranks write every few ms) cost the log worker most of its CPU (benchmarks/README.md,
# `watch` in a real terminal). A poll that took longer (a backlog) is followed at once.
GATHER_S = 0.1
# How often the app checks whether its job was asked to stop (a signal) or has ended.
JOB_CHECK_S = 0.2
# Lines added per turn of the event loop when a big batch arrives (~50 ms of work).
APPLY_CHUNK = 20_000
# How long the answer to a key (y: what was copied, x: where the findings went) stays on the
# message line before the footer's keys come back.
MESSAGE_S = 8.0
# Lines gathered for the screen while it draws the batch before: a screen further behind draws
# only the newest (the session has diagnosed every line; the older ones are in the files).
MAX_PENDING_LINES = 50_000


def _findings_shown(batch: LogBatch, shown: tuple[frozenset[str], str | None]) -> tuple[frozenset[str], str | None]:
    """Which findings (ids) and which root cause the screen shows once ``batch`` is applied."""
    if batch.findings is None:
        return shown
    return frozenset(f.id for f in batch.findings), batch.root_cause.id if batch.root_cause else None


class MonitorApp(App[int]):
    """Follows a LogFeed (and optionally a MetricsFeed); exit value: 1 if a failure was found, else 0."""

    CSS_PATH = "app.tcss"
    TITLE = "monitor"
    # In the footer's order, most needed first: at 80 columns the last ones are cut off.
    BINDINGS = [
        Binding("c", "root_cause", "Cause"),
        Binding("n", "finding(1)", "Next"),
        Binding("N", "finding(-1)", "Prev", show=False),
        Binding("question_mark", "help", "Help"),
        # A priority binding runs as the key is read, before the keys behind it are routed: a burst
        # like "/error" (a paste, tmux send-keys) then goes into the input, not to e and r.
        Binding("slash", "filter", "Filter", priority=True),
        Binding("s", "stacks", "Stacks"),
        Binding("e", "level('error')", "Errors"),
        Binding("w", "level('warning')", "Warnings"),
        Binding("r", "rank(1)", "Rank"),
        Binding("R", "rank(-1)", "Prev rank", show=False),
        Binding("d", "detail", "Detail", show=False),
        Binding("f", "find", "Find", show=False),
        Binding("right_square_bracket", "find_next(1)", "Next match", show=False),
        Binding("left_square_bracket", "find_next(-1)", "Previous match", show=False),
        Binding("y", "copy_line", "Copy line", show=False),
        Binding("Y", "copy_finding", "Copy finding", show=False),
        Binding("x", "export", "Export", show=False),
        Binding("z", "wrap", "Wrap", show=False),
        Binding("L", "load_earlier", "Earlier lines", show=False),
        Binding("o", "node(1)", "Node", show=False),
        Binding("O", "node(-1)", "Prev node", show=False),
        Binding("space", "toggle_follow", "Pause"),
        Binding("t", "toggle_theme", "Theme"),
        Binding("q", "quit", "Quit"),
        # Replaces Textual's "press ctrl+q to quit" toast: Ctrl-C must reach the job (README).
        Binding("ctrl+c", "interrupt", "Stop", show=False, priority=True),
    ]

    def __init__(
        self,
        log_feed: LogFeed,
        metrics_feed: MetricsFeed | None = None,
        *,
        title: str = "monitor",
        job=None,
        metrics_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        timeline: JobTimeline | None = None,
        probe=None,
        scope: str = "",
        bell: bool = True,
    ) -> None:
        """``probe``: the job session's HangProbe (``monitor run``), which takes the ranks' stacks.
        ``scope``: what was chosen of the input (which run of a folder), kept on the status line
        (a notification would cover the remedy at 80x24). ``bell``: ring the terminal's bell when a
        root cause appears, for the user working in another window."""
        super().__init__()
        self.ring_bell = bell
        self.scope = scope
        self.probe = probe
        self.timeline = timeline
        self.log_feed = log_feed
        self.metrics_feed = metrics_feed
        self.job = job
        self.metrics_interval = metrics_interval
        self.sub_title = safe_text(title)  # a command line or path can hold escape codes too
        self.store = LogStore()
        # The last progress the feed posted (the session tracks it; the screen shows it).
        self.progress = ProgressState()
        self._clock = clock
        self._findings: list[Finding] = []
        self._root: Finding | None = None
        self._applied = threading.Event()
        self._log_stopped = threading.Event()
        self._log_worker: Worker | None = None
        # Who closes the feed: this thread once the log worker has stopped; the worker itself when
        # its poll outlasts the wait at unmount (the feed is not thread-safe: never both at once).
        self._feed_lock = threading.Lock()
        self._close_when_stopped = False
        self._unplaced = False  # some finding's line has not arrived yet
        self._found: tuple[int, int] | None = None  # the find's match under the cursor: (k, of n)
        # Lines left in the files between lines read back around a finding and those shown after.
        self._not_loaded = 0
        self._message_timer: Timer | None = None
        self.finished_note = ""
        self.failed = False
        self.files: list[str] = []  # every file followed so far
        # The job is being stopped (Ctrl-C here, or a signal to the monitor): the app exits at its end.
        self.stopping = False

    def get_driver_class(self):
        """Textual's own choice, except that the terminal driver survives a hang-up."""
        driver_class = super().get_driver_class()
        return HangUpSafeDriver if driver_class is LinuxDriver else driver_class

    # ----- layout
    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="top"):
            yield MetricsPanel(id="metrics")
            yield ProgressPanel(clock=self._clock, id="progress")
        with Container(id="middle"):
            with Vertical(id="logpane"):
                yield Input(placeholder="regex: show only matching lines (Esc: clear)", id="filter-input")
                yield Input(placeholder="find: a regex to highlight and jump to, every line kept (Enter; ] and [: next, previous; Esc: clear)",
                            id="find-input")
                yield Static(id="log-status")
                yield LogView(self.store, id="log")
            yield FindingsPanel(id="findings", timeline=self.timeline)
        yield Static(id="message")
        yield Footer()

    def on_mount(self) -> None:
        self._terminal_write("\x1b[22;0t")  # keep the user's title on the terminal's stack
        self.query_one("#filter-input").display = False
        self.query_one("#find-input").display = False
        self.query_one("#message").display = False
        self._fit_layout(self.size.width)
        self.query_one(LogView).focus()
        self._update_status()
        self._log_worker = self.run_worker(self._follow_logs, thread=True, group="logs", name="logs", exit_on_error=False)
        if self.metrics_feed is not None:
            self._start_sample()
        if self.job is not None:
            self.set_interval(JOB_CHECK_S, self._check_job)

    def _check_job(self) -> None:
        """A SIGTERM/SIGHUP/SIGINT to the monitor stops the job (the runner forwards it): show it,
        and close the screen once the job has ended so that the report can print."""
        if not self.stopping and getattr(self.job, "stop_requested", False):
            self._stopping_shown("the monitor got a stop signal")
        if self.stopping and self.job.exit_code() is not None:
            self.exit(1 if self.failed else 0)

    def _stopping_shown(self, why: str) -> None:
        self.stopping = True
        self.notify(f"{why}: stopping the job (SIGTERM to every rank, SIGKILL after the grace period). "
                    "Ctrl-C again kills it now.", title="stopping", timeout=30, markup=False)
        self._update_status()

    def on_resize(self, event) -> None:
        self._fit_layout(event.size.width)

    def _fit_layout(self, width: int) -> None:
        self.screen.set_class(width < WIDE, "-narrow")
        self.query_one(FindingsPanel).fit(width)

    # ----- workers (threads: call the feed, post a message, nothing else)
    def _follow_logs(self) -> None:
        try:
            self._poll_logs(get_current_worker())
        finally:
            with self._feed_lock:
                self._log_stopped.set()
                close = self._close_when_stopped
            if close:
                self.log_feed.close()

    def _poll_logs(self, worker) -> None:
        """Reading never waits for drawing: while the screen applies one batch (one in flight at
        a time), the next is gathered. A screen that falls behind by more than
        ``MAX_PENDING_LINES`` skips drawing the oldest of them; the session has read and
        diagnosed every one, and each batch carries the current findings."""
        pending = LogBatch()
        last_post = 0.0
        in_flight = False
        next_poll = 0.0
        shown: tuple[frozenset[str], str | None] = (frozenset(), None)  # findings and root cause posted
        while not worker.is_cancelled:
            if not pending.finished:
                if (rest := next_poll - time.monotonic()) > 0:
                    time.sleep(rest)
                began = time.monotonic()
                polled = self.log_feed.poll(POLL_S)
                pending.merge(polled)
                next_poll = began + GATHER_S if polled.lines else began
            elif in_flight and not self._applied.wait(POLL_S):
                continue  # the source is done: only the batch on screen is awaited
            if (excess := len(pending.lines) - MAX_PENDING_LINES) > 0:
                del pending.lines[:excess]
                pending.skipped += excess
            if in_flight and not self._applied.is_set():
                continue
            if pending.empty:
                continue
            news = _findings_shown(pending, shown)
            if not pending.finished and news == shown and not pending.problems \
                    and time.monotonic() - last_post < REFRESH_S:
                continue
            shown = news
            self._applied.clear()
            self.post_message(LogsArrived(pending))
            if pending.finished:
                while not self._applied.wait(POLL_S):
                    if worker.is_cancelled:
                        return
                return
            pending, last_post, in_flight = LogBatch(), time.monotonic(), True

    def _start_sample(self) -> None:
        self.run_worker(self._take_sample, thread=True, group="metrics", name="metrics", exit_on_error=False)

    def _take_sample(self) -> None:
        sample = self.metrics_feed.sample()
        straggler = getattr(self.metrics_feed, "straggler", None)
        self.post_message(MetricsSampled(sample, straggler.latest if straggler is not None else None))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "metrics" and event.state == WorkerState.ERROR:
            self.notify(f"metrics sampling failed: {event.worker.error}", severity="warning", markup=False)
            self.set_timer(retry_after_failed_sample(self.metrics_interval), self._start_sample)
        elif event.worker.group == "logs" and event.state == WorkerState.ERROR:
            self.notify(f"reading the logs failed: {event.worker.error}", severity="error", timeout=30, markup=False)

    # ----- handlers (main thread: update widgets)
    def _torn_down(self) -> bool:
        """True while the app shuts down: messages still queued find no widgets."""
        return not self.query(LogView)

    def on_logs_arrived(self, message: LogsArrived) -> None:
        self._apply_in_chunks(message.batch)

    def _apply_in_chunks(self, batch: LogBatch) -> None:
        """Apply a batch; a huge one (a big file read at start) a chunk per turn of the event
        loop, so keys and redraws still get through. The worker waits until all is applied."""
        applied = True
        try:
            if self._torn_down():
                return
            if batch.skipped:
                self.store.skip(batch.skipped)
                batch.skipped = 0
            if len(batch.lines) > APPLY_CHUNK:
                self._add_lines(batch.lines[:APPLY_CHUNK])
                batch.lines = batch.lines[APPLY_CHUNK:]
                self.call_later(self._apply_in_chunks, batch)
                applied = False
            else:
                self._apply(batch)
        finally:
            if applied:
                self._applied.set()

    def _add_lines(self, lines: list) -> None:
        view = self.query_one(LogView)
        first = len(self.store)
        for line in lines:
            self.store.append(line)
        view.lines_added(first)

    def _apply(self, batch: LogBatch) -> None:
        for problem in batch.problems:
            self.notify(safe_text(problem), title="input problem", severity="warning", timeout=15, markup=False)
        if batch.files:
            self.files = batch.files
        if batch.lines:
            self._add_lines(batch.lines)
        if batch.progress is not None:
            self.progress = batch.progress
            self.query_one(ProgressPanel).show(batch.progress)
        if batch.findings is not None:
            self._findings = batch.findings
            new_root = batch.root_cause is not None and (self._root is None or batch.root_cause.id != self._root.id)
            self._root = batch.root_cause
            self._show_findings()
            if new_root:
                self._announce(batch.root_cause)
        elif self._unplaced and batch.lines:
            self._mark_lines()
        if batch.finished:
            self._finish(batch.note)

    def _announce(self, root: Finding) -> None:
        """For the user in another window: the terminal's title names the root cause (xterm's
        title stack keeps theirs, given back at the end), and the bell rings (``bell``)."""
        where = f"node {root.node}: " if root.node else ""
        self._terminal_write(f"\x1b]2;monitor: ★ {safe_text(where + root.title)[:120]}\x07")
        if self.ring_bell:
            self.bell()

    def say(self, message: str, error: bool = False) -> None:
        """The answer to a key, on the bottom line in place of the footer's keys for a while (as
        less and vim answer): a toast would cover the job's rows or the finding's remedy, just where
        the user looks. One line; what does not fit is cut at the right, so the point comes first."""
        line = self.query_one("#message", Static)
        line.update(Text(message, style="bold red" if error else ""))
        line.display = True
        self.query_one(Footer).display = False
        if self._message_timer is not None:
            self._message_timer.stop()
        self._message_timer = self.set_timer(MESSAGE_S, self._message_done)

    def _message_done(self) -> None:
        self._message_timer = None
        if self._torn_down():
            return
        self.query_one("#message").display = False
        self.query_one(Footer).display = True

    def _terminal_write(self, data: str) -> None:
        driver = getattr(self, "_driver", None)  # None in a test without a terminal
        if driver is not None:
            driver.write(data)

    def on_metrics_sampled(self, message: MetricsSampled) -> None:
        panels = self.query(MetricsPanel)
        if self._torn_down() or not panels:
            return  # shutting down: the panels go one by one (seen in CI: the log view still there)
        panels.first().show(message.sample, message.scores)
        self.set_timer(self.metrics_interval, self._start_sample)

    def _show_findings(self) -> None:
        self.failed = any_error(self._findings)
        self.query_one(FindingsPanel).show(self._findings, self._root)
        self._mark_lines()
        self._update_status()

    def _mark_lines(self) -> None:
        marks: dict[int, str] = {}
        root_id = self._root.id if self._root else None
        self._unplaced = False
        for finding in self._findings:
            index = self.store.find(finding.file, finding.line) if finding.file else None
            if index is None:
                self._unplaced = self._unplaced or bool(finding.file)
                continue
            marks[index] = "root" if finding.id == root_id else finding.severity
        self.query_one(LogView).set_marks(marks)

    def _finish(self, note: str) -> None:
        self.finished_note = note
        if note:
            self.query_one(MetricsPanel).show_ended(note)
            self.query_one(ProgressPanel).end()
        self.sub_title = f"{self.sub_title} · {note}" if note else self.sub_title
        if self._root is not None and (index := self.store.find(self._root.file, self._root.line)) is not None:
            self._go_to(self._root, index)  # among the lines shown only: nothing is read back unasked
        elif self._root is not None:
            self.query_one(FindingsPanel).select(self._root)
        if not note:
            # A note is on the job row and the status line already: a toast would repeat it over
            # the top rows just as the root cause comes.
            self.notify("the job's output ended", title="finished", timeout=10, markup=False)
        self._update_status()

    # ----- the log's status line and filter
    @on(LogView.StatusChanged)
    def _update_status(self) -> None:
        if self._torn_down():
            return
        view = self.query_one(LogView)
        status = Text()
        if view.follow:
            status.append(" following ", style="bold black on green")
        else:
            status.append(" paused ", style="bold black on yellow")
            if view.unseen:
                status.append(f" +{view.unseen:,} new (End to follow)")
        status.append(f"  {len(self.store):,} line{'s' if len(self.store) != 1 else ''}")
        if self.store.first:
            status.append(f" (the newest {len(self.store) - self.store.first:,} kept; all are in the files)", style="dim")
        if self.files:
            status.append(f" from {len(self.files)} file{'s' if len(self.files) != 1 else ''}")
        if self._not_loaded:
            status.append(f" ({self._not_loaded:,} between not loaded; in the file)", style="dim")
        line_filter = view.line_filter
        if line_filter.active:
            status.append(f"  showing {view.row_count:,}", style="bold")
        if line_filter.pattern:
            status.append(f"  /{safe_text(line_filter.pattern)}/", style="bold")
        if view.wrap:
            status.append("  wrap", style="bold")
        if view.find_text:
            where = f" {self._found[0]} of {self._found[1]}" if self._found else " (none)"
            status.append(f"  find /{safe_text(view.find_text)}/{where}", style="bold")
        if line_filter.min_level == LEVEL_ERROR:
            status.append("  errors only", style="bold red")
        elif line_filter.min_level == LEVEL_WARNING:
            status.append("  warnings+errors", style="bold yellow")
        if line_filter.ranks is not None:
            status.append(f"  rank {','.join(map(str, sorted(line_filter.ranks)))}", style="bold")
        if line_filter.node is not None:
            status.append(f"  node {safe_text(line_filter.node)}", style="bold")
        if self.finished_note:
            status.append(f"  · {self.finished_note}", style="bold")
        elif self.stopping:
            status.append("  · stopping the job…", style="bold red")
        if self.scope:  # last: the filter's state matters more when the line is cut
            status.append(f"  {safe_text(self.scope)}", style="dim")
        self.query_one("#log-status", Static).update(status, layout=False)

    def _set_filter(self, line_filter: LineFilter) -> bool:
        try:
            self.query_one(LogView).set_filter(line_filter)
        except FilterError as exc:
            self.query_one("#log-status", Static).update(Text(f" {exc}", style="bold red"), layout=False)
            return False
        return True

    @on(Input.Changed, "#filter-input")
    def _filter_typed(self, event: Input.Changed) -> None:
        view = self.query_one(LogView)
        ok = self._set_filter(replace(view.line_filter, pattern=event.value))
        event.input.set_class(not ok, "-invalid")

    @on(Input.Submitted, "#filter-input")
    def _filter_done(self) -> None:
        self.query_one(LogView).focus()

    @on(Input.Submitted, "#find-input")
    def _find_done(self, event: Input.Submitted) -> None:
        view = self.query_one(LogView)
        try:
            view.set_find(event.value)
        except FilterError as exc:
            event.input.add_class("-invalid")
            self.query_one("#log-status", Static).update(Text(f" {exc}", style="bold red"), layout=False)
            return
        event.input.remove_class("-invalid")
        event.input.display = False
        view.focus()
        self.action_find_next(1)

    def on_key(self, event) -> None:
        filter_input = self.query_one("#filter-input", Input)
        # The bar may be open with a bad regex (the view kept the last good one, maybe none).
        view = self.query_one(LogView)
        open_bar = filter_input.display or filter_input.has_focus
        if event.key == "escape" and self.query_one("#finding-detail").has_focus:
            event.stop()
            view.focus()
            return
        find_input = self.query_one("#find-input", Input)
        if event.key == "escape" and (find_input.display or view.find_text) and not filter_input.has_focus:
            event.stop()
            find_input.value = ""
            find_input.display = False
            view.set_find("")
            self._found = None
            self._update_status()
            view.focus()
            return
        if event.key == "escape" and (open_bar or view.line_filter.pattern):
            event.stop()
            filter_input.value = ""
            filter_input.remove_class("-invalid")
            filter_input.display = False
            self._set_filter(replace(view.line_filter, pattern=""))
            self._update_status()  # drops a "bad regex" message
            view.focus()
            return
        if event.key == "escape" and view.has_focus:
            view.show_line_starts()

    # ----- actions
    def action_filter(self) -> None:
        if self.screen is not self.screen_stack[0]:
            return  # the help or the quit question is up: a priority key must not act behind it
        if isinstance(self.focused, Input):
            # A "/" typed in a regex (the filter's or the find's): skipped, the key goes to the box
            # behind the keys read before it, so in a burst it stays where it was typed.
            raise SkipAction()
        filter_input = self.query_one("#filter-input", Input)
        filter_input.display = True
        # Focused now, not on the next turn (what focus() does): the keys already read behind the "/"
        # are routed to the focused widget.
        self.screen.set_focus(filter_input)

    def action_level(self, level: str) -> None:
        view = self.query_one(LogView)
        wanted = LEVEL_ERROR if level == "error" else LEVEL_WARNING
        current = view.line_filter
        self._set_filter(replace(current, min_level=LEVEL_INFO if current.min_level == wanted else wanted))

    def action_rank(self, direction: int) -> None:
        view = self.query_one(LogView)
        ranks = sorted(self.store.ranks_seen)
        if not ranks:
            self.say("no rank is known yet: the lines carry no rank prefix and the files no rank in their name")
            return
        choices: list[frozenset[int] | None] = [None] + [frozenset({r}) for r in ranks]
        current = view.line_filter
        position = choices.index(current.ranks) if current.ranks in choices else 0
        chosen = choices[(position + direction) % len(choices)]
        self._set_filter(replace(current, ranks=chosen))

    def action_node(self, direction: int) -> None:
        view = self.query_one(LogView)
        nodes = self.store.nodes_seen
        if not nodes:
            self.say("one machine: no node folders (monitor run --job-dir) in what is watched")
            return
        choices: list[str | None] = [None, *nodes]
        current = view.line_filter
        position = choices.index(current.node) if current.node in choices else 0
        chosen = choices[(position + direction) % len(choices)]
        self._set_filter(replace(current, node=chosen))

    def action_show_rank(self, rank: int) -> None:
        current = self.query_one(LogView).line_filter
        self._set_filter(replace(current, ranks=frozenset({rank})))

    def action_clear_filters(self) -> None:
        self.query_one("#filter-input", Input).value = ""
        self._set_filter(LineFilter())

    def action_toggle_follow(self) -> None:
        view = self.query_one(LogView)
        view.follow = not view.follow

    def action_finding(self, direction: int) -> None:
        """Move to the next/previous finding by position in the log; in the log with a find
        active, to the next/previous match (less's n / N)."""
        view = self.query_one(LogView)
        if view.find_text and view.has_focus:
            self.action_find_next(direction)
            return
        placed = sorted(
            (index, finding)
            for finding in self._findings
            if (index := self.store.find(finding.file, finding.line)) is not None
        )
        if not placed:
            self.say("no finding to go to yet")
            return
        here = view.cursor_index if view.cursor_index is not None else (len(self.store) if direction < 0 else -1)
        after = [p for p in placed if (p[0] > here if direction > 0 else p[0] < here)]
        index, finding = (after[0] if direction > 0 else after[-1]) if after else (placed[0] if direction > 0 else placed[-1])
        self._go_to(finding, index)

    def action_stacks(self) -> None:
        """Take every rank's stack now and show them (the last ones until the new ones come)."""
        if self.probe is None:
            self.say("stacks need the job's processes: start it with `monitor run`, or run `monitor stacks --pid PID`")
            return
        self.probe.trigger("request")
        self.push_screen(StacksScreen(self.probe))

    def action_find(self) -> None:
        find_input = self.query_one("#find-input", Input)
        find_input.display = True
        self.screen.set_focus(find_input)

    def action_find_next(self, direction: int) -> None:
        view = self.query_one(LogView)
        if not view.find_text:
            self.say("nothing to find yet: f, then a regex")
            return
        try:
            self._found = view.find_next(direction)
        except FilterError as exc:
            self.say(str(exc), error=True)
            return
        if self._found is None:
            self.say(f"no line holds /{safe_text(view.find_text)}/")
        self._update_status()

    def action_copy_line(self) -> None:
        """The line the user sees to the clipboard (OSC 52): the selected line when it is in view,
        else the last line in view; the message line says which."""
        target = self.query_one(LogView).line_to_copy()
        text = self.store.text(target[0]) if target is not None else ""
        if not text:
            self.say("no line to copy")
            return
        index, selected = target
        line = self.store.line(index)
        which = "the selected line" if selected else "the last line in view"
        self.copy_to_clipboard(text)
        self.say(f"copied {which} ({safe_text(line.file)}:{line.line}, {len(text)} characters); a terminal "
                 "without OSC 52 does not take it: select with Shift+drag there")

    def action_copy_finding(self) -> None:
        """The selected finding, what to do included, to the clipboard (OSC 52)."""
        panel = self.query_one(FindingsPanel)
        finding = panel.selected()
        if finding is None:
            self.say("no finding to copy")
            return
        is_root = self._root is not None and finding.id == self._root.id
        self.copy_to_clipboard(describe(finding, is_root, panel.first_time(finding)).plain)
        self.say(f"copied the finding: {safe_text(finding.title)}")

    def action_export(self) -> None:
        """The findings as `diagnose --json` writes them, to a file in the current folder."""
        path = Path(time.strftime("monitor-findings-%Y%m%d-%H%M%S.json"))
        data = Diagnosis(self._root, list(self._findings), list(self.files)).to_json()
        error = replace_file(path.absolute(), (safe_json(data, indent=2) + "\n").encode())
        if error:
            self.say(safe_text(error), error=True)
        else:
            # The file's name first: on a narrow screen the message line cuts the folder, not the name.
            self.say(f"{len(self._findings)} findings saved to {safe_text(path.name)} in {safe_text(str(Path.cwd()))}")

    def action_load_earlier(self) -> None:
        """Lines from before those shown of a log opened big (only its tail was read for the screen)."""
        earlier = getattr(self.log_feed, "earlier", None)
        if earlier is None:
            self.say("every line of this source is shown already")
            return
        self.run_worker(lambda: self.post_message(EarlierLines(earlier(EARLIER_LINES))), thread=True,
                        group="earlier", exclusive=True, exit_on_error=False)

    def on_earlier_lines(self, message: EarlierLines) -> None:
        if not message.lines:
            self.say("no earlier lines: each file is shown from its first line")
            return
        added = self._put_in_front(message.lines)
        self.query_one(LogView).replace_store(self.store, cursor=added)
        self._mark_lines()
        self._update_status()
        self.say(f"{added:,} earlier lines read back")

    def _put_in_front(self, lines: list) -> int:
        """The store rebuilt with ``lines`` (read back from the files) before those it holds; how
        many of them it kept."""
        old = self.store
        self.store = old.with_earlier(lines)
        return len(self.store) - (len(old) - old.first)

    def _show_in_log(self, finding: Finding) -> None:
        """The log's cursor on the finding's line. A line before those shown (a big log is shown by
        its tail) is read back from its file first, on a thread; the move comes with the lines."""
        if not finding.file:
            return
        index = self.store.find(finding.file, finding.line)
        if index is not None:
            self.query_one(LogView).jump_to(index)
            return
        around = getattr(self.log_feed, "around", None)
        if around is None:
            self._not_shown(finding)
            return
        self.run_worker(lambda: self.post_message(LinesAround(finding, around(finding.file, finding.line, AROUND_LINES))),
                        thread=True, group="earlier", exclusive=True, exit_on_error=False)

    def _not_shown(self, finding: Finding) -> None:
        self.say(f"{safe_text(finding.file)}:{finding.line} is not among the lines shown; it is in the file")

    def on_lines_around(self, message: LinesAround) -> None:
        finding, lines = message.finding, message.lines
        if self._torn_down():
            return
        if not lines:
            self._not_shown(finding)
            return
        shown_from = self.store.first_line(finding.file)
        self._put_in_front(lines)
        if shown_from is not None:
            self._not_loaded += max(0, shown_from - lines[-1].line - 1)
        index = self.store.find(finding.file, finding.line)
        self.query_one(LogView).replace_store(self.store, cursor=index if index is not None else self.store.first)
        self._mark_lines()
        self._update_status()
        note = f"; lines {lines[-1].line + 1:,}-{shown_from - 1:,} stay in the file" \
            if shown_from is not None and shown_from > lines[-1].line + 1 else ""
        self.say(f"{len(lines):,} lines around {safe_text(finding.file)}:{finding.line} read back{note}")

    def action_wrap(self) -> None:
        self.query_one(LogView).toggle_wrap()
        self._update_status()

    def action_detail(self) -> None:
        """Into the finding's detail (arrows, PageUp/PageDown scroll it; Escape goes back to the log)."""
        self.query_one("#finding-detail").focus()

    def action_root_cause(self) -> None:
        if self._root is None:
            self.say("no root cause found (yet)")
            return
        self.query_one(FindingsPanel).select(self._root)
        self._show_in_log(self._root)
        self._update_status()

    def _go_to(self, finding: Finding, index: int) -> None:
        self.query_one(FindingsPanel).select(finding)
        self.query_one(LogView).jump_to(index)
        self._update_status()

    @on(FindingsPanel.Selected)
    def _finding_chosen(self, event: FindingsPanel.Selected) -> None:
        self._show_in_log(event.finding)
        self._update_status()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        if self.job is not None and self.job.exit_code() is None:
            self.push_screen(QuitScreen(" ".join(self.job.command)), self._quit_answered)
            return
        self.exit(1 if self.failed else 0)

    def action_interrupt(self) -> None:
        """Ctrl-C: with a running job, interrupt it as Ctrl-C in a terminal would (SIGINT to every
        rank; again: kill it) and exit when it has ended; without one (watch, demo), quit."""
        if self.job is None or self.job.exit_code() is not None:
            self.exit(1 if self.failed else 0)
            return
        if self.stopping:
            self.job.stop()  # the second stop kills at once
            self.notify("killing the job now (SIGKILL)", title="stopping", timeout=30, markup=False)
            return
        self.job.stop(signal.SIGINT)
        self._stopping_shown("Ctrl-C")

    def _quit_answered(self, choice: str | None) -> None:
        if choice == "stop":
            self.job.stop()
            self.exit(1 if self.failed else 0)
        elif choice == "leave":
            self.exit(1 if self.failed else 0)

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Filter: errors only", "Show only error lines (again: all)", lambda: self.action_level("error"))
        yield SystemCommand("Filter: warnings and errors", "Show warning and error lines", lambda: self.action_level("warning"))
        yield SystemCommand("Filter: clear", "Show all lines of all ranks", self.action_clear_filters)
        for rank in sorted(self.store.ranks_seen):
            yield SystemCommand(f"Filter: rank {rank}", f"Show only rank {rank}'s lines", lambda r=rank: self.action_show_rank(r))
        yield SystemCommand("Jump to root cause", "Show the root cause in the log", self.action_root_cause)
        yield SystemCommand("Follow: pause / resume", "Stop or resume following the end of the log", self.action_toggle_follow)
        yield SystemCommand("Keys", "Show the key help", self.action_help)

    def wait_log_reader(self) -> None:
        """Return once the log worker is done with the feed (its last poll, and the close it may have
        been left): the session outlives the screen under ``monitor run``, and only one thread may
        step it. A poll's work is bounded, so this ends."""
        if self._log_worker is not None:
            self._log_stopped.wait()

    def on_unmount(self) -> None:
        self._terminal_write("\x1b[23;0t")  # give the user's title back
        # The feed is not thread-safe: let the worker's poll in progress end before closing it; a
        # poll that outlasts the wait (a loaded machine) closes it itself when it ends.
        if self._log_worker is not None:
            self._log_worker.cancel()
            self._log_stopped.wait(2 * POLL_S + 1.0)
            with self._feed_lock:
                if not self._log_stopped.is_set():
                    self._close_when_stopped = True
                    return
        self.log_feed.close()
