"""Faults of round 3 (F1, F22, F3, F4, F19, F20): the files `monitor run` writes in a folder
others may write, the job's stdin, `pkill -f monitor`, and helpers the job leaves running."""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import psutil
import pytest

from monitor.files import replace_file
from monitor.metrics.samples_file import SamplesFile, samples_path
from monitor.runner.job import CaptureOptions, Job, JobStartError, new_log_path
from monitor.runner.takeover import record_rest
from tests.runner_helpers import monitor_cmd, only_log, python_job, read_json, run_monitor, wait_for

VICTIM_TEXT = "ORIGINAL CONTENT\n"


def victim(folder: Path) -> Path:
    """A file a link planted in the log folder points at (in real life: /etc/...), mode 0644."""
    path = folder / "victim_existing"
    path.write_text(VICTIM_TEXT)
    path.chmod(0o644)
    return path


def assert_untouched(path: Path) -> None:
    assert path.read_text() == VICTIM_TEXT
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


# -- F22: two runs starting in the same second --------------------------------------------------

def _take_log_name(folder: str, barrier, names) -> None:
    barrier.wait()
    names.put(str(new_log_path(Path(folder), datetime(2026, 1, 1))))


def test_f22_runs_starting_together_never_share_a_log(tmp_path: Path):
    context = multiprocessing.get_context("fork")
    for trial in range(8):
        folder = tmp_path / f"trial{trial}"
        barrier, names = context.Barrier(6), context.Queue()
        workers = [context.Process(target=_take_log_name, args=(str(folder), barrier, names)) for _ in range(6)]
        for worker in workers:
            worker.start()
        taken = [names.get(timeout=30) for _ in workers]
        for worker in workers:
            worker.join(30)
        assert len(set(taken)) == 6, sorted(taken)
