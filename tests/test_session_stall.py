"""Stall detection on a real file, with the session's clock moved by the test (no sleeps)."""

from __future__ import annotations

import pytest

from tests.clock_helpers import FakeClock
from monitor.diagnosis.catalogue import load_catalogue
from monitor.session.job_session import JobSession
from monitor.session.stall import MIN_STALL_S, StallDetector
from monitor.model import LogLine



@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def write(log, *lines: str) -> None:
    with open(log, "a") as handle:
        handle.write("".join(line + "\n" for line in lines))


def step(session, clock: FakeClock, advance: float = 0.0):
    """One step at ``clock.now + advance``, after the follower has seen what was written."""
    clock.advance(advance)
    return session.step(timeout=0)


def test_stall_names_the_rank_that_went_silent_first_and_clears_on_output(tmp_path, catalogue):
    log = tmp_path / "job.log"
    log.touch()
    clock = FakeClock(wall=5000.0)
    session = JobSession([str(log)], catalogue, stall_after=0.8, clock=clock)
    # Both ranks train; rank 1 stops after step 9; rank 0 goes on for 50 more steps, then stops too.
    for index in range(60):
        lines = [f"[rank0]: step {index} loss={1 / (index + 1):.4f}"]
        if index < 10:
            lines.append(f"[rank1]: step {index} loss={1 / (index + 1):.4f}")
        write(log, *lines)
        assert not step(session, clock, 0.03).new_findings
    assert not step(session, clock, 0.5).new_findings  # quiet, under the threshold
    update = step(session, clock, 0.4)
    stall = next(f for f in update.new_findings if f.rule == "possible-hang")
    assert (stall.category, stall.severity) == ("hang", "warning")
    assert stall.fields["first_silent"] == "1" and stall.rank == 1
    assert "rank 1 went silent first" in stall.title
    assert stall.ranks == [0, 1]
    assert stall.evidence[0].startswith("rank 1, silent") and stall.evidence[0].endswith("step 9 loss=0.1000")
    assert stall.evidence[1].endswith("step 59 loss=0.0167")
    assert stall in session.engine.findings
    assert session.diagnosis().root_cause is stall  # nothing failed: the silence is the news
    assert not session.diagnosis().failed
    assert stall.first_seen == pytest.approx(clock.wall() - 0.9)  # when the silence began, by the wall clock

    write(log, "[rank0]: step 60 loss=0.0164")
    update = step(session, clock, 0.1)
    assert update.cleared == [stall.id]
    assert stall not in session.engine.findings
    # It stays in the history as passed (#14: someone away never learnt there was one), never a cause.
    (passed,) = [f for f in update.new_findings if f.rule == "possible-hang-passed"]
    assert (passed.severity, passed.role, passed.rank) == ("info", "confirm", 1)
    # Worded by what came back (#31): rank 0 printed again, rank 1 (silent first) did not.
    assert passed.title.startswith("No output for ") and "then only rank 0 printed again; rank 1 still silent" in passed.title
    assert passed in session.findings and session.diagnosis().root_cause is None
    session.close()


def test_no_stall_while_an_error_explains_the_silence(tmp_path, catalogue):
    log = tmp_path / "rank0.log"
    log.write_text(
        "step 1\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n"
        "done\n"
    )
    clock = FakeClock()
    session = JobSession([str(log)], catalogue, stall_after=0.3, clock=clock)
    new = step(session, clock).new_findings
    for _ in range(10):  # ten times the threshold of silence
        new += step(session, clock, 0.3).new_findings
    session.close()
    assert [f.category for f in new] == ["cuda_oom"]
    assert session.diagnosis().root_cause.category == "cuda_oom"


def test_threshold_follows_the_usual_gap_with_a_minimum():
    detector = StallDetector()
    assert detector.threshold() == MIN_STALL_S
    line = LogLine("a.log", 1, "step", 0)
    now = 1000.0
    for _ in range(20):
        detector.observe([line], now)
        now += 30.0  # a job that prints every 30 s
    assert detector.threshold() == pytest.approx(300.0)
    assert detector.check(now + 250.0, 5000.0) is None
    assert detector.check(now + 301.0, 5000.0) is not None
