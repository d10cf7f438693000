"""The session looks inside the job when it suspects a hang, and weighs what it sees: a probe
that records what it was asked, a real log file, the session's clock moved by the test."""

from __future__ import annotations

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.model import Category, Finding
from monitor.session import job_session
from monitor.session.job_session import JobSession

from test_session_stall import Clock, step, write


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


def _silent_session(tmp_path, catalogue, probe):
    log = tmp_path / "job.log"
    log.touch()
    clock = Clock()
    session = JobSession([str(log)], catalogue, stall_after=5, clock=clock, probe=probe)
    write(log, "[rank0]: step 1", "[rank2]: step 1")
    step(session, clock, 0.1)
    update = step(session, clock, 6)
    assert [f.rule for f in update.new_findings] == ["possible-hang"]
    return log, clock, session


def test_a_stall_takes_the_stacks_and_their_finding_becomes_the_root_cause(tmp_path, catalogue):
    probe = RecordingProbe()
    log, clock, session = _silent_session(tmp_path, catalogue, probe)
    assert probe.triggers == ["stall"]
    evidence = _stacks()
    session.post([evidence])
    assert step(session, clock, 1).new_findings == [evidence]
    assert session.root_cause() is evidence  # a named rank says more than the silence
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
    probe = RecordingProbe()
    log, clock, session = _silent_session(tmp_path, catalogue, probe)
    evidence = _stacks()
    session.post([evidence])
    step(session, clock, 1)
    write(log, "[rank0]: step 2", "[rank2]: step 2")
    step(session, clock, 0.1)
    assert evidence in session.findings  # on probation
    update = step(session, clock, job_session.PROBATION_S)
    assert evidence.id in update.cleared and evidence not in session.findings
    assert session.root_cause() is None
    session.close()


def test_evidence_of_a_silence_that_ends_in_errors_is_kept(tmp_path, catalogue):
    probe = RecordingProbe()
    log, clock, session = _silent_session(tmp_path, catalogue, probe)
    evidence = _stacks()
    session.post([evidence])
    step(session, clock, 1)
    write(log, "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Timed out waiting 60000ms for recv operation to complete")
    step(session, clock, 0.1)
    step(session, clock, 1)
    step(session, clock, job_session.PROBATION_S)
    assert evidence in session.findings and session.root_cause() is evidence
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
    assert first in session.findings and exiting not in session.findings
    newer = _stacks(trigger="request", taken=3.0, rank=1)
    session.post([newer])
    update = step(session, clock, 1)
    assert newer in session.findings and first not in session.findings and first.id in update.cleared
    session.close()


def test_a_clean_exit_withdraws_evidence_on_probation(tmp_path, catalogue):
    probe = RecordingProbe()
    log, clock, session = _silent_session(tmp_path, catalogue, probe)
    evidence = _stacks()
    session.post([evidence])
    step(session, clock, 1)
    write(log, "[rank0]: step 2")
    step(session, clock, 0.1)
    session.close()
    session.job_ended(None)
    assert evidence not in session.findings and session.diagnosis().root_cause is None
