"""A real process that dies of SIGSEGV in native code, under `monitor run`: faulthandler's report
is the root cause with the job's Python frame beside it, and the job's exit code is kept."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.runner_helpers import read_json, run_monitor

# Reads address 0 through ctypes at step 3: a segmentation fault in native code, no exception.
CRASH = (
    "import ctypes, time\n"
    "def forward(step):\n"
    "    if step == 3:\n"
    "        ctypes.string_at(0)\n"
    "    return step * 0.5\n"
    "for step in range(5):\n"
    "    print(f'step {step} loss {forward(step):.3f}', flush=True)\n"
)


def test_a_segfault_that_faulthandler_reports_is_the_root_cause_and_its_exit_code_is_kept(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(CRASH)
    done = run_monitor(tmp_path / "logs", sys.executable, "-X", "faulthandler", str(script))
    assert done.returncode == 139, done.stderr.decode(errors="replace")[-2000:]
    diagnosis = read_json(next((tmp_path / "logs").glob("run-*.diagnosis.json")))
    root = diagnosis["root_cause"]
    assert (root["rule"], root["category"], root["fields"]["signal_name"]) == (
        "native-crash", "launcher", "Segmentation fault")
    log = next((tmp_path / "logs").glob("run-*.log")).read_text()
    assert 'crash.py", line 4 in forward' in log  # faulthandler's frame of the user's code
    # The job printed its stacks with -X faulthandler: it is not told to turn faulthandler on.
    assert "PYTHONFAULTHANDLER=1" not in root["remedy"]
