"""One job's session: the one place where every finding meets, and the one root cause.

``JobSession(paths, catalogue)`` follows the job's logs (files, directories, globs; see
``logs/follow.py``), attributes each line's rank the way ``diagnose`` does (its prefix, else
the file's name), and feeds the diagnosis engine in arrival order, completing a record that
spans lines when its file ends (rotation, truncation) or stays idle for ``IDLE_FLUSH_S``. A
follow of a file therefore finds what ``diagnose`` finds on the finished file.

Findings from outside the logs join the same engine, so they are counted, ordered and weighed
for the root cause like the others (``diagnosis/root_cause.py``):
- the stall (``possible-hang``, origin ``stall``): added while no stream has printed for the
  threshold and no error explains the silence, withdrawn when output resumes or the job exits well;
- metric signals and checkpoint checks, from their own threads: ``post`` (thread-safe);
- the checks before the launch and how the job exited, from the session's thread: ``add``;
- what the ranks' stacks and flight-recorder dumps say (``HangProbe``): taken when the session
  suspects a hang (the stall, the first timeout, every job GPU idle), or when a screen asks
  (``probe.trigger("request")``). A newer capture replaces the older one's findings. Evidence taken during a
  silence is withdrawn with the stall when output resumes and no error follows within
  ``PROBATION_S``, or when the job ends well or after training on (a long evaluation on one rank
  looks like a hang until it ends).

The screen (``monitor/tui``), ``watch --headless``, ``run --headless``, the end report and
``run-X.diagnosis.json`` all render from a session, so a job gets the same root cause in every
mode. ``step`` and everything but ``post`` belong to one thread (the TUI's worker, the headless
loop). The clock is injected (``logs/clock.py``; the follower, the stall and the progress read
it): a test moves time instead of sleeping.
"""

from __future__ import annotations

import os
import queue
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from monitor.diagnosis.engine import Engine
from monitor.diagnosis.node_health import NodeWatch
from monitor.diagnosis.scan import scan_prefix
from monitor.diagnosis.root_cause import as_requested_stop
from monitor.diagnosis.conclude import conclude, exited_zero, on_every_rank
from monitor.diagnosis.novelty import Against, NoveltyWatch
from monitor.diagnosis.second_opinion import review
from monitor.diagnosis.tail import trains
from monitor.evidence import read_evidence, recorded_beside
from monitor.logs.clock import SYSTEM_CLOCK, Clock
from monitor.logs.follow import Follower
from monitor.logs.nodes import nodes_from_names
from monitor.logs.ranks import FileRanks
from monitor.logs.runs import recorded_job_log, run_record
from monitor.logs.reader import UnreadableLog, last_lines, line_end
from monitor.model import SEVERITY_ORDER, Diagnosis, Finding, LogLine, is_timeout
from monitor.progress import ProgressTracker
from monitor.session.hang_probe import NOT_TAKEN_RULE, HangProbe
from monitor.session.stall import StallDetector, resolved_note

# A watch opened on files this big reads them with the fast scan (see ``attach``), and shows
# this many of their last lines.
ATTACH_BYTES = 4 << 20
ATTACH_TAIL_LINES = 2000
# Bytes read back at most per call for earlier lines of an attached file.
EARLIER_WINDOW = 8 << 20
# A record spanning lines (a traceback) is complete when its file has been quiet this long.
IDLE_FLUSH_S = 0.5
# At the end, how long a capture under way may take to finish (its dumps may never come).
PROBE_JOIN_S = 3.0
# After a silence ends, how long an error may take to show that it was a hang after all.
PROBATION_S = 20.0
EVIDENCE_ORIGINS = ("stacks", "flight-recorder")
# Metric signal that, like a stall, makes the session look inside the job.
GPUS_IDLE_RULE = "metrics-gpus-idle"


MORE_PATHS_EVERY_S = 2.0


@dataclass(slots=True)
class SessionUpdate:
    """What one ``JobSession.step`` brought."""

    lines: list[LogLine] = field(default_factory=list)  # in arrival order, ranks attributed
    new_findings: list[Finding] = field(default_factory=list)
    # Findings seen before whose value changed (their newest value: a count up, a confirmation).
    changed: list[Finding] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)  # Finding.id of findings withdrawn
    version: int = 0  # JobSession.version after this step
    files: list[str] = field(default_factory=list)  # every file followed so far
    problems: list[str] = field(default_factory=list)  # new input problems, one line each


