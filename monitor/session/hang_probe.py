"""Looking inside a live job when it seems to hang: every rank's Python stack (py-spy) and,
where the job records them, its flight-recorder dumps, taken off the session's thread.

The session triggers it (``JobSession(probe=...)``) when it suspects a hang: the stall, the
first timeout line, every job GPU idle. A screen or ``monitor stacks`` may ask at any time
(trigger "request"). One capture runs at a time; each automatic reason is acted on once per
silence. What it finds goes into the session (``post``) as findings of origin ``stacks`` and
``flight-recorder``, and the stacks are kept beside the log (``run-X.stacks.json`` and ``.txt``).
A capture that cannot be taken (py-spy missing, no permission) or kept (a full disk), or a fault
of the probe itself, is a warning finding saying so and how to fix it, once per kind.

The job comes first: py-spy pauses a process only while it reads its stack (milliseconds), a
dump request is a byte written to a FIFO without blocking, and nothing here waits on the job.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from monitor.diagnosis.advice import advice
from monitor.flight_recorder import dumps as fr_dumps
from monitor.flight_recorder import match as fr_match
from monitor.flight_recorder.pipes import dump_files, request_dumps
from monitor.flight_recorder.variables import RecorderPlan
from monitor.model import Category, Finding
from monitor.stacks import compare, files
from monitor.stacks.capture import take
from monitor.stacks.model import Capture

# How long to wait for the ranks to write the dumps asked for (NCCL checks its pipe every second).
DUMP_WAIT_S = 10.0
DUMP_POLL_S = 0.5
# A rank caught between two calls (back from one collective, not yet in the next; or read seconds
# after its peers on a loaded machine) is the odd one out for a moment: a verdict naming odd ranks
# stands when a look CONFIRM_AFTER_S later puts every rank at the same place, up to
# CONFIRM_LOOKS looks and CONFIRM_WITHIN_S after the first ended (the last one's verdict stands then).
# A look that sees fewer ranks (the job ending: the first timeout often comes just before the
# launcher stops every rank) keeps the one before.
CONFIRM_AFTER_S = 2.0
CONFIRM_LOOKS = 3
CONFIRM_WITHIN_S = 10.0
NOT_TAKEN_RULE = "stacks-not-taken"
# A job that has ended, or a process that ended meanwhile: nothing the user needs to fix.
_NOT_PROBLEMS = ("none", "gone")


class HangProbe:
    def __init__(self, pids: Callable[[], list[int]], log_path: Path, post: Callable[[list[Finding]], None],
                 recorder: RecorderPlan | None = None, *, py_spy: str | None = None,
                 dump_wait_s: float = DUMP_WAIT_S) -> None:
        self._pids = pids
        self.log_path = log_path
        self.text_path = files.stacks_paths(log_path)[1]
        self._post = post
        self._recorder = recorder
        self._py_spy = py_spy
        self._dump_wait_s = dump_wait_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._done_reasons: set[str] = set()
        self._said_problems: set[str] = set()
        self.latest: tuple[Capture, Finding | None] | None = None
        self.captures = 0  # bumped when ``latest`` changes: a screen redraws then

    def trigger(self, reason: str) -> bool:
        """Take the stacks now, in the background, unless a capture is running or ``reason``
        (other than "request") was already acted on since the last ``rearm``. True if started."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return False
            if reason != "request" and reason in self._done_reasons:
                return False
            self._done_reasons.add(reason)
            self._thread = threading.Thread(target=self._capture, args=(reason,), daemon=True, name="hang-probe")
            self._thread.start()
            return True

    def rearm(self) -> None:
        """Output resumed: a new silence may be probed again."""
        with self._lock:
            self._done_reasons.clear()

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    # -- the capture, on its own thread ---------------------------------------------------------
    def _capture(self, reason: str) -> None:
        try:
            written = _size(self.log_path)
            look = Look(self._pids(), reason, self._recorder, self._py_spy, str(self.text_path))
            look.capture.log_bytes = written
            if look.capture.problem:
                kind = next((p.error_kind for p in look.capture.processes if p.error_kind), "none")
                if kind not in _NOT_PROBLEMS:
                    self._say_once(kind, advice("title-stacks-not-taken", problem=look.capture.problem),
                                   look.capture.problem)
            self.latest = (look.capture, look.finding)
            self.captures += 1
            if look.finding is not None:
                self._post([look.finding])
            self._save(look)
            if look.dumps_asked:
                self._post(look.read_dumps(self._dump_wait_s))
        except Exception as exc:  # a fault of the monitor: one line, never a traceback, the job untouched
            self._say_once("failed", advice("title-stacks-failed", error=f"{type(exc).__name__}: {exc}"),
                           advice("monitor-fault"))

    def _save(self, look: Look) -> None:
        """The stacks files beside the log, written after the finding is posted: a side file that
        cannot be written, even by a fault of ours, is said in one line and takes nothing with it."""
        try:
            error = files.save(self.log_path, look.capture, look.finding)
        except Exception as exc:  # a fault of the monitor in a side file: the finding stands
            error = f"{type(exc).__name__}: {exc}"
        if error:
            self._say_once("not-saved", advice("title-stacks-not-saved", error=error), error)

    def _say_once(self, kind: str, title: str, remedy: str) -> None:
        """A warning finding about the probe itself, once per kind of trouble."""
        if kind in self._said_problems:
            return
        self._said_problems.add(kind)
        self._post([Finding(rule=NOT_TAKEN_RULE, category=Category.HANG, severity="warning", role="confirm",
                            title=title, origin="stacks", remedy=remedy, fields={"kind": kind})])


