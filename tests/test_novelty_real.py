"""What is new since the last good run (issue #27), on real jobs run by `monitor run`: a good run
and a failing run of the same script whose failure no rule knows (a custom logging.error, then
sys.exit(1)); a new warning followed by a hang that a gloo timeout ends (torch, two ranks); what
changed in between (an environment variable, a package version); the same live in `watch`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from diagnosis_helpers import diagnose_json, diagnose_run

from monitor.diagnosis.novelty import MAX_TEMPLATES, line_template, saved_templates, templates_of

JOB = Path(__file__).resolve().parent / "jobs" / "novelty_job.py"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--rdzv-backend", "c10d", "--rdzv-endpoint",
            "localhost:0", "--nproc-per-node", "2")


def _run(logs: Path, *command: str, env: dict | None = None) -> int:
    """`monitor run --headless` of ``command`` into ``logs`` (two runs started in the same second
    are named apart, run-<stamp> and run-<stamp>-1, and ordered by when they were written)."""
    return subprocess.run([sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight", "--log-dir", str(logs),
                           "--", *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env={**os.environ, **(env or {})}, timeout=180).returncode


def _diagnose(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    return diagnose_run(*args, columns=300), diagnose_json(*args)


def test_a_failure_no_rule_knows_is_named_by_what_the_good_run_never_printed(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    assert _run(logs, sys.executable, str(JOB)) == 0
    assert _run(logs, sys.executable, str(JOB), "--fail") == 1
    text, data = _diagnose("--against", "auto", str(logs))
    assert text.returncode == 1
    first = [line["text"] for line in data["new_since_good_run"][:3]]
    assert any("shard 7 checksum mismatch" in line for line in first)
    assert data["against"].startswith("run-")
    root = data["root_cause"]
    assert (root["category"], root["rule"], root["confidence"]) == ("new_lines", "new-since-good-run", "likely")
    assert "shard 7 checksum mismatch" in root["title"]
    assert "New since the last good run" in text.stdout and "shard 7 checksum mismatch" in text.stdout
    # Without the comparison nothing in the log says why the job failed.
    _, off = _diagnose("--against", "none", str(logs))
    assert off["root_cause"] is None and off["new_since_good_run"] == [] and off["against"] is None


def test_a_clean_rerun_shows_nothing_new(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    assert _run(logs, sys.executable, str(JOB)) == 0
    assert _run(logs, sys.executable, str(JOB)) == 0
    text, data = _diagnose(str(logs))
    assert text.returncode == 0 and data["new_since_good_run"] == [] and data["root_cause"] is None
    assert "nothing it did not print" in text.stdout


def test_a_folder_without_a_good_run_says_so_in_one_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    assert _run(logs, sys.executable, str(JOB), "--fail") == 1
    assert _run(logs, sys.executable, str(JOB), "--fail") == 1
    text, data = _diagnose(str(logs))
    assert [note for note in data["notes"] if "ended well" in note] == [
        f"{logs}: no run before {data['files'][0].split('/')[-1].removesuffix('.log')} ended well (exited 0 as "
        "`monitor run` recorded it, or got to a further step): nothing to compare with"]
    assert data["against"] is None


def test_a_new_warning_before_a_gloo_timeout_comes_first(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    logs = tmp_path / "logs"
    assert _run(logs, *TORCHRUN, str(JOB), "--gloo") == 0
    assert _run(logs, *TORCHRUN, str(JOB), "--gloo", "--warn-hang") != 0
    text, data = _diagnose(str(logs))
    assert data["root_cause"]["category"] == "gloo_timeout"  # the rules' answer stays the root cause
    # Before the timeout's own lines (a loaded machine may add new lines of its own at start-up:
    # c10d's retried connects, a slow rendezvous).
    new = data["new_since_good_run"]
    warned = next(i for i, line in enumerate(new)
                  if "prefetch queue for shard 3 is empty" in line["text"] and line["level"] == "warning")
    assert warned < next((i for i, line in enumerate(new) if "timed out" in line["text"].lower()), len(new))
    assert text.stdout.index("prefetch queue for shard 3") < text.stdout.index("Timeline")


def test_watch_tells_a_new_error_line_as_it_comes(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    assert _run(logs, sys.executable, str(JOB)) == 0
    live = logs / "run-29990101-000000.log"  # the newest run of the folder: being written now
    live.write_text("step 0 loss 2.0000 lr 3e-4\n")
    watch = subprocess.Popen([sys.executable, "-m", "monitor", "watch", "--headless", "--json", str(logs)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said, found = [], []
    try:
        while not any("watching" in line for line in said):  # up, following the newest run
            said.append(watch.stderr.readline())
            assert said[-1], said
        with live.open("a") as stream:
            stream.write("step 1 loss 1.0000 lr 3e-4\nERROR trainer: shard 7 checksum mismatch: expected aa got bb\n")
        while not any("shard 7" in line for line in found):  # told as it comes (or the test times out)
            found.append(watch.stdout.readline())
            assert found[-1], found
    finally:
        watch.send_signal(2)
        out, _ = watch.communicate(timeout=30)
    out = "".join(found) + out
    told = [json.loads(line) for line in out.splitlines() if line.startswith("{\"rule\"")]
    assert [(f["rule"], f["severity"]) for f in told] == [("new-line", "info")]
    assert "shard 7 checksum mismatch" in told[0]["title"]


def test_templates_mask_what_changes_from_run_to_run() -> None:
    a = line_template("[rank3]: step 120 loss 2.3411 lr 1e-05 took 312ms at /home/u/x.py:12 0x7f3a2b 10.0.0.2:29500")
    b = line_template("[rank5]: step 9 loss 0.1 lr 3e-04 took 7ms at /data/v/y.py:900 0xdeadbeef 10.1.1.9:1234")
    assert a == b == "step <n> loss <n> lr <n> took <n> at <path>:<n> <hex> <addr>"
    assert line_template("W1126 00:10:27.501000 20679 api.py:1028] Sending process 20804 closing signal SIGTERM") == \
        line_template("W0101 10:00:00.000000 1 api.py:1028] Sending process 7 closing signal SIGTERM")


def test_a_runs_templates_are_bounded_and_saved_small(tmp_path: Path) -> None:
    log = tmp_path / "run-20260101-000000.log"
    with log.open("w") as stream:
        for n in range(MAX_TEMPLATES + 5000):
            stream.write(f"unique message {'x' * (n % 7)} {chr(97 + n % 26)}{chr(97 + n // 26 % 26)}{chr(97 + n // 676 % 26)}{n // 17576}\n")
    templates = templates_of([log])
    assert len(templates) == MAX_TEMPLATES
    from monitor.diagnosis.novelty import save_templates

    assert save_templates(log, templates) is None
    assert saved_templates(log) == templates
    assert (tmp_path / "run-20260101-000000.templates").stat().st_size < 1024 * 1024


def _fake_package(site: Path, name: str, version: str) -> None:
    for old in site.glob(f"{name}-*.dist-info"):
        for file in old.iterdir():
            file.unlink()
        old.rmdir()
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_what_changed_since_the_good_run_is_listed_and_the_new_line_beats_the_bare_exit(tmp_path: Path) -> None:
    """A good run, then a failing one with an environment variable set and a package upgraded
    (a real distribution on the job's path, as pip would leave it)."""
    logs, site = tmp_path / "logs", tmp_path / "site"
    _fake_package(site, "accelerate", "0.1.0")
    assert _run(logs, sys.executable, str(JOB), env={"PYTHONPATH": str(site)}) == 0
    _fake_package(site, "accelerate", "0.2.0")
    assert _run(logs, sys.executable, str(JOB), "--fail", env={"PYTHONPATH": str(site), "NCCL_P2P_DISABLE": "1"}) == 1
    meta = json.loads(next(logs.glob("*.meta.json")).read_text())
    assert meta["environment"]["packages"]["accelerate"] in ("0.1.0", "0.2.0") and "python" in meta["environment"]
    # `monitor run`'s own end report of the failed run, saved beside its log (not the newest name:
    # runs started in the same second are run-<stamp> and run-<stamp>-2, which sorts first).
    (saved,) = [report for report in (json.loads(path.read_text()) for path in logs.glob("*.diagnosis.json"))
                if report["run"]["exit_code"] == 1]
    assert "accelerate 0.1.0 -> 0.2.0" in saved["changes"] and "NCCL_P2P_DISABLE=1 new" in saved["changes"]
    assert saved["root_cause"]["rule"] == "new-since-good-run"  # not the bare "exited with code 1"
    assert sorted(p.suffix for p in logs.glob("*.templates")) == [".templates", ".templates"]
    # And `diagnose` of the folder afterwards says the same.
    text, data = _diagnose(str(logs))
    assert "accelerate 0.1.0 -> 0.2.0" in data["changes"] and "NCCL_P2P_DISABLE=1 new" in data["changes"]
    assert "What changed since then:" in text.stdout and "accelerate 0.1.0 -> 0.2.0" in text.stdout


def test_slurm_outputs_that_record_no_exit_are_compared_with_the_one_that_got_further(tmp_path: Path) -> None:
    """Two SLURM outputs of the same training: the older got to step 900, the newer died at step 40
    with a line the older never printed. Nothing recorded how either ended."""
    logs = tmp_path / "logs"
    logs.mkdir()
    older = logs / "slurm-1001.out"
    older.write_text("".join(f"step {s} loss {2.0 / (s + 1):.4f}\n" for s in range(0, 901, 20)))
    newer = logs / "slurm-1002.out"
    newer.write_text("".join(f"step {s} loss {2.0 / (s + 1):.4f}\n" for s in range(0, 41, 20))
                     + "ERROR trainer: fetched 0 rows from the feature store for shard 12\n")
    os.utime(older, (1_700_000_000, 1_700_000_000))
    text, data = _diagnose(str(logs))
    assert data["against"] == "slurm-1001"
    assert [line["text"] for line in data["new_since_good_run"]] == [
        "ERROR trainer: fetched 0 rows from the feature store for shard 12"]
    assert data["root_cause"]["rule"] == "new-since-good-run"