@dataclass(slots=True)
class _Probation:
    """Evidence of a silence that passed: withdrawn at ``until`` unless a failure follows, and at
    the job's end unless the job went on without training (``trained``: a line of training
    progress since the silence, a step or a loss)."""
    until: float
    findings: list[Finding]
    trained: bool


class JobSession:
    def __init__(self, paths, catalogue, *, poll: bool = False, stall_after: float | None = None,
                 clock: Clock = SYSTEM_CLOCK,
                 stop_requested: Callable[[], bool] | None = None, probe: HangProbe | None = None,
                 on_step: Callable[[JobSession, list[LogLine]], None] | None = None, attach: bool = False,
                 against: Against | None = None, more_paths: Callable[[], list] | None = None,
                 world_size: int | None = None) -> None:
        """``stop_requested``: asked on every step whether the job was asked to stop (``Job.
        stop_requested``; see ``request_stop``). ``probe``: takes the job's stacks when a hang is
        suspected (a session of logs alone has none). ``on_step``: called on the session's thread
        after each step with the lines it brought (``status.StatusPublisher``). ``attach``: files
        already big when the session starts (a watch opened on a long job) are diagnosed with the
        fast scan of ``diagnose`` and followed from their end; the screen gets their last lines.
        ``against``: the last run that ended well (``diagnosis/novelty.py``): new warning and error
        lines are told as they come, and the diagnosis lists what is new since it. ``more_paths``:
        asked every few seconds, and at the end, for files to follow that appeared since the start
        (``Job.extra_log_paths``: torchrun --log-dir's per-rank files). ``world_size``: the job's
        number of ranks where its launch command fixes it (ranks that print nothing exist too); by
        default, where ``paths`` are a run `monitor run` recorded, the one it recorded.
        Raises ``monitor.logs.sources.SourceError``
        for a PATH that can never name a file."""
        self.follower = Follower([str(p) for p in paths], poll=poll, clock=clock)
        # Files named after their nodes (SLURM's --output=%N.out), as the followed files show them.
        self._named_nodes: dict[str, str] = {}
        self._named_from = 0  # how many files the names were read from
        self.engine = Engine(catalogue, node_of=self._named_nodes.get)
        # A watch of a run `monitor run` recorded reads its world size as `diagnose` does, and of
        # one that ended, what the run kept beside its log (its stacks, its dumps) too.
        recorded = recorded_job_log([str(p) for p in paths])
        record = run_record(recorded) if recorded is not None else None
        if world_size is None and record is not None:
            world_size = record.world_size
        if world_size is not None:
            self.engine.note_world_size(world_size)
        self.stall = StallDetector(stall_after)
        # The training progress the lines say (step, loss, rate): tracked here, once, on the
        # session's thread, for its readers (the screen, the status snapshot) once one asks
        # (``track_progress``): parsing every line costs a headless watch ~15 % of a core at
        # 10,000 lines/s for a number nobody shows.
        self.progress = ProgressTracker(clock.monotonic)
        self._tracking_progress = False
        self._partial_seen: dict[str, str] = {}  # file -> its partial last line, as last fed
        self.problems: list[str] = []
        self.stop_requested = False
        self._asked_to_stop = stop_requested
        self._clock = clock
        self._posted: queue.SimpleQueue[Finding] = queue.SimpleQueue()
        self._file_ranks: dict[str, FileRanks] = {}
        self._quiet_since: dict[str, float] = {}  # files fed since their records were completed
        self._closed = False
        # Asked every few seconds (and once more at the end) for files to follow that appeared
        # since the start: a job's per-rank files under torchrun --log-dir come late.
        self._more_paths = more_paths
        self._next_more_paths = 0.0
        self.probe = probe
        self._evidence: dict[str, list[Finding]] = {}  # origin -> the latest capture's findings
        self._probation: _Probation | None = None
        self._withdrawn: list[str] = []  # ids withdrawn since the last step
        self._on_step = on_step
        self._attach = attach
        # Attached files: where the lines shown of each begin (byte, line number), for earlier_lines.
        self.attached: dict[str, tuple[int, int]] = {}
        # A folder may be (or become, as the nodes start) a job folder of several nodes
        # (``monitor run --job-dir``): which node went quiet.
        self._node_watches = [NodeWatch(p, clock.monotonic, clock.wall) for p in map(str, paths) if os.path.isdir(p)]
        self._node_findings: dict[tuple[str, str | None], Finding] = {}
        self._stall_held: Finding | None = None  # the active stall's finding, as the engine holds it
        # ((engine version, ranks known), the root cause then): root_cause is asked on every poll.
        self._concluded: tuple[tuple[int, int], Finding | None] | None = None
        self._exited_ok = False  # `monitor run` saw the job exit 0 (``job_ended``)
        self.against = against
        self._novelty = NoveltyWatch(against) if against is not None else None
        if recorded is not None and record is not None and record.exit_code is not None:
            self.post(read_evidence(recorded_beside(recorded)).findings)

    # -- sources -----------------------------------------------------------------------------
    def follow(self, paths) -> None:
        """Follow more files from now on (see ``Follower.add``)."""
        self.follower.add([str(p) for p in paths])

    def track_progress(self) -> ProgressTracker:
        """Follow the training progress from now on (before the first step: from the start);
        returns the tracker, which only this session's thread writes."""
        self._tracking_progress = True
        return self.progress

    def _look_for_more_paths(self, now: bool = False) -> None:
        if self._more_paths is None or (not now and self._clock.monotonic() < self._next_more_paths):
            return
        self.follow(self._more_paths())
        self._next_more_paths = self._clock.monotonic() + MORE_PATHS_EVERY_S

    def post(self, findings: list[Finding]) -> None:
        """Findings from another thread (metric signals, checkpoint checks); the next ``step``
        takes them in. A finding posted again (a signal re-raised, its ``count`` up) is the
        same finding, updated, not a new one."""
        for finding in findings:
            self._posted.put(finding)

    def add(self, findings: list[Finding]) -> None:
        """Findings from the session's own thread (preflight checks, the job's exit)."""
        for finding in findings:
            self._take_in(finding)

    def job_ended(self, exit_finding: Finding | None) -> None:
        """How the job exited (``runner.explain.exit_finding``; None: a clean exit). It is the
        root cause only when nothing else is; otherwise it only confirms the cause."""
        now = self._clock.monotonic()
        if exit_finding is None:
            # The job finished well: a silence was no hang. It passes as when output resumes.
            self._stall_passed(self.stall.end(), now, exited=True)
        # Records the last lines left in progress are complete now: a failure among them keeps
        # what a silence before it showed.
        self._judge_probation(self._taken(self.engine.flush()), now)
        if self._probation is not None:
            on_trial, trained = self._probation.findings, self._probation.trained
            self._probation = None
            if exit_finding is None or trained:
                # The silence passed for good (the job finished, or trained on after it): what was
                # seen during it is not why the job ended. A stop's or a kill's own lines (torchrun's
                # "Received 15 death signal", "Terminated") also end a silence, and without training
                # after it the silence was the hang they ended: its evidence stays.
                self._withdraw(on_trial)
        if exit_finding is None:
            self._exited_ok = True
            self._concluded = None  # a root the learned opinion gave is chosen again without it
            # What failed in a job that exited 0 was caught, or restarted by the launcher: what it
            # says stays, as warnings, never the cause.
            for finding in exited_zero(self.engine.findings):
                self.engine.revise(finding)
            return
        if self.root_cause() is not None:
            exit_finding = replace(exit_finding, role="confirm")
        self.add([exit_finding])

    def request_stop(self) -> None:
        """The user (or ``monitor run`` forwarding a signal) asked the job to stop: the
        launcher's report of that stop is no failure (``root_cause.as_requested_stop``)."""
        self.stop_requested = True
        self._taken(list(self.engine.findings))

    # -- stepping ----------------------------------------------------------------------------
    def step(self, timeout: float = 0.2) -> SessionUpdate:
        """Read what is new (blocking at most ``timeout`` s) and diagnose it."""
        if not self.stop_requested and self._asked_to_stop is not None and self._asked_to_stop():
            self.request_stop()
        known = len(self.engine.findings)
        self._look_for_more_paths()
        self._name_nodes()
        attached = self._attach_big_files() if self._attach else []
        update = self.follower.read(timeout)
        self._name_nodes()
        now = self._clock.monotonic()
        step = SessionUpdate(problems=list(update.problems), new_findings=self._taken(self.engine.findings[known:]))
        if attached:
            self.stall.observe(attached, now)
            for line in attached:
                self._quiet_since[line.file] = now  # a record the scan left open completes when idle
        self.problems += update.problems
        step.lines = attached + self._feed(update.lines, update.ended, now, step.new_findings)
        if self._tracking_progress:
            self._follow_partial_lines(now)
        for file, since in list(self._quiet_since.items()):
            if now - since >= IDLE_FLUSH_S:
                if self.engine.has_pending(file):  # else there is nothing to complete
                    step.new_findings += self._taken(self.engine.flush(file))
                del self._quiet_since[file]
        step.new_findings += self._take_posted()
        self._check_nodes(step)
        self._update_stall(step, now)
        self._look_inside(step, now)
        step.cleared += self._withdrawn
        self._withdrawn = []
        new_ids = {f.id for f in step.new_findings}
        step.changed = [f for f in self.engine.take_changed() if f.id not in new_ids]
        step.version = self.version
        step.files = self.follower.files
        if self._on_step is not None:
            self._on_step(self, step.lines)
        return step

    def _name_nodes(self) -> None:
        """The files named after their nodes, read again when the followed files change."""
        if len(self.follower.files) != self._named_from:
            self._named_from = len(self.follower.files)
            self._named_nodes.clear()
            self._named_nodes.update(nodes_from_names(self.follower.files))

    def _attach_big_files(self) -> list[LogLine]:
        """Once, before the first read: each followed file of ``ATTACH_BYTES`` or more is
        diagnosed up to its last complete line with ``diagnose``'s fast scan and followed on from
        there; returns the last ``ATTACH_TAIL_LINES`` lines of each, for the screen only."""
        self._attach = False
        shown: list[LogLine] = []
        for path in list(self.follower.files):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode) or st.st_size < ATTACH_BYTES or path.endswith(".gz"):
                continue
            try:
                lines, offset = scan_prefix(path, self.engine, st.st_size)
            except UnreadableLog:
                continue  # the follower says why when it reads it
            if self.follower.start_after(path, (st.st_dev, st.st_ino), offset, lines):
                tail, begins = last_lines(path, offset, lines, ATTACH_TAIL_LINES)
                shown += tail
                self.attached[path] = (begins, lines - len(tail) + 1)
        return shown

    def earlier_lines(self, count: int) -> list[LogLine]:
        """Up to ``count`` more lines of each attached file, from before those shown so far (its
        tail at attach, then each earlier call's), for the screen only: [] when none are left.
        Reads the files only, so any thread may ask."""
        found: list[LogLine] = []
        for path, (begins, first) in list(self.attached.items()):
            if first <= 1:
                continue
            lines, begins = last_lines(path, begins, first - 1, count, window=EARLIER_WINDOW)
            if lines:
                self.attached[path] = (begins, lines[0].line)
                found += lines
        return found

    def lines_around(self, path: str, line: int, count: int) -> list[LogLine]:
        """Up to ``count`` lines of an attached file around its line ``line`` (half after it, as
        many as come before those shown), when that line lies before the lines shown so far (a
        finding the fast scan found): [] otherwise. ``earlier_lines`` goes on from before them;
        the lines between them and those shown are left in the file. Reads the file only."""
        begins, first = self.attached.get(path, (0, 1))
        if not 1 <= line < first:
            return []
        last = min(first - 1, line + count // 2)
        end = line_end(path, last)
        if end is None:
            return []
        lines, begins = last_lines(path, end, last, count, window=EARLIER_WINDOW)
        if lines:
            self.attached[path] = (begins, lines[0].line)
        return lines

    def flush(self) -> None:
        """Complete every record in progress (the source has ended)."""
        self._judge_probation(self._taken(self.engine.flush()), self._clock.monotonic())
        self._quiet_since.clear()

    def close(self) -> None:
        """Stop following; partial last lines are diagnosed as complete lines."""
        if self._closed:
            return
        self._closed = True
        if self.probe is not None:
            self.probe.join(PROBE_JOIN_S)  # a capture under way: its findings belong to this job
        self._look_for_more_paths(now=True)
        update = self.follower.close()
        now = self._clock.monotonic()
        new: list[Finding] = []
        self._feed(update.lines, update.ended, now, new)
        self.problems += update.problems
        new += self._take_posted()
        self._judge_probation(new, now)

    # -- results -----------------------------------------------------------------------------
    def last_line_times(self) -> dict[int, float]:
        """rank -> when it last printed a line, in seconds since the epoch."""
        now, wall = self._clock.monotonic(), self._clock.wall()
        return {rank: wall - (now - words.at) for rank, words in self.stall.last.items() if isinstance(rank, int)}

    @property
    def version(self) -> int:
        """Bumped on every change of the findings, so a UI can redraw only then."""
        return self.engine.version

    @property
    def findings(self) -> list[Finding]:
        """Every finding, from every source, in the order taken in."""
        return self.engine.findings

    def root_cause(self) -> Finding | None:
        """The one root cause of everything seen so far (``diagnosis/root_cause.py``); where the
        rules are unsure of it (an exception no rule names, only weak evidence), the second
        opinion's, as the end report will say (``conclude``): the screen and the Prometheus
        series name the same cause. Chosen again only when the findings (or the ranks known to
        exist, which name a hung rank) changed."""
        state = (self.engine.version, len(self.engine.known_ranks))
        if self._concluded is None or self._concluded[0] != state:
            diagnosis = self.engine.diagnosis(self.follower.files)
            if diagnosis.root_cause is not None and not self._exited_ok:  # the model only where the rules are unsure
                diagnosis = on_every_rank(review(diagnosis, self.engine.catalogue), self.engine.catalogue,
                                          self.engine.rank_evidence())
            self._concluded = (state, diagnosis.root_cause)
        return self._concluded[1]

    def diagnosis(self) -> Diagnosis:
        """The diagnosis so far, with every record in progress completed."""
        self.flush()
        diagnosis = conclude(self.engine.diagnosis(self.follower.files), self.engine.catalogue, self.against,
                             ranks=self.engine.rank_evidence(), exited_ok=self._exited_ok)
        diagnosis.problems = self.problems + diagnosis.problems
        return diagnosis

    # -- internals ---------------------------------------------------------------------------
    def _take_posted(self) -> list[Finding]:
        """Take in what other threads posted; returns the findings that are new."""
        new: list[Finding] = []
        while True:
            try:
                finding = self._posted.get_nowait()
            except queue.Empty:
                return new
            if (held := self._take_in(finding)) is not None:
                new.append(held)
                if held.origin in EVIDENCE_ORIGINS and held.rule != NOT_TAKEN_RULE:
                    self._replace_evidence(held)

    def _take_in(self, finding: Finding) -> Finding | None:
        """A finding from outside the logs joins the engine (ordered at this point of the
        logs): returned as held; None when it is a new value of one held (``source_key``)."""
        if finding.first_seen is None:
            finding = replace(finding, first_seen=self._clock.wall())
        held = self.engine.add_external(finding)
        return self._taken([held])[0] if held is not None else None

    def _taken(self, findings: list[Finding]) -> list[Finding]:
        """``findings`` as held, a launcher's report of the stop the user asked for worded as such."""
        if not self.stop_requested:
            return findings
        taken = []
        for finding in findings:
            if (stop := as_requested_stop(finding, self.engine.catalogue.lang)) is not None:
                self.engine.revise(stop)
                finding = stop
            taken.append(finding)
        return taken

    def _feed(self, lines: list[LogLine], ended: list[tuple[int, str]], now: float, new: list[Finding]) -> list[LogLine]:
        engine = self.engine
        attributed: list[LogLine] = []
        ends = iter(ended)
        next_end = next(ends, None)
        for index, line in enumerate(lines):
            while next_end is not None and next_end[0] <= index:
                new += self._taken(engine.flush(next_end[1]))
                next_end = next(ends, None)
            line = self._attribute(line)
            attributed.append(line)
            if self._tracking_progress:
                self.progress.feed(line.text, line.rank, now, line.file)
            if self._probation is not None and not self._probation.trained:
                self._probation.trained = trains(line)
            new += self._taken(engine.feed(line))
            if self._novelty is not None and (news := self._novelty.observe(line)) is not None:
                new.append(engine.add_new(news))
            self._quiet_since[line.file] = now
        while next_end is not None:
            new += self._taken(engine.flush(next_end[1]))
            next_end = next(ends, None)
        return attributed

    def _follow_partial_lines(self, now: float) -> None:
        """A progress bar that redraws its line with \\r and never ends it (tqdm, until the loop
        is done) says the progress too: each file's partial last line, when it changed, goes to
        the progress tracker (not to the engine: it is no line yet)."""
        for path, text in self.follower.pending().items():
            if self._partial_seen.get(path) != text:
                self._partial_seen[path] = text
                line = self._attribute(LogLine(path, 0, text))
                self.progress.feed(line.text, line.rank, now, path)

    def _attribute(self, line: LogLine) -> LogLine:
        """The rank as ``diagnose`` gives it (``ranks.FileRanks``)."""
        ranks = self._file_ranks.get(line.file)
        if ranks is None:
            ranks = self._file_ranks[line.file] = FileRanks(line.file)
        rank = ranks.of(line.text)
        return LogLine(line.file, line.line, line.text, rank, line.left_out) if rank is not None else line

    def _check_nodes(self, step: SessionUpdate) -> None:
        """Every few seconds: the nodes that went quiet now; a node that spoke again is withdrawn."""
        due = [watch for watch in self._node_watches if watch.due()]
        if not due:
            return
        found = {(f.rule, f.node): f for watch in due for f in watch.check()}
        self._withdraw([f for key, f in self._node_findings.items() if key not in found])
        held = {}
        for key, finding in found.items():
            if key in self._node_findings:
                held[key] = self._node_findings[key]
            else:
                held[key] = self.engine.add_new(finding)
                step.new_findings.append(held[key])
        self._node_findings = held

    def _update_stall(self, step: SessionUpdate, now: float) -> None:
        if note := self._stall_passed(self.stall.observe(step.lines, now), now, resumed=step.lines):
            step.new_findings.append(note)
        if self.stall.active is None and not step.lines and self._silence_unexplained():
            finding = self.stall.check(now, self._clock.wall())
            if finding is not None:
                self._stall_held = self.engine.add_new(finding)
                step.new_findings.append(self._stall_held)
                if self.probe is not None:
                    self.probe.trigger("stall")

    def _stall_passed(self, cleared: Finding | None, now: float, exited: bool = False,
                      resumed: Sequence[LogLine] = ()) -> Finding | None:
        """The stall ``cleared`` (if any; ended by output, the lines ``resumed``, or by a clean
        exit) is withdrawn and kept in the history as a note worded by what ended it (the note
        returned): someone away from the screen still learns there was one. What the stacks
        showed during it goes on probation."""
        if cleared is None:
            return None
        if self._stall_held is not None:
            self._withdraw([self._stall_held])
            self._stall_held = None
        note = self.engine.add_new(resolved_note(cleared, self._clock.wall(), exited, resumed))
        on_trial = [f for found in self._evidence.values() for f in found if f.fields.get("trigger") == "stall"]
        if on_trial:
            self._probation = _Probation(now + PROBATION_S, on_trial, any(map(trains, resumed)))
        if self.probe is not None:
            self.probe.rearm()
        return note

    def _look_inside(self, step: SessionUpdate, now: float) -> None:
        """Take the stacks on the first timeout or idle GPUs; judge evidence on probation."""
        new = step.new_findings
        if self.probe is not None:
            if any(is_timeout(f) and f.severity == "error" for f in new):
                self.probe.trigger("timeout")
            if any(f.rule == GPUS_IDLE_RULE for f in new):
                self.probe.trigger("gpus-idle")
        self._judge_probation(new, now)

    def _judge_probation(self, new: list[Finding], now: float) -> None:
        """Evidence on probation: kept when a failure follows the silence (``new``), withdrawn
        when PROBATION_S passed without one."""
        if self._probation is None:
            return
        if any(f.severity == "error" and f.origin not in EVIDENCE_ORIGINS for f in new):
            self._probation = None  # the silence ended in a failure: it was a hang, keep what it showed
        elif now >= self._probation.until:
            on_trial, self._probation = self._probation.findings, None
            self._withdraw(on_trial)

    def _replace_evidence(self, finding: Finding) -> None:
        """A newer capture's findings replace the older capture's of the same origin, unless they
        say less: a capture taken as the ranks exit must not hide the one taken while they hung."""
        current = self._evidence.get(finding.origin, [])
        if current and current[0].fields.get("taken") == finding.fields.get("taken"):
            current.append(finding)  # the same capture's (a dump analysis may make several)
            return
        if current and SEVERITY_ORDER[finding.severity] > min(SEVERITY_ORDER[f.severity] for f in current):
            self._withdraw([finding])
            return
        self._withdraw(current)
        self._evidence[finding.origin] = [finding]

    def _withdraw(self, findings: list[Finding]) -> None:
        """Findings that are no longer true (output resumed, a newer capture): gone from the
        findings, and named in the next step's ``cleared``."""
        for finding in findings:
            if self.engine.withdraw(finding):
                self._withdrawn.append(finding.id)
            for found in self._evidence.values():
                if finding in found:
                    found.remove(finding)

    def _silence_unexplained(self) -> bool:
        return not any(f.severity == "error" for f in self.engine.findings)
