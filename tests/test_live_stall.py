"""Stall detection with real writers and a short threshold."""

from __future__ import annotations

import threading
import time

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.live.session import LiveSession, finding_id
from monitor.live.stall import MIN_STALL_S, StallDetector
from monitor.diagnosis.model import LogLine

from live_helpers import step_until_quiet


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


class RankWriter(threading.Thread):
    """Prints ``[rankN]: step k`` every ``pause`` s for ``steps`` steps, like a training loop."""

    def __init__(self, path, rank: int, steps: int, pause: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.path, self.rank, self.steps, self.pause = path, rank, steps, pause

    def run(self) -> None:
        with open(self.path, "a", buffering=1) as handle:
            for step in range(self.steps):
                handle.write(f"[rank{self.rank}]: step {step} loss={1 / (step + 1):.4f}\n")
                time.sleep(self.pause)


def wait_for(session, predicate, limit: float = 10.0):
    deadline = time.monotonic() + limit
    seen = []
    while time.monotonic() < deadline:
        update = session.step(timeout=0.05)
        seen.append(update)
        if predicate(update):
            return update, seen
    raise AssertionError("condition not reached")


def test_stall_names_the_rank_that_went_silent_first_and_clears_on_output(tmp_path, catalogue):
    log = tmp_path / "job.log"
    log.touch()
    session = LiveSession([str(log)], catalogue, stall_after=0.8)
    # Rank 1 stops after 10 steps (~0.2 s); rank 0 goes on for ~1 s more, then stops too.
    writers = [RankWriter(log, 0, 60), RankWriter(log, 1, 10)]
    for writer in writers:
        writer.start()
    update, _ = wait_for(session, lambda u: any(f.rule == "possible-hang" for f in u.new_findings))
    stall = next(f for f in update.new_findings if f.rule == "possible-hang")
    assert not any(w.is_alive() for w in writers)
    assert (stall.category, stall.severity) == ("hang", "warning")
    assert stall.fields["first_silent"] == "1" and stall.rank == 1
    assert "rank 1 went silent first" in stall.title
    assert stall.ranks == [0, 1]
    assert stall.evidence[0].startswith("rank 1, silent") and stall.evidence[0].endswith("step 9 loss=0.1000")
    assert stall.evidence[1].endswith("step 59 loss=0.0167")
    assert stall in session.engine.findings
    assert session.diagnosis().root_cause is stall  # nothing failed: the silence is the news
    assert not session.diagnosis().failed

    with open(log, "a") as handle:
        handle.write("[rank0]: step 60 loss=0.0164\n")
    update, _ = wait_for(session, lambda u: bool(u.cleared))
    assert update.cleared == [finding_id(stall)]
    assert stall not in session.engine.findings
    session.close()


def test_no_stall_while_an_error_explains_the_silence(tmp_path, catalogue):
    log = tmp_path / "rank0.log"
    log.write_text(
        "step 1\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n"
        "done\n"
    )
    session = LiveSession([str(log)], catalogue, stall_after=0.3)
    _, new, _ = step_until_quiet(session, quiet=1.0)
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
    assert detector.check(now + 250.0) is None
    assert detector.check(now + 301.0) is not None
