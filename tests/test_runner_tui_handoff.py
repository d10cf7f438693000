"""`monitor run` with a UI: the job handle the TUI gets, and the job's safety when the UI fails.

The real TUI needs a terminal; these tests hand `supervise.run` stand-in UIs that do what a UI
can do (look at the job, stop it, crash, quit early) and check what happens to the job."""

from __future__ import annotations

import sys
from pathlib import Path

from monitor.runner import supervise
from tests.runner_helpers import alive, job_state, read_json, wait_for

SLOW_JOB = "import time\nfor i in range(40):\n    print(f'line {i}', flush=True)\n    time.sleep(0.02)\n"


def run_with_ui(tmp_path: Path, monkeypatch, ui, code: str = SLOW_JOB) -> int:
    from monitor.diagnosis.catalogue import load_catalogue

    monkeypatch.setattr(supervise, "_attached_to_terminal", lambda: True)
    return supervise.run(supervise.RunOptions(
        command=[sys.executable, "-c", code], log_dir=tmp_path, preflight=False, grace_s=2),
        load_catalogue(include_user=False), ui)


def expected_log() -> str:
    return "".join(f"line {i}\n" for i in range(40))


def test_the_job_handle_api(tmp_path: Path, monkeypatch):
    seen = {}

    def ui(job, session, metrics):
        seen["running"] = job.exit_code()
        seen["pids"] = job.pids()
        seen.update(pid=job.pid, log=job.log_path, command=job.command, extra=job.extra_log_paths())
        wait_for(lambda: job.exit_code() is not None)
        return 0

    assert run_with_ui(tmp_path, monkeypatch, ui) == 0
    assert seen["running"] is None and seen["pid"] in seen["pids"]
    assert seen["log"].read_text() == expected_log()
    assert seen["command"][0] == sys.executable and seen["extra"] == []


def test_a_crashing_ui_loses_nothing(tmp_path: Path, monkeypatch, capsys):
    def ui(job, session, metrics):
        raise RuntimeError("widget exploded")

    assert run_with_ui(tmp_path, monkeypatch, ui, SLOW_JOB + "raise SystemExit(4)\n") == 4
    assert "the terminal UI failed (RuntimeError: widget exploded)" in capsys.readouterr().err
    assert next(tmp_path.glob("run-*[0-9].log")).read_text() == expected_log()


def test_quitting_the_ui_leaves_the_job_running(tmp_path: Path, monkeypatch, capsys):
    assert run_with_ui(tmp_path, monkeypatch, lambda job, session, metrics: 0) == 0
    assert "the job is still running" in capsys.readouterr().err
    state = wait_for(lambda: "exit_code" in job_state(tmp_path) and job_state(tmp_path))
    assert state["exit_code"] == 0
    assert next(tmp_path.glob("run-*[0-9].log")).read_text() == expected_log()


def test_stopping_from_the_ui_waits_for_the_end_and_explains(tmp_path: Path, monkeypatch):
    pids = []

    def ui(job, session, metrics):
        wait_for(lambda: "line 3" in job.log_path.read_text())
        pids.extend(job.pids())
        job.stop()
        return 0

    code = run_with_ui(tmp_path, monkeypatch, ui, "import time\nprint('line 3', flush=True)\ntime.sleep(60)\n")
    assert code == 143
    assert not any(alive(pid) for pid in pids)
    diagnosis = read_json(next(tmp_path.glob("run-*.diagnosis.json")))
    assert [f["rule"] for f in diagnosis["findings"]] == ["job-stopped"]
