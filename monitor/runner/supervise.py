"""``monitor run`` from start to end: preflight, launch, watch (TUI or headless), explain, and
retry when the policy allows. Everything the monitor says goes to stderr, so that in headless
mode stdout carries exactly the job's bytes."""

from __future__ import annotations

import copy
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from monitor.diagnosis.changes import changes
from monitor.diagnosis.novelty import Against, run_templates, save_templates, templates_of
from monitor.files import why
from monitor.flight_recorder import variables as flight_recorder
from monitor.logs.runs import last_good, log_files, runs_in, side_record
from monitor.metrics.sampler import Sampler
from monitor.metrics.samples_file import SamplesFile, samples_path
from monitor.model import Diagnosis, Finding, one_line
from monitor.runner import explain, launchers, preflight, restart
from monitor.runner.environment import EnvironmentProbe
from monitor.runner.job import CaptureOptions, Job, JobStartError, new_log_path, side_file
from monitor.runner.recorder import write_state
from monitor.session.feeds import MetricsPump, SamplerFeed
from monitor.session.hang_probe import HangProbe
from monitor.session.job_session import JobSession
from monitor.session.straggler_watch import INTERVAL_S as STRAGGLER_INTERVAL_S
from monitor.session.straggler_watch import StragglerWatch
from monitor.straggler.finding import summary as straggler_summary
from monitor.straggler.model import Scores
from monitor.text import say

if TYPE_CHECKING:  # imported where used: prometheus_client only when an endpoint is asked for
    from monitor.runner.collectives_check import Gate
    from monitor.runner.node import NodeRecord
    from monitor.session.prometheus import JobExporter

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class RunOptions:
    command: list[str]
    log_dir: Path = Path("logs")
    headless: bool = False
    preflight: bool = True
    max_restarts: int = 0
    checkpoint_dirs: list[Path] = field(default_factory=list)
    grace_s: float = 10.0
    restart_delay_s: float = 5.0
    # Silence before the session reports a possible hang (None: the live session's default).
    stall_after_s: float | None = None
    # Turn on the job's flight recorder (unless it set the variables itself), dumps in the run's folder.
    flight_recorder: bool = True
    # One node of a multi-node job (``--job-dir``): this node's name; ``log_dir`` is its folder there.
    node: str | None = None
    # Serve the job's metrics to Prometheus on this port and address (loopback unless asked),
    # and/or keep them in this textfile.
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    textfile: Path | None = None
    # Seconds between two looks at every rank's stack for the straggler scores (0: none).
    straggler_interval_s: float = STRAGGLER_INTERVAL_S
    # Asked before each launch with the attempt's log path (``--check-collectives``): findings for
    # the session, or an exit code that stops the launch (``collectives_check.before_launch``).
    before_launch: Callable[[Path], Gate] | None = None


@dataclass
class Outlets:
    """What lives across the attempts of one ``monitor run``: this node's record of a multi-node
    job, the Prometheus endpoint; each attempt's session and samples are handed to them."""

    node: NodeRecord | None = None
    exporter: JobExporter | None = None

    def observers(self) -> list:
        return [outlet.observe for outlet in (self.node, self.exporter) if outlet is not None]


def _finding_line(finding: Finding) -> str:
    return f"[{finding.severity}] {finding.title}. {finding.remedy.strip()}"


class StopForwarder:
    """While installed, SIGINT/SIGTERM/SIGHUP to the monitor go to the job (a second one kills)."""

    def __init__(self) -> None:
        self.job: Job | None = None
        self.received: str | None = None
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}

    def __enter__(self) -> StopForwarder:
        for signum in STOP_SIGNALS:
            previous = signal.getsignal(signum)
            if previous == signal.SIG_IGN:
                continue  # nohup, or a background job without job control: stay deaf to it
            self._previous[signum] = previous
            signal.signal(signum, self._forward)
        return self

    def __exit__(self, *exc) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def attach(self, job: Job) -> None:
        """Forward to ``job`` from now on, and pass on a signal that came while it was starting."""
        self.job = job
        if self.received is not None:
            job.stop(signal.Signals[self.received])

    def _forward(self, signum: int, _frame) -> None:
        self.received = signal.Signals(signum).name
        if signum == signal.SIGHUP:
            _leave_hung_up_terminal()
        if self.job is not None:
            self.job.stop(signum)


