"""Which rank a job lost, where its peers only say they lost it: logs made from the recorded CPU jobs
(sample_logs/cpu) for the cases their review raised (tests/data/lost_peers)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.logs.runs import separate_jobs

DATA = Path(__file__).parent / "data" / "lost_peers"


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def root_of(name: str, catalogue):
    root = diagnose_paths([DATA / name], catalogue).root_cause
    assert root is not None
    return root


def test_a_read_that_timed_out_is_a_stalled_peer_not_one_that_left(catalogue):
    # gloo's "Read timeout [ip]:port": rank 1 is in a slow evaluation, not gone.
    root = root_of("read-timeout", catalogue)
    assert (root.rule, root.rank) == ("gloo-timeout", 1) and root.title.startswith("Rank 1 stalled")


def test_a_crash_the_launcher_reports_after_another_ranks_error_is_its_consequence(catalogue):
    # Rank 0's ValueError (its last line alone), then rank 1's lost peer, then torchrun's record of
    # local rank 1's SIGSEGV: the launcher's line is not rank 0's own, and does not outlive it.
    root = root_of("bare-error-then-segv", catalogue)
    assert (root.rule, root.rank, root.fields["exc_type"]) == ("python-exception", 0, "ValueError")


def test_a_crash_keeps_the_local_rank_the_launcher_names(catalogue):
    # Three ranks on one node, torchrun's summary cut off: "local rank 2 crashed" is rank 2's.
    root = root_of("segv-no-summary", catalogue)
    assert (root.rule, root.rank) == ("torchrun-worker-crashed", 2)


def test_an_exception_of_no_rank_keeps_the_launchers_first_failure_beside_lost_peers(catalogue):
    # Torchrun saw rank 2 fail first and stopped the others; rank 0 lost its (stopped) peer.
    root = root_of("rankless-exception", catalogue)
    assert (root.rule, root.rank) == ("python-exception", 2)


def test_a_recorded_world_the_log_exceeds_is_not_the_jobs_world(catalogue, tmp_path):
    # The run's record says 4 ranks; the log shows ranks 4-7 (another node's, or a record of
    # another job): its world size is not taken, as without the record.
    with_record = root_of("second-node", catalogue)
    for path in (DATA / "second-node").glob("*.log"):
        shutil.copy(path, tmp_path / path.name)
    without = diagnose_paths([tmp_path], catalogue).root_cause
    assert without is not None and (with_record.rank, with_record.title) == (without.rank, without.title)
    assert with_record.rank is not None and with_record.rank >= 4


def test_a_record_nested_past_pythons_stack_is_ignored(catalogue, tmp_path):
    shutil.copy(next((DATA / "segv-no-summary").glob("*.log")), tmp_path / "run-20261128-105324.log")
    (tmp_path / "run-20261128-105324.meta.json").write_text('{"world_size": ' + "[" * 100_000 + "]" * 100_000 + "}")
    root = diagnose_paths([tmp_path], catalogue).root_cause
    assert root is not None and root.rule == "torchrun-worker-crashed"


def test_the_rank_that_left_is_not_one_the_launcher_stopped(catalogue):
    # Three ranks: rank 2 finished its shorter shard, rank 0 lost its peer, torchrun then sent
    # SIGTERM to rank 1: rank 2 left, rank 1 was stopped.
    root = root_of("stopped-peer", catalogue)
    assert (root.rule, root.rank) == ("gloo-peer-lost", 2) and root.title.startswith("Rank 2 left the job")


def test_a_crash_after_the_others_timed_out_waiting_is_no_root(catalogue):
    # Rank 0's collective timed out waiting; torchrun then reported rank 1's SIGSEGV (torn down
    # while hung): the wait is the story, not "crashed in native code".
    root = root_of("timeout-then-segv", catalogue)
    assert root.rule != "torchrun-worker-crashed" and root.category == "nccl_timeout"


def test_a_run_under_redirects_is_diagnosed_with_the_rank_files_it_read(catalogue, tmp_path):
    # torchrun --log-dir trlogs --redirects 3 (no --tee): the run's log holds torchrun's lines only;
    # rank 3's ZeroDivisionError is in its own stderr.log, which the run recorded as read beside it.
    shutil.copytree(DATA.parent / "redirects", tmp_path / "job")
    log = next((tmp_path / "job").glob("run-*.log"))
    extras = sorted(str(p) for p in (tmp_path / "job" / "trlogs").rglob("*.log"))
    log.with_name(log.stem + ".meta.json").write_text(json.dumps({"world_size": 4, "extra_logs": extras}))
    root = diagnose_paths([log], catalogue).root_cause
    assert root is not None and (root.fields.get("exc_type"), root.rank) == ("ZeroDivisionError", 3)
    # Read with its folder as one job, not as the run and some other job's files.
    assert separate_jobs([log, *map(Path, extras)]) == [[log, *map(Path, extras)]]
