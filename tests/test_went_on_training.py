"""An exception no rule names, that training went on after, did not end the job (post-mortem):
a traceback the code caught and logged is a warning, and the root cause is chosen again."""

from __future__ import annotations

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths

# logging.exception's form (the message, then the traceback), as a data pipeline that skips a
# bad sample logs it, between the training loop's lines.
LOGGED = ("ERROR:root:skipping sample 17\n"
          "Traceback (most recent call last):\n"
          '  File "/work/data.py", line 41, in __getitem__\n'
          "    image = decode(path)\n"
          "ValueError: cannot identify image file '/data/17.jpg'\n")


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def _steps(steps) -> str:
    return "".join(f"step {step} loss {2.5 - step / 100:.2f}\n" for step in steps)


def test_a_traceback_training_went_on_after_is_a_warning(tmp_path, catalogue):
    log = tmp_path / "train.log"
    log.write_text(_steps(range(1, 11)) + LOGGED + _steps(range(11, 40)))
    diagnosis = diagnose_paths([str(log)], catalogue)
    assert diagnosis.root_cause is None and not diagnosis.failed
    (logged,) = [f for f in diagnosis.findings if f.rule == "python-exception"]
    assert (logged.severity, logged.role) == ("warning", "cascade")
    assert logged.title.endswith("(training went on after it)")
    assert logged.remedy.startswith("Training went on after this exception (step 11 and on")


def test_the_exception_is_still_the_cause_where_training_did_not_go_past_it(tmp_path, catalogue):
    log = tmp_path / "train.log"
    # One step past it: a peer's step may have been under way when the process died.
    log.write_text(_steps(range(1, 11)) + LOGGED + _steps([11]))
    assert diagnose_paths([str(log)], catalogue).root_cause.rule == "python-exception"
    # Progress after it, but no step beyond the last one before it (a bar drawn again at its start).
    log.write_text(_steps(range(1, 11)) + LOGGED + _steps([3, 4, 5]))
    assert diagnose_paths([str(log)], catalogue).root_cause.rule == "python-exception"
    # Steps past it, but the log ends on something else (the launcher's report of the rank's death).
    log.write_text(_steps(range(1, 11)) + LOGGED + _steps(range(11, 14)) + "Killing subprocess 4242\n")
    assert diagnose_paths([str(log)], catalogue).root_cause.rule == "python-exception"


def test_every_file_of_the_job_must_go_on(tmp_path, catalogue):
    """Rank 1's file ends on its traceback while rank 0's goes on: rank 1 died of it."""
    (tmp_path / "rank0.log").write_text(_steps(range(1, 40)))
    (tmp_path / "rank1.log").write_text(_steps(range(1, 11)) + LOGGED)
    root = diagnose_paths([str(tmp_path)], catalogue).root_cause
    assert root is not None and (root.rule, root.rank) == ("python-exception", 1)
    (tmp_path / "rank1.log").write_text(_steps(range(1, 11)) + LOGGED + _steps(range(11, 40)))
    assert diagnose_paths([str(tmp_path)], catalogue).root_cause is None


def test_a_peers_progress_says_nothing_of_the_rank_that_raised(tmp_path, catalogue):
    """Rank 1 raises; rank 0's steps go on in the same file (its prefixed lines): rank 1 died of it."""
    log = tmp_path / "train.log"
    raised = "".join(f"[rank1]: {line}\n" for line in LOGGED.splitlines())
    log.write_text("".join(f"[rank0]: {line}" for line in _steps(range(1, 11)).splitlines(True)) + raised
                   + "".join(f"[rank0]: {line}" for line in _steps(range(11, 14)).splitlines(True)))
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.rank) == ("python-exception", 1)


def test_one_step_printed_by_several_peers_is_one_step(tmp_path, catalogue):
    """Three surviving ranks each print step 11 (unprefixed): one step under way, not two past it."""
    log = tmp_path / "train.log"
    log.write_text(_steps(range(1, 11)) + LOGGED + _steps([11, 11, 11]))
    assert diagnose_paths([str(log)], catalogue).root_cause.rule == "python-exception"


def test_every_exception_training_went_on_after_is_passed_over(tmp_path, catalogue):
    log = tmp_path / "train.log"
    keyerror = LOGGED.replace("ValueError: cannot identify image file '/data/17.jpg'", "KeyError: 'label'")
    log.write_text(_steps(range(1, 11)) + LOGGED + _steps(range(11, 20)) + keyerror + _steps(range(20, 30)))
    diagnosis = diagnose_paths([str(log)], catalogue)
    assert diagnosis.root_cause is None
    assert sorted(f.fields["exc_type"] for f in diagnosis.findings if f.severity == "warning") == ["KeyError", "ValueError"]