def _leave_hung_up_terminal() -> None:
    """The terminal is gone: writes to it now fail or hang (the screen's exit sequence, the end
    report), and the monitor would never get to save the diagnosis. Point stdout and stderr at
    /dev/null; the log and the files beside it still tell the whole story."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


def _attached_to_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


# What shows a job on a screen: ``present(job, session, metrics)`` returns when the user leaves
# it (``monitor.tui.launch_run``, passed in by the command: the runner never imports the UI).
Presenter = Callable[[Job, JobSession, SamplerFeed], object]


def run(options: RunOptions, catalogue, present: Presenter | None = None) -> int:
    """Preflight, launch, watch (on ``present``'s screen, or headless), explain and maybe
    retry; returns the job's exit code. ``catalogue``: the rules (``load_catalogue``)."""
    env = dict(os.environ)
    plan = launchers.parse(options.command, env)
    checks: list[Finding] = []
    if options.preflight:
        checks = preflight.run_checks(plan, env, options.log_dir, options.checkpoint_dirs)
        for finding in checks:
            say(f"preflight {_finding_line(finding)}")
    if present is not None and not options.headless and not _attached_to_terminal():
        say("not attached to a terminal (batch job?); running headless")
    if options.headless or not _attached_to_terminal():
        present = None
    if present is not None:
        say("the screen owns the terminal: the job's stdin is /dev/null (--headless passes it through)")
    outlets = _outlets(options, plan, env)
    attempt, previous = 1, None
    while True:
        code, decision, previous = _attempt(options, plan, catalogue, checks, present, attempt, previous, outlets)
        if code is None or not decision.retry:
            return 0 if code is None else code
        say(f"restarting in {options.restart_delay_s:g} s: {decision.reason}")
        time.sleep(options.restart_delay_s)  # let a flaky link or a slow node settle
        attempt += 1


def _outlets(options: RunOptions, plan: launchers.LaunchPlan, env: dict[str, str]) -> Outlets:
    """This node's record (``--job-dir``) and the metrics endpoint (``--metrics-port``,
    ``--textfile``); a failure of either is said in one line and the job runs without it."""
    outlets = Outlets()
    if options.node is not None:
        from monitor.runner.node import NodeRecord

        outlets.node = NodeRecord(options.log_dir, options.node, plan, env, os.getpid())
        if outlets.node.error:
            say(outlets.node.error)
    if options.metrics_port is None and options.textfile is None:
        return outlets
    from monitor.logs.nodes import job_id, node_name
    from monitor.session.prometheus import JobExporter, ServeError

    exporter = JobExporter(job_id=job_id(env), node=options.node or node_name())
    if options.metrics_port is not None:
        try:
            url = exporter.serve(options.metrics_port, options.metrics_addr)
            say(f"serving the job's metrics for Prometheus at {url}")
        except ServeError as exc:
            say(f"{exc}; the job runs without it")
    if options.textfile is not None:
        exporter.keep_textfile(str(options.textfile))
    outlets.exporter = exporter
    return outlets


def _attempt(options: RunOptions, plan: launchers.LaunchPlan, catalogue, checks: list[Finding],
             present: Presenter | None, attempt: int, previous: str | None, outlets: Outlets | None = None
             ) -> tuple[int | None, restart.RestartDecision, str | None]:
    """One launch to its end. Returns the exit code (None: left running), the restart decision
    and the root cause's category (for the next decision)."""
    log_path = new_log_path(options.log_dir)
    meta: dict[str, Any] = {"command": options.command, "cwd": os.getcwd(), "attempt": attempt,
            "launcher": plan.launcher, "under_srun": plan.under_srun, "world_size": plan.world_size,
            "slurm": launchers.slurm_context(), "log": str(log_path),
            "preflight": [f.to_json() for f in checks]}
    if error := write_state(side_file(log_path, "meta"), meta):
        say(error)
    if options.before_launch is not None:
        gate = options.before_launch(log_path)
        checks = [*checks, *gate.findings]
        if gate.stop_code is not None:
            return gate.stop_code, restart.RestartDecision(False, gate.reason), None
    headless = present is None
    capture = CaptureOptions(tee=headless, use_pty=not headless or sys.stdout.isatty(),
                             stdin=headless, grace_s=options.grace_s)
    recorder, env = _flight_recorder(options, log_path, attempt)
    with StopForwarder() as forwarder:
        try:
            job = Job.start(options.command, log_path, capture, env)
        except JobStartError as exc:
            say(f"{exc}")
            return exc.exit_code, restart.RestartDecision(False, str(exc)), None
        forwarder.attach(job)
        say(f"recording to {log_path} (job pid {job.pid})")
        environment = EnvironmentProbe(options.command, meta["cwd"])
        environment.start()  # beside the job, never before it
        good = _last_good_run(log_path)
        outlets = outlets or Outlets()
        publisher = _publisher(outlets)
        session, metrics = open_session(job, catalogue, checks, options.stall_after_s, recorder,
                                        on_step=publisher, observers=outlets.observers(),
                                        against=good[0] if good else None,
                                        straggler_interval=options.straggler_interval_s)
        if outlets.exporter is not None and metrics.straggler is not None:
            outlets.exporter.scores = lambda watch=metrics.straggler: watch.latest  # this attempt's
        if publisher is not None:
            session.track_progress()  # the endpoint's monitor_training_* series
        watcher = _start_checkpoint_watch(options.checkpoint_dirs, job, session.post)
        try:
            if present is not None and not _run_tui(present, job, session, metrics):  # not headless
                say(f"the job is still running (pid {job.pid}) and recording to {log_path}; "
                    f"follow it with `monitor watch {log_path}`")
                session.close()
                return None, restart.RestartDecision(False, "the monitor left the job running"), None
            code = _follow_to_end(job, session, MetricsPump(metrics, warn=say) if headless else None)
        finally:
            if watcher:
                watcher.stop()
            metrics.close()
    scores = metrics.straggler.latest if metrics.straggler is not None else None
    meta["environment"] = environment.result()
    if good is not None and good[1] and meta["environment"]:
        session.against = replace(good[0], changes=tuple(changes(good[1], meta["environment"])))
    diagnosis = _explain(job, code, session)
    _keep_templates(job)
    if publisher is not None:
        publisher.publish(session, exit_code=code)
    if recorder is not None:
        recorder.tidy()
    stopped = bool(job.state().get("stop_signal")) or forwarder.received is not None
    decision = restart.decide(diagnosis, code, attempt, options.max_restarts,
                              stopped_by_user=stopped, previous_category=previous)
    _report(job, diagnosis, code, decision, meta, options.max_restarts, scores)
    return code, decision, diagnosis.root_cause.category if diagnosis.root_cause else None


def _last_good_run(log_path: Path) -> tuple[Against, dict] | None:
    """The newest earlier run of the log folder that exited 0 (what this run is compared with,
    ``diagnosis/novelty.py``), with its recorded environment; None when there is none."""
    runs = runs_in(log_path.parent)
    this = next((run for run in runs if log_path in run.paths), None)
    good = last_good(runs, this) if this is not None else None
    if good is None:
        if this is not None and runs.index(this) > 0:
            say(f"no earlier run in {log_path.parent} ended well (exited 0, or got to a further step): "
                "nothing to compare this one with")
        return None
    return (Against(good.name, frozenset(run_templates(log_files(good)))),
            side_record(good, "meta").get("environment") or {})


def _keep_templates(job: Job) -> None:
    """The run's line templates beside its log (run-X.templates), for the runs after it."""
    if error := save_templates(job.log_path, templates_of([job.log_path, *job.extra_log_paths()])):
        say(error)


def _flight_recorder(options: RunOptions, log_path: Path, attempt: int
                     ) -> tuple[flight_recorder.RecorderPlan | None, dict[str, str] | None]:
    """The flight-recorder plan of this attempt (dumps in ``run-X.fr/``) and the job's
    environment with it; (None, None) when turned off or the folder cannot be made."""
    if not options.flight_recorder:
        return None, None
    # Absolute: the ranks may change folder, and `monitor stacks` finds the pipes from elsewhere.
    plan = flight_recorder.plan(flight_recorder.dumps_folder(log_path.absolute()), os.environ)
    try:
        plan.folder.mkdir(mode=0o700)  # new, like the log: never a folder or link someone put there
    except OSError as exc:
        say(f"flight recorder not set up: cannot make {plan.folder}: {exc.strerror}")
        return None, None
    if attempt == 1:
        say(plan.describe())
    return plan, {**os.environ, **plan.set}


def _publisher(outlets: Outlets):
    """The session's status for the metrics endpoint, when there is one."""
    if outlets.exporter is None:
        return None
    from monitor.session.status import StatusPublisher

    publisher = StatusPublisher()
    outlets.exporter.status = lambda: publisher.latest
    return publisher


def open_session(job: Job, catalogue, checks: Sequence[Finding] = (), stall_after: float | None = None,
                 recorder: flight_recorder.RecorderPlan | None = None, *, on_step=None, observers=(),
                 against: Against | None = None, straggler_interval: float = 0.0) -> tuple[JobSession, SamplerFeed]:
    """The job's session (its logs, the preflight findings, its stop requests, a probe that
    takes the ranks' stacks and dumps when they seem to hang) and its metrics feed (the job's
    processes; each sample kept in ``run-X.metrics.jsonl``, findings posted to the session):
    what the screen shows and the end report explains. ``straggler_interval``: seconds between
    two looks at the ranks for the straggler scores (0: none), sampled until the feed is closed."""
    probe = HangProbe(job.pids, job.log_path, lambda findings: session.post(findings), recorder)
    straggler = (StragglerWatch(job.pids, lambda findings: session.post(findings), interval=straggler_interval,
                                warn=say) if straggler_interval > 0 else None)
    session = JobSession([job.log_path, *job.extra_log_paths()], catalogue, stall_after=stall_after,
                         stop_requested=lambda: job.stop_requested, probe=probe,
                         on_step=_both(on_step, straggler.lines if straggler is not None else None), against=against,
                         more_paths=job.extra_log_paths,  # torchrun creates per-rank files late
                         world_size=launchers.parse(job.command).world_size)
    session.add([copy.copy(finding) for finding in checks])  # one copy per attempt: the session numbers them
    metrics = SamplerFeed(Sampler(job_pids=job.pids, watch_dirs=[str(job.log_path.parent)]), session.post,
                          samples_file=_samples_file(job.log_path), observers=observers,
                          straggler=straggler.start() if straggler is not None else None)
    return session, metrics


def _both(first, second):
    """One ``on_step`` calling both (either may be None)."""
    if first is None or second is None:
        return first or second
    return lambda session, lines: (first(session, lines), second(session, lines))


def _samples_file(log_path: Path) -> SamplesFile | None:
    try:
        return SamplesFile(samples_path(log_path), new=True)
    except OSError as exc:  # the metrics file is a nicety; the job's log is what matters
        say(f"metrics not kept: {samples_path(log_path)}: {why(exc)}")
        return None


def _follow_to_end(job: Job, session: JobSession, pump: MetricsPump | None) -> int:
    """Diagnose the job's output as it comes until the job has ended (the screen did this while
    it was up); with ``pump`` (headless), sample the metrics meanwhile. Findings the job's output
    does not show (metrics, checkpoints, a stall) are said on stderr as they come."""
    if pump is not None:
        pump.start()
    try:
        while (code := job.wait(timeout=0)) is None:
            update = session.step(timeout=0.25)
            for finding in update.new_findings:
                if pump is not None and finding.origin != "log":
                    say(one_line(finding))
    finally:
        if pump is not None:
            pump.stop()
    return code


def _explain(job: Job, code: int, session: JobSession) -> Diagnosis:
    """The session's diagnosis of the whole run, with how the job ended and what went wrong
    in the monitor itself."""
    session.close()  # reads the last bytes, and what the metrics and checkpoint threads posted
    state = job.state()
    session.job_ended(explain.exit_finding(job.log_path, code, state.get("stop_signal"), bool(state.get("killed"))))
    diagnosis = session.diagnosis()
    if job.recorder_lost:
        diagnosis.problems.append("the recorder died before the job ended: the log may be incomplete")
    if how := state.get("recorder_killed"):
        diagnosis.problems.append(
            f"the recorder {how} while the job ran; the job went on, and the monitor recorded the rest of "
            f"its output (the log marks where) and its exit code")
    if log_error := state.get("log_error"):
        lost = state.get("log_lost_bytes")
        where = f" ({lost} bytes lost; the log marks where)" if lost else ""
        diagnosis.problems.append(f"the log is incomplete, writing it failed: {log_error}{where}")
    if state_error := state.get("state_error"):
        diagnosis.problems.append(f"the recorder's state file is out of date: {state_error}")
    return diagnosis


def _run_tui(present: Presenter, job: Job, session: JobSession, metrics: SamplerFeed) -> bool:
    """Show the screen; True when the monitor should wait for the job's end and explain it
    (it ended, it is being stopped, or the UI crashed), False when the user left it running."""
    try:
        present(job, session, metrics)
    except Exception as exc:  # the UI must never take the job down with it
        say(f"the terminal UI failed ({type(exc).__name__}: {exc}); the job keeps running and "
            f"recording to {job.log_path}")
        return True
    return job.exit_code() is not None or job.stop_requested


def _start_checkpoint_watch(dirs: list[Path], job: Job, post):
    if not dirs:
        return None
    from monitor.checkpoints.watch import CheckpointWatcher

    watcher = CheckpointWatcher(dirs, on_finding=lambda finding: post([finding]), since=job.started,
                                job_pids=job.pids)
    watcher.start()
    return watcher


def _stopped_leftovers(leftovers: list[dict]) -> str:
    """The line naming the processes the job left running with its output open, which the
    recorder stopped once the job had ended (``nohup helper &`` keeps the output it was given)."""
    named = ", ".join(f"pid {process['pid']} ({process['command']})" for process in leftovers)
    return (f"the job ended, but what it started still held its output, so it was stopped: {named} "
            f"(a helper meant to outlive the job must redirect its output: nohup helper > helper.log 2>&1 &)")


def _report(job: Job, diagnosis: Diagnosis, code: int, decision: restart.RestartDecision,
            meta: dict, max_restarts: int, scores: Scores | None = None) -> None:
    explain.write(diagnosis, sys.stderr, code)
    if scores is not None and (line := straggler_summary(scores)):
        say(line)
    if slurm := meta["slurm"]:
        say("SLURM " + ", ".join(f"{key}={value}" for key, value in slurm.items()))
    state = job.state()
    if dropped := state.get("tee_dropped_bytes", 0):
        where = state.get("tee_destination", "the terminal")
        why = f"writing to {where} failed ({state['tee_error']})" if state.get("tee_error") else f"{where} was too slow"
        say(f"{why}: {dropped} bytes were not shown (all are in {job.log_path})")
    if leftovers := state.get("leftovers"):
        say(_stopped_leftovers(leftovers))
    if max_restarts:
        say(f"restart policy: {'retry' if decision.retry else 'no retry'}: {decision.reason}")
    run_info = {"command": job.command, "launcher": meta["launcher"], "exit_code": code,
                "log": str(job.log_path),
                "extra_logs": [str(p) for p in job.extra_log_paths()], "slurm": meta["slurm"],
                "attempt": meta["attempt"], "restart": decision.to_json()}
    if scores is not None and scores.ranks:
        run_info["rank_wait_fraction"] = {str(rank): round(share, 3) for rank, share in scores.wait_fractions().items()}
    path = side_file(job.log_path, "diagnosis")
    save_error = write_state(path, {"run": run_info, **diagnosis.to_json()})
    # The per-rank files the run read beside its log (torchrun --log-dir), for `diagnose` of the log.
    meta.update(exit_code=code, ended=time.time(), restart=decision.to_json(),
                extra_logs=[str(p.absolute()) for p in job.extra_log_paths()])
    for error in (save_error, write_state(side_file(job.log_path, "meta"), meta)):
        if error:
            say(error)
    say(f"exit code {code}" + ("" if save_error else f"; diagnosis saved to {path}"))
    # Last, where the eye lands: the report's top has scrolled off behind the cascade by now.
    from monitor.diagnosis.report import verdict

    for line in verdict(diagnosis):
        say(line)
