"""The live session: same answers as diagnose, ranks attributed, new files picked up."""

from __future__ import annotations

import os

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.session.job_session import JobSession

from live_helpers import ProgressiveCopy, finding_key, sample_units, step_until_quiet

UNITS = sample_units()


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def test_there_are_samples_to_compare():
    assert UNITS, "sample_logs/ holds no logs"


@pytest.mark.parametrize("unit", UNITS, ids=[str(u.relative_to(u.parent.parent)) for u in UNITS])
def test_live_follow_finds_what_diagnose_finds(tmp_path, catalogue, unit):
    target = tmp_path / unit.name
    if unit.is_dir():
        target.mkdir()
    else:
        target.touch()  # the job's log exists (empty) before the watch starts
    session = JobSession([str(target)], catalogue)
    writer = ProgressiveCopy(unit, target)
    writer.start()
    live_lines, live_new, _ = step_until_quiet(session, [writer])
    session.close()
    live = session.diagnosis()
    finished = diagnose_paths([str(target)], catalogue)

    assert sorted(finding_key(f, tmp_path) for f in live.findings) == sorted(
        finding_key(f, tmp_path) for f in finished.findings
    )
    if finished.root_cause is None:
        assert live.root_cause is None or live.root_cause.rule == "possible-hang"
    else:
        assert finding_key(live.root_cause, tmp_path) == finding_key(finished.root_cause, tmp_path)
    assert sorted(live.files) == sorted(finished.files)
    # Every finding was announced once, as it occurred (or by the final completion of records).
    announced = [f.rule for f in live_new]
    assert len(announced) <= len(live.findings)
    total_lines = sum(1 for _ in open(unit, "rb")) if unit.is_file() else None
    if total_lines is not None:
        assert [line.line for line in live_lines] == list(range(1, len(live_lines) + 1))


def test_ranks_from_prefix_and_from_torchrun_log_dir_created_later(tmp_path, catalogue):
    session = JobSession([str(tmp_path)], catalogue)
    step_until_quiet(session, quiet=0.1)
    rank_dir = tmp_path / "attempt_0" / "3"
    rank_dir.mkdir(parents=True)
    (rank_dir / "stderr.log").write_text("starting\n[rank5]: prefixed line\n")
    lines, _, _ = step_until_quiet(session, quiet=0.2)
    session.close()
    assert [(os.path.relpath(l.file, tmp_path), l.line, l.rank) for l in lines] == [
        ("attempt_0/3/stderr.log", 1, 3),
        ("attempt_0/3/stderr.log", 2, 5),
    ]


def test_traceback_completes_after_idle_without_a_following_line(tmp_path, catalogue):
    log = tmp_path / "rank0.log"
    log.write_text("step 1 loss=2.0\n")
    session = JobSession([str(log)], catalogue)
    step_until_quiet(session, quiet=0.1)
    with open(log, "a") as handle:
        handle.write(
            "Traceback (most recent call last):\n"
            '  File "train.py", line 9, in <module>\n'
            "    main()\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n"
        )
    _, new, _ = step_until_quiet(session, quiet=1.0)
    session.close()
    assert [f.category for f in new] == ["cuda_oom"]
    assert new[0].rank == 0 and new[0].line == 5


def test_a_progress_bar_that_never_ends_its_line_is_followed(tmp_path, catalogue):
    """tqdm redraws one line with \\r until its loop is done: the session's progress follows the
    partial line as it grows, without waiting for the line's end."""
    log = tmp_path / "rank3.log"
    log.write_bytes(b"[rank3]: starting\n")
    session = JobSession([str(log)], catalogue)
    session.track_progress()  # as the screen does: nothing parses progress for nobody
    try:
        session.step(timeout=0.2)
        with open(log, "ab") as handle:
            handle.write(b"\r[rank3]: Epoch 3:  45%|####5     | 450/1000 [00:10<00:12, 45.00it/s, loss=2.31]")
        for _ in range(20):
            session.step(timeout=0.1)
            if session.progress.state.step is not None:
                break
        state = session.progress.state
        assert (state.step, state.total, state.loss) == (450, 1000, 2.31)
        assert session.engine.lines_fed == 1  # the partial line is no line of the log yet
    finally:
        session.close()
