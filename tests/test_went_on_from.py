"""Tracebacks a process printed and went on from (a logging handler's error, tenacity's retried
attempts, the program's own print_exc, a thread's death), beside the failure that ended the job:
logs made for the review of those rules (tests/data/went_on), each with what a user must read."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths

DATA = Path(__file__).parent / "data" / "went_on"


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


@pytest.mark.parametrize("name, rule, exc_type, rank", [
    # A log handler's ENOSPC (went on), then the same ENOSPC uncaught: the second is the cause.
    ("logged-then-real-enospc", "disk-full", None, 0),
    # A CUDA fault first seen inside "--- Logging error ---", then raised uncaught at backward.
    ("logging-cuda-sticky", "cuda-illegal-access", None, 0),
    # tenacity retried an ENOSPC and the write then worked; later rank 1's IndexError.
    ("tenacity-recovered", "python-exception", "IndexError", 1),
    # tenacity's attempts ran out: the last one, re-raised, is the cause.
    ("tenacity-final", "disk-full", None, 0),
    # traceback.print_exc(); sys.exit(1) on rank 0; torchrun then stopped rank 1, whose SIGTERM
    # handler raised behind torch's "[rank1]: ": the printed one is the cause.
    ("printexc-exit", "python-exception", "ValueError", None),
    # A subprocess's own traceback (no process group, no prefix), then the parent's wrapper.
    ("subprocess-child", "python-exception", "FileNotFoundError", None),
    # A telemetry thread died; the ranks trained on; rank 1 then raised: that ended the job.
    ("telemetry-thread", "python-exception", "IndexError", 1),
    # A logger's own words "Exception in thread ..." are no thread's death.
    ("thread-words", "python-exception", "IndexError", 1),
    # Attempt 0's NCCL timeout, a restart, training, then attempt 1's local rank 1 SIGSEGV.
    ("restart-then-segv", "torchrun-worker-crashed", None, 1),
])
def test_the_cause_is_what_ended_the_job(catalogue, name, rule, exc_type, rank):
    root = diagnose_paths([DATA / name], catalogue).root_cause
    assert root is not None and root.rule == rule, root
    if exc_type is not None:
        assert root.fields["exc_type"] == exc_type
    if rank is not None:
        assert root.rank == rank
