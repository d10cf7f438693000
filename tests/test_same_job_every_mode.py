"""One job, every mode, one root cause: `diagnose`, `watch --headless`, the watch screen,
`monitor run --headless` (its end report and run-X.diagnosis.json) and the run screen all render
from the same policy, so they must name the same cause for the same bytes.

The jobs are recorded ones (sample logs of real torch runs): a ValueError on one of four ranks
with the others' cascades, and eight ranks where seven hit the NCCL watchdog and the eighth never
reached the collective (the root is the hang suspect, which only the policy can name).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.session.headless import watch_headless
from monitor.tui.findings_panel import FindingsPanel

SAMPLES = Path(__file__).parent.parent / "sample_logs"
JOBS = {
    "crash": (SAMPLES / "demo/crash-4ranks.log", "python_exception"),
    "hang": (SAMPLES / "documented/nccl-timeout-hang-tee-8ranks.log", "nccl_timeout"),
}


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def who(finding) -> tuple:
    """What a user reads as 'the cause': the rule, its category, the rank and the title."""
    if isinstance(finding, dict):
        return finding["rule"], finding["category"], finding["rank"], finding["title"]
    return finding.rule, str(finding.category), finding.rank, finding.title


def watch_headless_root(log: Path, catalogue) -> tuple:
    stop, out = threading.Event(), io.StringIO()
    timer = threading.Timer(1.5, stop.set)  # the file is complete: its lines are read at once
    timer.start()
    assert watch_headless([str(log)], catalogue, as_json=True, out=out, stop=stop) == 1
    summary = json.loads(out.getvalue().splitlines()[-1])
    return who(summary["diagnosis"]["root_cause"])


async def screen_root(app, lines: int = 0) -> tuple:
    """The screen's root cause once it has read the job: a run's end, or a watched file's ``lines``
    all in the screen's store and its records completed (the session completes a record its file
    leaves open after 0.5 s of quiet: under load the screen was read before that, and named the
    hang's suspect from the timeouts completed so far)."""
    async with app.run_test(size=(160, 45)) as pilot:
        panel = app.query_one(FindingsPanel)
        for _ in range(300):
            await pilot.pause(0.05)
            if app.finished_note if app.job is not None else (
                    panel.root is not None and app.files and len(app.store) >= lines
                    and not any(app.log_feed.session.engine.has_pending(f) for f in app.files)):
                break
        await pilot.pause(0.3)  # the findings of the last records, on the panel
        root = panel.root
        await pilot.press("q")
    return who(root)


def run_headless(log: Path, tmp_path: Path) -> tuple[tuple, str]:
    """`monitor run --headless` of a job that prints the recorded bytes and fails."""
    job = f"import sys; sys.stdout.buffer.write(open({str(log)!r}, 'rb').read()); sys.exit(1)"
    result = subprocess.run(
        [sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight", "--no-user-rules",
         "--log-dir", str(tmp_path / "runs"), "--", sys.executable, "-c", job],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 1, result.stderr
    saved = json.loads(next((tmp_path / "runs").glob("run-*.diagnosis.json")).read_text())
    return who(saved["root_cause"]), result.stderr


@pytest.mark.parametrize("name", sorted(JOBS))
async def test_one_job_gets_one_root_cause_in_every_mode(name, tmp_path, catalogue):
    from monitor.runner.job import CaptureOptions, Job, new_log_path
    from monitor.tui import run_app, watch_app
    from tests.runner_helpers import run_session

    sample, category = JOBS[name]
    log = tmp_path / "train.log"
    shutil.copy(sample, log)

    post_mortem = who(diagnose_paths([str(log)], catalogue).root_cause)
    assert post_mortem[1] == category
    if name == "hang":
        assert post_mortem[3].startswith("Rank 7 stalled")  # the suspect, not "timed out on rank 0"

    roots = {"watch --headless": watch_headless_root(log, catalogue)}
    app = watch_app([str(log)], catalogue=catalogue)
    roots["watch (screen)"] = await screen_root(app, lines=len(log.read_bytes().splitlines()))
    app.metrics_feed.close()
    app.log_feed.close()

    roots["run --headless (diagnosis.json)"], report = run_headless(log, tmp_path)
    assert f"Root cause: {post_mortem[3]}" in report  # the end report on stderr

    job_code = f"import sys; sys.stdout.buffer.write(open({str(log)!r}, 'rb').read()); sys.exit(1)"
    job = Job.start([sys.executable, "-c", job_code], new_log_path(tmp_path / "screen"), CaptureOptions(use_pty=False))
    session, metrics = run_session(job)
    roots["run (screen)"] = await screen_root(run_app(job, session, metrics))
    metrics.close()
    session.close()

    assert roots == {mode: post_mortem for mode in roots}


def test_a_recorded_run_is_read_with_its_world_size_in_every_mode(tmp_path, catalogue):
    # Rank 1 finished its shorter shard and exited 0: only rank 0's lost connection is in the log;
    # the run's recorded world size (2 ranks) says which rank left, to diagnose and to a watch alike.
    for path in (SAMPLES / "cpu/short-shard").iterdir():
        shutil.copy(path, tmp_path / path.name)
    log = next(tmp_path.glob("run-*.log"))
    post_mortem = who(diagnose_paths([str(tmp_path)], catalogue).root_cause)
    assert post_mortem[:3] == ("gloo-peer-lost", "gloo_timeout", 1) and post_mortem[3].startswith("Rank 1 left the job")
    assert watch_headless_root(log, catalogue) == post_mortem