class Look:
    """One look inside a job: dumps asked for (when it has pipes), then every rank's stack, taken
    again while the ranks it names as odd ones could be only passing through."""

    def __init__(self, pids: list[int], reason: str, recorder: RecorderPlan | None = None,
                 py_spy: str | None = None, stacks_file: str = "", *,
                 confirm_after_s: float = CONFIRM_AFTER_S) -> None:
        self.recorder = recorder
        self.dumps_before = dump_files(recorder.dump_prefix) if recorder else {}
        self.dumps_asked = request_dumps(recorder.pipe_prefix) if recorder and recorder.pipe_prefix else []
        self.capture = take(pids, reason, py_spy)
        self.finding = compare.analyse(self.capture, stacks_file)
        first = time.monotonic()  # the window counts from the first look's end: a slow look still gets a second
        for _ in range(CONFIRM_LOOKS - 1):
            if self.finding is None or self.finding.fields.get("kind") not in compare.ODD_KINDS:
                break
            if time.monotonic() - first + confirm_after_s > CONFIRM_WITHIN_S:
                break
            time.sleep(confirm_after_s)
            capture = take(pids, reason, py_spy)
            finding = compare.analyse(capture, stacks_file)
            if finding is None or len(capture.ranked()) < len(self.capture.ranked()):
                break  # the job is ending: the look before says what it was doing
            settled = _verdict(finding) == _verdict(self.finding)
            self.capture, self.finding = capture, finding
            if settled:
                break

    def read_dumps(self, wait_s: float = DUMP_WAIT_S) -> list[Finding]:
        """The findings of the dumps the ranks wrote since they were asked (waiting up to
        ``wait_s`` for all of them), marked as this look's: the session replaces them together."""
        if not self.dumps_asked or self.recorder is None:
            return []
        deadline = time.monotonic() + wait_s
        paths = self._new_dumps()
        while len(paths) < len(self.dumps_asked) and time.monotonic() < deadline:
            time.sleep(DUMP_POLL_S)
            paths = self._new_dumps()
        loaded = []
        for path in paths:
            try:
                loaded.append(fr_dumps.load(Path(path)))
            except fr_dumps.DumpError:
                continue  # a rank still writing, or a stray file: the others still say enough
        found = fr_match.analyse(loaded)
        for finding in found:
            finding.fields.update(trigger=self.capture.trigger, taken=f"{self.capture.taken:.3f}")
        return found

    def _new_dumps(self) -> list[str]:
        assert self.recorder is not None
        now = dump_files(self.recorder.dump_prefix)
        return [path for path, mtime in now.items() if self.dumps_before.get(path) != mtime]


def _verdict(finding: Finding) -> tuple[str, tuple[int, ...]]:
    """What two looks must share to agree: the title names every group of ranks and its place."""
    return finding.title, tuple(finding.ranks)


def _size(path: Path) -> int | None:
    """How much of the log is written now (None: it cannot be told)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return None
