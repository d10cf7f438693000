"""The collective test before a job (``monitor run --check-collectives``, ``monitor
check-collectives``): the job's own launcher and rendezvous start ``collectives/exercise.py`` in
place of the job's script, and its measurement is judged (``collectives/verdict.py``).

The test's output, then the verdict's lines, go to ``<stem>.collectives.txt`` and what it found
to ``<stem>.collectives.json`` beside the run's log (``run-X``), each created new and owner-only.
The measurement passes through a private folder (0700) the exercise writes into. A test that
fails or does not finish in ``TIMEOUT_S`` is one line; it never raises.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from itertools import count
from pathlib import Path

from monitor.collectives import exercise
from monitor.collectives.measurement import MeasurementError, read
from monitor.collectives.verdict import Outlier, Verdict, judge
from monitor.files import create_new, why
from monitor.model import Category, Finding
from monitor.runner.launchers import option_key, script_slot
from monitor.runner.recorder import write_state
from monitor.text import safe_text, say

EXERCISE = Path(exercise.__file__).resolve()
# Long enough for the other nodes' launchers to join the rendezvous (they start when their own
# `monitor run` does); the test itself takes seconds.
TIMEOUT_S = 180.0
# torchrun's options that do not suit the test: its output goes to our file whole, it is not a
# module, and a failed test is not retried.
DROPPED_OPTIONS = {"log_dir", "redirects", "r", "tee", "t", "local_ranks_filter", "no_python", "m", "module",
                   "run_path", "max_restarts"}
TAIL_BYTES = 8192


class CannotCheck(Exception):
    """The launch is not one the test can ride on: one line."""


def cannot_check(command: list[str]) -> str | None:
    """Why the test cannot ride on ``command``'s launcher, or None when it can."""
    if script_slot(command) is not None:
        return None
    name = safe_text(Path(command[0]).name) if command else "nothing"
    return (f"the collective test rides on torchrun (or python -m torch.distributed.run) or srun, with or "
            f"without the other; this job starts with {name}")


def exercise_command(command: list[str] | None, out: Path, timeout_s: float = TIMEOUT_S) -> list[str]:
    """``command`` with the exercise in place of the job's script (None: every task of this SLURM
    allocation, ``srun python exercise.py``); raises ``CannotCheck``."""
    arguments = [str(EXERCISE), "--out", str(out), "--timeout", f"{timeout_s:g}"]
    if command is None:
        return ["srun", sys.executable, *arguments]
    slot = script_slot(command)
    if slot is None:
        raise CannotCheck(cannot_check(command))
    if slot.python:
        return [*slot.head, *slot.python, *arguments]
    options = [token for group in slot.options if option_key(list(group)) not in DROPPED_OPTIONS for token in group]
    return [*slot.head, *options, *arguments]


@dataclass(frozen=True)
class CheckResult:
    verdict: Verdict | None
    problem: str | None          # why there is no verdict
    seconds: float               # the whole check, launcher start to verdict
    saved: Path | None           # <stem>.collectives.json, when written

    def lines(self) -> list[str]:
        lines = self.verdict.lines() if self.verdict is not None else [f"collectives check failed: {self.problem}"]
        kept = f"; kept in {self.saved}" if self.saved is not None else ""
        lines[-1] += f" (the check took {self.seconds:.1f} s{kept})"
        return lines


def check(command: list[str] | None, stem: Path, env: dict[str, str] | None = None,
          timeout_s: float = TIMEOUT_S) -> CheckResult:
    """Run the test through ``command``'s launcher, judge it, keep both beside ``stem`` (the
    run's log path: ``run-X.collectives.*``; or a name of our own, followed by ``-2``, ``-3``...
    when taken)."""
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix="monitor-collectives-"))  # 0700, ours
    saved = stem.with_name(f"{stem.stem}.collectives.json")
    out = folder / "measurement.json"
    record: dict = {}
    verdict = problem = None
    try:
        launch = exercise_command(command, out, timeout_s)
        record["command"] = launch
        output, fd = create_new(stem.with_name(f"{name}.collectives.txt") for name in _names(stem.stem))
        saved = output.with_name(output.name.replace(".collectives.txt", ".collectives.json"))
        with os.fdopen(fd, "wb") as log:
            code = _run(launch, log, env, timeout_s, folder)
        record["exit_code"] = code
        if code is None:
            problem = f"the test did not end within {timeout_s:g} s (a node that never joined the rendezvous?); its output: {output}"
        elif code != 0:
            problem = f"the test exited {code}: {_last_error(output)} (all of it in {output})"
        else:
            measurement = read(out)
            verdict = judge(measurement)
            record["measurement"] = asdict(measurement)
            _add_verdict(output, verdict)
    except CannotCheck as exc:
        problem = str(exc)
    except MeasurementError as exc:
        problem = f"the test wrote no usable measurement: {exc}"
    except OSError as exc:
        problem = f"the test could not be started: {exc.filename}: {why(exc)}" if exc.filename else why(exc)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    seconds = time.monotonic() - started
    record.update(seconds=seconds, problem=problem, verdict=verdict.to_json() if verdict else None)
    if error := write_state(saved, record):
        say(error)
        return CheckResult(verdict, problem, seconds, None)
    return CheckResult(verdict, problem, seconds, saved)


