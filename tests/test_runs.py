"""A folder of several runs is read as its newest run, and says so: files of different jobs are
never merged silently (`monitor run` writes every job to the same --log-dir)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from monitor.logs.runs import OTHER, choose, log_files, runs_in

from runner_helpers import python_job, run_monitor

KEY_ERROR = "import sys; print('step 1 loss 2.3', flush=True); d = {}; d['optimizer_state']"
VALUE_ERROR = "raise ValueError('batch of 0 samples: the dataset is empty')"


# No test inherits $COLUMNS (conftest.py): a report to a pipe is not wrapped, so a note is one
# line whatever terminal (or pytest-xdist worker) the suite runs in.


def diagnose(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monitor", "diagnose", *args], capture_output=True, text=True,
                          timeout=120)


def two_runs(log_dir: Path) -> tuple[str, str]:
    """Two real `monitor run` jobs in one folder: a KeyError, then (later) a ValueError."""
    run_monitor(log_dir, *python_job(KEY_ERROR))
    first = sorted(log_dir.glob("run-*.log"))[0]
    past = time.time() - 60
    for path in log_dir.glob(first.stem + "*"):
        os.utime(path, (past, past))  # written a minute ago
    run_monitor(log_dir, *python_job(VALUE_ERROR))
    second = [p for p in sorted(log_dir.glob("run-*.log")) if p != first][0]
    return first.stem, second.stem


def test_diagnose_reads_the_newest_run_and_names_the_others(tmp_path):
    first, second = two_runs(tmp_path)
    result = diagnose(str(tmp_path))
    assert result.returncode == 1
    assert "ValueError" in result.stdout and "KeyError" not in result.stdout
    note = result.stdout.splitlines()[0]
    assert "2 runs" in note and second in " ".join(result.stdout.split()) and "--all-runs" in result.stdout
    assert first in " ".join(result.stdout.split()[:40])

    picked = diagnose(str(tmp_path), "--run", first, "--json")
    report = json.loads(picked.stdout)
    assert report["root_cause"]["fields"].get("type") == "KeyError" or "KeyError" in report["root_cause"]["title"]
    assert all(Path(f).name.split(".")[0] == first for f in report["files"])
    assert "the one asked for" in report["notes"][0]

    merged = json.loads(diagnose(str(tmp_path), "--all-runs", "--json").stdout)
    assert merged["notes"] == []
    assert {Path(f).name.split(".")[0] for f in merged["files"] if f.endswith(".log")} == {first, second}


def test_an_unknown_run_is_one_line_naming_the_runs(tmp_path):
    first, second = two_runs(tmp_path)
    result = diagnose(str(tmp_path), "--run", "nothere")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no run named like 'nothere'" in result.stderr and f"{second}, {first}" in result.stderr


def test_a_folder_of_one_run_says_nothing_more(tmp_path):
    run_monitor(tmp_path, *python_job(VALUE_ERROR))
    report = json.loads(diagnose(str(tmp_path), "--json").stdout)
    assert report["notes"] == [] and "ValueError" in report["root_cause"]["title"]


def test_runs_of_torchrun_slurm_and_loose_files(tmp_path):
    for attempt, text in (("attempt_0", "RuntimeError: CUDA out of memory."), ("attempt_1", "ok")):
        rank = tmp_path / "tr" / "ddp_abc" / attempt / "0"
        rank.mkdir(parents=True)
        (rank / "stderr.log").write_text(text + "\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "slurm-4242.out").write_text("x\n")
    (out / "slurm-4243_1.out").write_text("x\n")
    (out / "rank0.log").write_text("x\n")
    (out / "notes.json").write_text("{}")
    os.utime(out / "slurm-4242.out", (time.time() - 60, time.time() - 60))
    runs = runs_in(out)
    assert [run.name for run in runs] == ["slurm-4242", "slurm-4243_1"]
    # Files of no family go with the newest run (a node's dmesg, torchrun's own output).
    assert {p.name for p in log_files(runs[-1])} == {"slurm-4243_1.out", "rank0.log"}
    assert [run.name for run in runs_in(tmp_path / "tr" / "ddp_abc" / "attempt_0")] == [OTHER]
    attempts = runs_in(tmp_path / "tr")
    assert sorted(run.name for run in attempts) == ["ddp_abc/attempt_0", "ddp_abc/attempt_1"]
    picked = choose(tmp_path / "tr", attempts, "attempt_0")
    assert [p.name for p in log_files(picked.run)] == ["stderr.log"]
    assert "attempt_0" in str(log_files(picked.run)[0])


def test_watch_follows_the_newest_run_only(tmp_path):
    first, second = two_runs(tmp_path)
    watch = subprocess.Popen([sys.executable, "-m", "monitor", "watch", "--headless", "--json", str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = []
    while not any("watching" in line for line in said):  # up: a SIGTERM now gets the summary
        said.append(watch.stderr.readline())
        assert said[-1], said
    found = []
    while not any("ValueError" in line for line in found):  # the newest run's error, found live
        found.append(watch.stdout.readline())
        assert found[-1], found
    watch.send_signal(signal.SIGTERM)
    out, err = watch.communicate(timeout=60)
    err = "".join(said) + err
    out = "".join(found) + out
    summary = json.loads(out.strip().splitlines()[-1])["diagnosis"]
    assert "ValueError" in summary["root_cause"]["title"]
    assert not any(Path(f).name.split(".")[0] == first for f in summary["files"])
    assert "2 runs" in err and "--run NAME" in err


def test_the_watch_screen_says_which_run_it_follows(tmp_path):
    import argparse
    import asyncio

    from monitor.commands.options import pick_run_specs
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.tui import watch_app

    first, second = two_runs(tmp_path)
    paths, choices = pick_run_specs([str(tmp_path)], argparse.Namespace(run=None, all_runs=False))
    assert paths == [str(tmp_path / second) + ".*"]
    app = watch_app(paths, catalogue=load_catalogue(), scope="; ".join(c.short for c in choices))

    async def drive():
        async with app.run_test(size=(80, 24)) as pilot:
            # On the status line, not in a notification over the finding's remedy: once the
            # files are read (a deadline, not a fixed wait: the machine may be loaded).
            deadline = time.monotonic() + 30
            while not app.files and time.monotonic() < deadline:
                await pilot.pause(0.1)
            await pilot.pause(0.2)
            said = [str(app.query_one("#log-status").render())]
            assert any("of 2" in m and second in m for m in said)
            assert not app._notifications
            assert all(Path(f).name.startswith(second) for f in app.files)

    asyncio.run(drive())


def test_two_runs_started_in_the_same_second_are_runs_of_one_folder_not_two_jobs():
    """`monitor run` names the second run of a second run-<stamp>-1: the same kind of name."""
    from monitor.logs.runs import separate_jobs

    files = [Path("logs/run-20261126-034501.log"), Path("logs/run-20261126-034501-1.log")]
    assert separate_jobs(files) == [files]
