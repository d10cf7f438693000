"""The straggler scores of a running job, sampled on a thread of their own: every ``interval``
seconds one look at every rank's stack (py-spy, not pausing the ranks), scored over the last
``window_s`` seconds (``straggler/score.py``); a rank the others steadily wait for is one warning
finding posted to the session, updated while it holds and marked as passed when it no longer does.

The job comes first: the next look is scheduled ``interval`` after the last one finished (looks
never overlap, and a slow py-spy only makes them rarer), nothing here waits on the job, and a
fault of the watch is one line through ``warn``, never the job's concern.

Fed from three threads, each through what it alone writes: ``observe(sample)`` (the metrics
thread: each rank's GPU, a dict swapped whole), ``lines(session, lines)`` (the session's thread,
its ``on_step``: the ranks' lines queued, parsed for steps here), and the watch's own thread,
which publishes ``latest`` (frozen ``Scores``, swapped whole) for the screen and Prometheus.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from monitor.diagnosis.advice import advice
from monitor.metrics.model import Sample
from monitor.model import Finding, LogLine
from monitor.stacks.capture import take
from monitor.straggler.finding import percent, slow_rank_finding
from monitor.straggler.look import rank_gpus, round_of
from monitor.straggler.model import RankGpu, Round, Scores
from monitor.straggler.score import Rule, Steadiness, score
from monitor.straggler.steps import StepTimes

INTERVAL_S = 1.0
WINDOW_S = 60.0
# Lines queued for the step times at most (a job printing faster than the watch reads drops the oldest).
QUEUED_LINES = 10_000
# While a rank is named, its finding is posted again with the newest numbers at most this often.
REPOST_EVERY_S = 10.0
TRIGGER = "straggler"


class StragglerWatch:
    def __init__(self, pids: Callable[[], list[int]], post: Callable[[list[Finding]], None], *,
                 interval: float = INTERVAL_S, window_s: float = WINDOW_S, rule: Rule = Rule(),
                 py_spy: str | None = None, warn: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pids = pids
        self._post = post
        self.interval = interval
        self.window_s = window_s
        self._steadiness = Steadiness(rule)
        self._rule = rule
        self._py_spy = py_spy
        self._warn = warn
        self._clock = clock
        self._rounds: deque[Round] = deque()
        self._gpus: dict[int, RankGpu] = {}
        self._lines: deque[tuple[float, int, str]] = deque(maxlen=QUEUED_LINES)
        self._steps = StepTimes()
        self._named: Finding | None = None  # the finding posted for the rank named now
        self._named_since = 0.0
        self._posted_at = 0.0
        self.latest = Scores()
        self.looks = 0           # looks taken so far
        self.look_s = 0.0        # wall seconds they took, all together
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="monitor-straggler", daemon=True)

    # -- fed from other threads ----------------------------------------------------------------
    def observe(self, sample: Sample) -> None:
        """A metrics sample (its observers' call): each rank's GPU from now on."""
        self._gpus = rank_gpus(sample)

    def lines(self, _session, lines: list[LogLine]) -> None:
        """After a session step (``JobSession(on_step=...)``): the ranks' lines, for their step times."""
        now = self._clock()
        self._lines.extend((now, line.rank, line.text) for line in lines if line.rank is not None)

    # -- the thread ----------------------------------------------------------------------------
    def start(self) -> StragglerWatch:
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        warned = False
        while not self._stop.wait(self.interval):
            try:
                self.look()
            except Exception as exc:  # a fault of the monitor: one line, the job untouched
                if not warned and self._warn is not None:
                    self._warn(f"straggler scores failed ({type(exc).__name__}: {exc}); retrying")
                warned = True

    def look(self) -> Scores:
        """One look at every rank, scored over the window; the finding posted when due."""
        started = self._clock()
        capture = take(self._pids(), TRIGGER, self._py_spy, nonblocking=True)
        self.looks += 1
        self.look_s += self._clock() - started
        one = round_of(capture)
        if one.looks:
            self._rounds.append(one)
        while self._rounds and self._rounds[0].taken < one.taken - self.window_s:
            self._rounds.popleft()
        while self._lines:
            at, rank, text = self._lines.popleft()
            self._steps.feed(rank, text, at)
        scores = self._steadiness.judge(score(self._rounds, self._steps.seconds(), self._gpus, self._rule))
        self.latest = scores
        pids = {stack.rank: stack.pid for stack in capture.processes if stack.rank is not None}
        self._tell(scores, pids, started)
        return scores

    def _tell(self, scores: Scores, pids: dict[int, int], now: float) -> None:
        slow, named = scores.slow, self._named
        if slow is not None:
            if named is None or named.rank != slow.rank:
                if named is not None:
                    self._post([self._passed(named, now)])
                self._named_since = now
            elif now - self._posted_at < REPOST_EVERY_S:
                return
            self._named = slow_rank_finding(scores, slow, pids.get(slow.rank))
            self._posted_at = now
            self._post([self._named])
        elif named is not None:
            self._post([self._passed(named, now)])
            self._named = None

    def _passed(self, named: Finding, now: float) -> Finding:
        """The finding of a rank no longer named: kept, as information, saying for how long it held."""
        title = advice("title-straggler-passed", rank=str(named.rank), seconds=f"{now - self._named_since:.0f}",
                       waiters=named.fields["waiters"], share=percent(float(named.fields["wait_share"])))
        return replace(named, severity="info", role="confirm", title=title)
