"""Real CPU jobs (gloo, two ranks under torchrun: tests/jobs/classes_job.py) for the classes of
misses of issue #34, each under `monitor run --headless`, then its log through `diagnose` and
`watch --headless`: every mode names the same cause.

- a retry loop that logs its tracebacks and then succeeds: exit 0, no root cause;
- the same retries on rank 0, then a ValueError in rank 1's code: rank 1's ValueError;
- rank 1 all-reducing a tensor of another size: gloo's "collective mismatch";
- torch's CPU allocator failing under an address-space limit on rank 1: host memory, rank 1;
- a KeyError in a DataLoader worker of rank 1: the KeyError, rank 1, its frame in __getitem__.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from diagnosis_helpers import diagnose_json

from monitor.commands.watch import RecordedJob
from monitor.diagnosis.catalogue import load_catalogue
from monitor.session.headless import watch_headless
from tests.runner_helpers import monitor_cmd, only_log

pytest.importorskip("torch")

JOB = Path(__file__).parent / "jobs" / "classes_job.py"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "localhost:0")
# scenario -> (exit code, (rule, category, rank) of the root cause, or None: nothing failed)
EXPECTED = {
    "retry-ok": (0, None),
    "retry-then-crash": (1, ("python-exception", "python_exception", 1)),
    "size-mismatch": (1, ("collective-mismatch", "python_exception", 0)),
    "cpu-alloc": (1, ("host-alloc-failed", "host_oom", 1)),
    "loader-keyerror": (1, ("python-exception", "python_exception", 1)),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[int, Path, dict]]:
    """Each scenario run once under `monitor run`: (exit code, its log, run-X.diagnosis.json)."""
    done = {}
    for scenario in EXPECTED:
        log_dir = tmp_path_factory.mktemp(scenario)
        result = subprocess.run(monitor_cmd(log_dir, *TORCHRUN, str(JOB), scenario), capture_output=True,
                                timeout=180, stdin=subprocess.DEVNULL)
        (report,) = log_dir.glob("run-*.diagnosis.json")
        done[scenario] = (result.returncode, only_log(log_dir), json.loads(report.read_text()))
    return done


def _cause(root) -> tuple | None:
    return (root["rule"], root["category"], root["rank"]) if root else None


def _diagnose(log: Path) -> dict:
    return diagnose_json(str(log))


def _watch(log: Path) -> dict:
    """`watch --headless` of the run's log, as the command does it: the job `monitor run` recorded
    has ended, so the watch ends once it has read all of the log (it waited a fixed 2 s)."""
    recorded = RecordedJob.among([str(log)])
    assert recorded is not None and recorded.exit_code() is not None
    out = io.StringIO()
    watch_headless([str(log)], load_catalogue(include_user=False), as_json=True, out=out, recorded=recorded)
    return json.loads(out.getvalue().splitlines()[-1])["diagnosis"]


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_every_mode_names_the_cause_of_a_real_cpu_job(runs, scenario):
    code, log, report = runs[scenario]
    exit_code, cause = EXPECTED[scenario]
    assert code == exit_code, log.read_text()[-3000:]
    assert _cause(report["root_cause"]) == cause
    assert _cause(_diagnose(log)["root_cause"]) == cause
    assert _cause(_watch(log)["root_cause"]) == cause


def test_the_retried_tracebacks_stay_as_warnings_and_the_keyerror_names_its_frame(runs):
    findings = _diagnose(runs["retry-ok"][1])["findings"]
    assert {(f["rule"], f["severity"]) for f in findings} == {("python-exception-retried", "warning")}
    root = runs["loader-keyerror"][2]["root_cause"]
    assert root["fields"]["exc_type"] == "KeyError" and root["fields"]["frame_func"] == "__getitem__"
    crash = runs["retry-then-crash"][2]["root_cause"]
    assert crash["fields"]["exc_type"] == "ValueError" and "0 samples" in crash["fields"]["message"]