def _add_verdict(output: Path, verdict: Verdict) -> None:
    """The verdict's lines after the test's output, so that the .txt read alone says it too."""
    try:
        fd = os.open(output, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        with os.fdopen(fd, "wb") as log:
            log.write("".join(f"monitor: {safe_text(line)}\n" for line in verdict.lines()).encode())
    except OSError as exc:
        say(f"the collectives check's verdict is not in {output}: {why(exc)}")


def _names(stem: str) -> Iterator[str]:
    yield stem
    for n in count(2):
        yield f"{stem}-{n}"


def _run(launch: list[str], log, env: dict[str, str] | None, timeout_s: float, private: Path) -> int | None:
    """The launcher's exit code, or None when it ran past ``timeout_s`` (then it and everything
    it started are stopped: a session of their own, signalled whole). Ctrl-C, SIGTERM or SIGHUP
    to the monitor meanwhile stop them too before they take their usual course: the test's
    session hears none of the terminal's signals, and a launcher left behind would hold the
    rendezvous port the job is about to use; and ``private`` (the measurement's folder) is
    removed, since a signal's default action ends the monitor before ``check`` could."""
    process = subprocess.Popen(launch, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    with _StopsTheTest(process, private):
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _stop(process)
            return None


class _StopsTheTest:
    """While in force, a stop signal to the monitor stops the test's process group and removes the
    measurement's private folder first, then takes its usual course (the handler before, or the
    default: the monitor ends). A signal in the moments before it is in force or after (the
    folder made, the launcher not yet started; the launcher ended) ends the monitor with the
    folder left, empty, in the temporary directory."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, process: subprocess.Popen, private: Path) -> None:
        self.process = process
        self.private = private
        self.previous: dict = {}

    def __enter__(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in self.SIGNALS:
            previous = signal.getsignal(signum)
            if previous != signal.SIG_IGN:  # nohup: stay deaf to it
                self.previous[signum] = previous
                signal.signal(signum, self._stop_then_pass_on)

    def __exit__(self, *exc) -> None:
        for signum, previous in self.previous.items():
            signal.signal(signum, previous)

    def _stop_then_pass_on(self, signum: int, frame) -> None:
        _stop(self.process)
        shutil.rmtree(self.private, ignore_errors=True)
        self.__exit__()
        previous = self.previous[signum]
        if callable(previous):
            previous(signum, frame)
        else:
            os.kill(os.getpid(), signum)  # the default action, as if we had never been here


def _stop(process: subprocess.Popen) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=5.0)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_error(path: Path) -> str:
    """The line of the test's output that says what went wrong (the last naming an error), cut."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - TAIL_BYTES))
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError as exc:
        return why(exc)
    errors = [line for line in lines if "Error" in line or "error:" in line]
    return safe_text((errors or lines or ["no output"])[-1])[:300]


@dataclass(frozen=True)
class Gate:
    """What the check before a launch says to ``monitor run``: findings for the job's session,
    and an exit code when the job must not be launched (``--check-collectives=strict``)."""

    findings: tuple[Finding, ...]
    stop_code: int | None
    reason: str


def _rule(outlier: Outlier) -> str:
    if outlier.kind != "node":
        return "collectives-slow-rank"
    return "collectives-slow-node-all-reduce" if outlier.metric == "all_reduce" else "collectives-slow-node"


def finding(outlier: Outlier) -> Finding:
    """An outlier as a finding of the run (a warning beside the preflight checks')."""
    return Finding(rule=_rule(outlier),
                   category=Category.PREFLIGHT, severity="warning", role="confirm", title=outlier.title(),
                   rank=outlier.ranks[0] if len(outlier.ranks) == 1 else None, ranks=list(outlier.ranks),
                   remedy=outlier.remedy(), origin="preflight", node=outlier.node)


def before_launch(command: list[str], strict: bool, timeout_s: float = TIMEOUT_S) -> Callable[[Path], Gate]:
    """The check ``monitor run`` makes before each launch, given the attempt's log path: it says
    its lines, and stops the launch in strict mode when anything stands out or the test failed."""

    def gate(log_path: Path) -> Gate:
        try:
            result = check(command, log_path, timeout_s=timeout_s)
        except Exception as exc:  # a fault of the monitor's never decides the job's fate
            say(f"the collectives check failed inside the monitor ({type(exc).__name__}: {exc}); launching")
            return Gate((), None, "")
        for line in result.lines():
            say(line)
        findings = tuple(finding(o) for o in result.verdict.outliers) if result.verdict is not None else ()
        reason = findings[0].title if findings else result.problem
        if strict and reason:
            say(f"--check-collectives=strict: the job is not launched: {reason}")
            return Gate(findings, 1, f"the collectives check: {reason}")
        return Gate(findings, None, "")

    return gate
