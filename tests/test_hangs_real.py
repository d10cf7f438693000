"""Hangs explained before the watchdog fires: real torchrun jobs of the demo (gloo, CPU) under
`monitor run`, their ranks' stacks taken with py-spy and their flight-recorder dumps read.

- 4 ranks, rank 2 blocked in its data loading (load_batch) before the step's collectives, gloo
  timeout 60 s, --stall-after 10: the rank and its frame are named within 20 s of the stall,
  long before the timeout; the end report keeps it; `monitor diagnose` on the run's folder
  (log, dumps, stacks) names it again.
- 2 ranks calling different collectives (broadcast vs all_reduce), with py-spy unusable: the
  dumps name the mismatch and each rank's call, and the stacks say in one line why they are not.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # before the demo, which imports it: skipped, not an error at collection

from monitor.demo import train  # noqa: E402
from tests.runner_helpers import MonitorRun, only_log, read_json  # noqa: E402
from tests.test_stacks import needs_ptrace  # noqa: E402

TIMEOUT_S = 60
STALL_AFTER_S = 10
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            "localhost:0")
SLEEP_LINE = next(number for number, line in enumerate(inspect.getsourcelines(train.load_batch)[0],
                                                       inspect.getsourcelines(train.load_batch)[1])
                  if "time.sleep" in line)


class Watched(MonitorRun):
    """`monitor run --headless` with a stall reported after STALL_AFTER_S."""

    def __init__(self, log_dir: Path, *job: str, env: dict[str, str] | None = None, extra=()) -> None:
        super().__init__(log_dir, *job, extra=("--stall-after", str(STALL_AFTER_S), *extra), env=env)


@needs_ptrace
def test_a_rank_stuck_in_its_data_loading_is_named_with_its_frame_before_the_timeout(tmp_path):
    run = Watched(tmp_path, *TORCHRUN, "--nproc-per-node", "4", "-m", "monitor.demo.train", "--scenario", "hang",
                  "--rank-to-fail", "2", "--timeout", str(TIMEOUT_S), "--steps", "6")
    blocked_at, _ = run.wait_line(r"loading the batch will block", timeout=120, job=True)
    named_at, named = run.wait_line(r"ERROR +rank 2 is in load_batch", timeout=60)
    # The stall of the hang: a slow machine's start-up (four ranks importing torch on two cores)
    # can be a silence of its own before it.
    stall_at = next(at for at, line in list(run.lines)
                    if at >= blocked_at and re.search(r"No output for \d+ s: possible hang", line))
    # The dumps come after the stacks (each rank writes its own, read up to DUMP_WAIT_S later): the
    # job is stopped once they are read. Stopped at once, a slow machine's ranks were killed before
    # they wrote them, and a look taken in a start-up silence (over STALL_AFTER_S there) spoke alone.
    dump_line = run.wait_line(r"rank 2 never joined collective \d+ \(gloo:all_reduce\)", timeout=30)[1]
    report = run.stop()
    assert f"rank 2 is in load_batch (train.py:{SLEEP_LINE}) while ranks 0,1,3 wait in backward" in named
    assert named_at - stall_at < 20, (stall_at, named_at)
    # Long before gloo's timeout, which starts when the peers enter the collective (before the stall).
    assert named_at - (stall_at - STALL_AFTER_S) < TIMEOUT_S - 20
    assert "ranks 0,1,3 wait in it" in dump_line

    assert "Root cause: rank 2 is in load_batch" in report
    log = only_log(tmp_path)
    diagnosis = read_json(log.with_suffix(".diagnosis.json"))
    root = diagnosis["root_cause"]
    assert (root["rank"], root["category"], root["origin"], root["line"]) == (2, "hang", "stacks", SLEEP_LINE)
    assert root["file"].endswith("monitor/demo/train.py") and root["fields"]["code"] == "time.sleep(stall_s)"

    stacks_text = log.with_name(log.stem + ".stacks.txt").read_text()
    assert f" >   load_batch ({train.__file__}:{SLEEP_LINE})" in stacks_text
    dumps = sorted(p.name for p in log.with_name(log.stem + ".fr").glob("dump-rank*"))
    assert dumps == ["dump-rank0", "dump-rank1", "dump-rank2", "dump-rank3"]
    assert not list(log.with_name(log.stem + ".fr").glob("*.pipe"))  # the job ended: no request can be taken

    # Post-mortem, from the run's folder alone.
    result = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--json", str(tmp_path)],
                            capture_output=True, timeout=60)
    assert result.returncode == 1, result.stderr.decode()
    again = json.loads(result.stdout)
    assert again["root_cause"]["title"] == root["title"]
    missing = [f for f in again["findings"] if f["rule"] == "flight-recorder-missing-rank"]
    assert [f["rank"] for f in missing] == [2]


def test_ranks_calling_different_collectives_are_named_from_their_dumps_without_py_spy(tmp_path):
    env = {**__import__("os").environ, "MONITOR_PY_SPY": str(tmp_path / "no-py-spy")}
    run = Watched(tmp_path / "logs", *TORCHRUN, "--nproc-per-node", "2", "-m", "monitor.demo.train",
                  "--scenario", "mismatch", "--timeout", str(TIMEOUT_S), env=env)
    _, cannot = run.wait_line(r"stacks could not be taken", timeout=120)
    _, mismatch = run.wait_line(r"differs between ranks \(op\)", timeout=30)
    report = run.stop()
    assert "pip install py-spy" in cannot and "MONITOR_PY_SPY" in cannot
    assert re.search(r"rank 0 called gloo:all_reduce at run_steps \(train\.py:\d+\)", mismatch)
    assert re.search(r"rank 1 called gloo:broadcast at run_steps \(train\.py:\d+\)", mismatch)
    assert "Root cause: collective" in report and "Traceback" not in report
