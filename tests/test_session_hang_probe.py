"""The session looks inside the job when it suspects a hang, and weighs what it sees: a probe
that records what it was asked, a real log file, the session's clock moved by the test."""

from __future__ import annotations

import dataclasses

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.model import Category, Finding
from monitor.session import job_session
from monitor.session.job_session import JobSession

from tests.clock_helpers import FakeClock
from test_session_stall import step, write


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


class RecordingProbe:
    """Stands in for HangProbe: records the triggers (taking stacks needs a job)."""

    def __init__(self) -> None:
        self.triggers: list[str] = []
        self.rearmed = 0

    def trigger(self, reason: str) -> bool:
        self.triggers.append(reason)
        return True

    def rearm(self) -> None:
        self.rearmed += 1

    def join(self, timeout=None) -> None:
        pass


def _stacks(severity: str = "error", trigger: str = "stall", taken: float = 1.0, rank: int = 2) -> Finding:
    return Finding(rule="stacks", category=Category.HANG, severity=severity, role="root", origin="stacks",
                   title=f"rank {rank} is in load_batch (train.py:88) while ranks 0,1,3 wait in all_reduce",
                   rank=rank, fields={"trigger": trigger, "taken": f"{taken:.3f}"})


def _held(session, posted: Finding) -> Finding | None:
    """The value the session holds for a finding posted to it (findings are frozen: the session
    holds a copy with its place in the order and its time), or None."""
    def bare(finding: Finding) -> Finding:
        return dataclasses.replace(finding, seq=0, arrival=0, first_seen=None)

    return next((f for f in session.findings if bare(f) == bare(posted)), None)


def _silent_session(tmp_path, catalogue, probe):
    log = tmp_path / "job.log"
    log.touch()
    clock = FakeClock()
    session = JobSession([str(log)], catalogue, stall_after=5, clock=clock, probe=probe)
    write(log, "[rank0]: step 1", "[rank2]: step 1")
    step(session, clock, 0.1)
    update = step(session, clock, 6)
    assert [f.rule for f in update.new_findings] == ["possible-hang"]
    return log, clock, session


def _stacks_taken(tmp_path, catalogue):
    """A silent session whose stall took the stacks: (log, clock, session, the posted evidence)."""
    log, clock, session = _silent_session(tmp_path, catalogue, RecordingProbe())
    evidence = _stacks()
    session.post([evidence])
    step(session, clock, 1)
    return log, clock, session, evidence


def test_a_stall_takes_the_stacks_and_their_finding_becomes_the_root_cause(tmp_path, catalogue):
    probe = RecordingProbe()
    log, clock, session = _silent_session(tmp_path, catalogue, probe)
    assert probe.triggers == ["stall"]
    evidence = _stacks()
    session.post([evidence])
    (held,) = step(session, clock, 1).new_findings
    assert held == _held(session, evidence)
    assert session.root_cause() is held  # a named rank says more than the silence
    session.close()


def test_the_first_timeout_takes_them_again(tmp_path, catalogue):
    probe = RecordingProbe()
    log, clock, session = _silent_session(tmp_path, catalogue, probe)
    write(log, "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting 60000ms for recv operation to complete")
    step(session, clock, 0.1)
    step(session, clock, 1)  # the record completes when its file has been quiet
    assert probe.triggers == ["stall", "timeout"] and probe.rearmed == 1
    session.close()


def test_evidence_of_a_silence_that_ends_well_is_withdrawn(tmp_path, catalogue):
    """A long evaluation on one rank looks like a hang until it ends."""
    log, clock, session, evidence = _stacks_taken(tmp_path, catalogue)
    write(log, "[rank0]: step 2", "[rank2]: step 2")
    step(session, clock, 0.1)
    held = _held(session, evidence)
    assert held is not None  # on probation
    update = step(session, clock, job_session.PROBATION_S)
    assert held.id in update.cleared and _held(session, evidence) is None
    assert session.root_cause() is None
    session.close()


def test_evidence_of_a_silence_that_ends_in_errors_is_kept(tmp_path, catalogue):
    log, clock, session, evidence = _stacks_taken(tmp_path, catalogue)
    write(log, "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting 60000ms for recv operation to complete")
    step(session, clock, 0.1)
    step(session, clock, 1)
    step(session, clock, job_session.PROBATION_S)
    held = _held(session, evidence)
    root = session.root_cause()
    # The stacks name the rank and its place; the job ended in the gloo timeout, whose category it takes.
    assert held is not None and root is not None and root.id == held.id and root.title == held.title
    assert root.category == "gloo_timeout"
    session.close()


def test_a_newer_capture_replaces_the_older_unless_it_says_less(tmp_path, catalogue):
    probe = RecordingProbe()
    log, clock, session = _silent_session(tmp_path, catalogue, probe)
    first = _stacks(taken=1.0)
    session.post([first])
    step(session, clock, 1)
    exiting = _stacks(severity="info", trigger="timeout", taken=2.0)  # taken as the ranks exit
    session.post([exiting])
    step(session, clock, 1)
    held_first = _held(session, first)
    assert held_first is not None and _held(session, exiting) is None
    newer = _stacks(trigger="request", taken=3.0, rank=1)
    session.post([newer])
    update = step(session, clock, 1)
    assert _held(session, newer) is not None and _held(session, first) is None and held_first.id in update.cleared
    session.close()


def test_a_clean_exit_withdraws_evidence_on_probation(tmp_path, catalogue):
    log, clock, session, evidence = _stacks_taken(tmp_path, catalogue)
    write(log, "[rank0]: step 2")
    step(session, clock, 0.1)
    session.close()
    session.job_ended(None)
    assert _held(session, evidence) is None and session.diagnosis().root_cause is None


KILL_LINES = (
    "W0315 10:00:00.000000 1234 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM death signal, shutting down workers",
    "W0315 10:00:00.000000 1234 torch/distributed/elastic/multiprocessing/api.py:898] Sending process 1235 closing signal SIGTERM",
)


def test_a_job_stopped_after_training_on_reports_without_the_silences_evidence(tmp_path, catalogue):
    """The job trained on after the silence (a step later than any before it) and was stopped
    before PROBATION_S passed: what the stacks showed during that silence is not why it ended."""
    from monitor.runner.explain import exit_finding
    log, clock, session, evidence = _stacks_taken(tmp_path, catalogue)
    write(log, "[rank0]: step 2 | loss 0.51", "[rank2]: step 2 | loss 0.52")
    step(session, clock, 0.1)
    assert _held(session, evidence) is not None  # on probation
    session.request_stop()
    write(log, *KILL_LINES)
    session.close()
    session.job_ended(exit_finding(log, 143, "SIGTERM"))
    assert _held(session, evidence) is None
    root = session.diagnosis().root_cause
    assert root is None or root.origin != evidence.origin


@pytest.mark.parametrize("order", ["close-then-ended", "ended-then-close"])
def test_a_hung_job_stopped_keeps_what_its_stacks_showed(tmp_path, catalogue, order):
    """A stop's own lines end the silence too (torchrun's death-signal lines); with no training
    after them the silence was the hang they ended, however the session reads its last lines
    (`monitor run` closes first, `monitor watch` says how the job ended first)."""
    from monitor.runner.explain import exit_finding
    log, clock, session, evidence = _stacks_taken(tmp_path, catalogue)
    session.request_stop()
    write(log, *KILL_LINES)
    step(session, clock, 0.1)
    if order == "close-then-ended":
        session.close()
    session.job_ended(exit_finding(log, 143, "SIGTERM"))
    session.close()
    assert _held(session, evidence) is not None and session.root_cause() is _held(session, evidence)


def test_errors_in_the_last_lines_keep_evidence_on_probation(tmp_path, catalogue):
    """The silence passed, then the job's last lines (read as the session closes) hold a failure:
    the silence was the start of it, and what the stacks showed stays."""
    from monitor.runner.explain import exit_finding
    log, clock, session, evidence = _stacks_taken(tmp_path, catalogue)
    write(log, "[rank0]: step 2")
    step(session, clock, 0.1)
    write(log, "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting 60000ms for recv operation to complete")
    session.close()
    session.job_ended(exit_finding(log, 1, None))
    assert _held(session, evidence) is not None
