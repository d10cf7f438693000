"""The collectives check around the launcher, without torch: the exercise put in place of the job's
script in every launch shape, and `check`/the gate of `monitor run` with stand-in launchers (a
real process on PATH that writes a measurement, fails, or never ends). The real torch jobs are in
test_collectives_real.py."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from monitor.runner.collectives_check import (
    EXERCISE, CannotCheck, before_launch, cannot_check, check, exercise_command,
)
from tests.runner_helpers import monitor_cmd, only_log

OUT = Path("/tmp/x/measurement.json")
TAIL = [str(EXERCISE), "--out", str(OUT), "--timeout", "180"]


@pytest.mark.parametrize("command, expected", [
    ("torchrun --nnodes 2 --nproc-per-node=4 --rdzv-endpoint h:1 --log-dir L -r 3 --tee=3 train.py --lr 1",
     ["torchrun", "--nnodes", "2", "--nproc-per-node=4", "--rdzv-endpoint", "h:1"]),
    ("python -u -m torch.distributed.run --standalone --nproc_per_node 2 --no-python -m pkg.train --x",
     ["python", "-u", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]),
    ("srun -N2 --ntasks-per-node 1 -l torchrun --nnodes 2 --max-restarts 3 train.py",
     ["srun", "-N2", "--ntasks-per-node", "1", "-l", "torchrun", "--nnodes", "2"]),
    ("srun -N2 python3 -u -X dev train.py a", ["srun", "-N2", "python3", "-u", "-X", "dev"]),
])
def test_the_exercise_takes_the_place_of_the_script(command: str, expected: list[str]):
    assert cannot_check(command.split()) is None
    assert exercise_command(command.split(), OUT) == [*expected, *TAIL]


def test_without_a_command_srun_runs_every_task_of_the_allocation():
    assert exercise_command(None, OUT) == ["srun", sys.executable, *TAIL]


@pytest.mark.parametrize("command", ["accelerate launch t.py", "python train.py", "srun bash job.sh", "deepspeed t.py"])
def test_a_launch_it_cannot_ride_on_is_one_line(command: str):
    reason = cannot_check(command.split())
    assert reason is not None and reason.endswith(f"this job starts with {command.split()[0]}")
    with pytest.raises(CannotCheck):
        exercise_command(command.split(), OUT)


def _measurement(slow_rank: int | None) -> dict:
    def pair(a, b):
        return {"a": a, "b": b, "latency_s": 1e-4, "transfer_s": 0.04 if slow_rank in (a, b) else 5e-4,
                "bytes": 1 << 20}
    return {"version": 1, "backend": "gloo", "world_size": 4, "torch": "2.x", "seconds": {"join": 1.0},
            "ranks": [{"rank": r, "local_rank": r, "host": "vm", "device": "cpu", "collectives": [],
                       "pairs": [pair(r, b) for b in range(r + 1, 4)]} for r in range(4)]}


def _nodes_measurement(slow_node: str) -> dict:
    """Four nodes of one rank; the all_reduce of every pair of nodes with ``slow_node`` 6x as long."""
    hosts = ["gpu-01", "gpu-04", "gpu-07", "gpu-09"]

    def node_all_reduce(host):
        return [{"peer": peer, "bytes": 1 << 20, "seconds": [0.03 if slow_node in (host, peer) else 0.005]}
                for peer in hosts if peer != host]
    measurement = _measurement(slow_rank=None)
    for entry, host in zip(measurement["ranks"], hosts):
        entry.update(host=host, local_rank=0, node_all_reduce=node_all_reduce(host))
    return measurement


def _launcher(tmp_path: Path, body: str) -> dict[str, str]:
    """A `torchrun` on PATH that runs ``body`` (Python; ``out``: the --out path it was given)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    script = folder / "torchrun"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys, time\n"
                      f"out = sys.argv[sys.argv.index('--out') + 1] if '--out' in sys.argv else None\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}"}


def _writes(measurement: dict) -> str:
    return f"print('launcher output'); open(out, 'x').write({json.dumps(json.dumps(measurement))})"


def _private_folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("monitor-collectives-*"))


def test_a_check_keeps_its_output_and_verdict_beside_the_run(tmp_path: Path, monkeypatch):
    # This test's own temporary folder: a check another test (or another suite) runs meanwhile
    # makes and removes its folders in the shared one.
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    env = _launcher(tmp_path, _writes(_measurement(slow_rank=2)))
    before = _private_folders()
    result = check(["torchrun", "--nproc-per-node", "4", "train.py"], tmp_path / "run-1.log", env=env)
    assert result.problem is None and result.verdict is not None
    assert [o.line()[:40] for o in result.verdict.outliers] == ["rank 2 on node vm is 80x slower than the"]
    assert result.saved == tmp_path / "run-1.collectives.json"
    saved = json.loads(result.saved.read_text())
    assert saved["exit_code"] == 0 and saved["verdict"]["lines"] == result.verdict.lines()
    # The launcher's output, then the verdict, so that the .txt alone says it.
    assert (tmp_path / "run-1.collectives.txt").read_text() == \
        "launcher output\n" + "".join(f"monitor: {line}\n" for line in result.verdict.lines())
    for name in ("run-1.collectives.json", "run-1.collectives.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
    # The same name again (`check-collectives` twice in a second): the next name, nothing overwritten.
    again = check(["torchrun", "train.py"], tmp_path / "run-1.log", env=env)
    assert again.saved == tmp_path / "run-1-2.collectives.json"
    assert _private_folders() <= before  # the measurement's private folder is gone


def test_a_failing_test_is_one_line_naming_the_error(tmp_path: Path):
    env = _launcher(tmp_path, "print('noise'); print('RuntimeError: Connection reset by peer'); print('more'); sys.exit(3)")
    result = check(["torchrun", "train.py"], tmp_path / "run-1.log", env=env)
    assert result.verdict is None
    assert result.problem == ("the test exited 3: RuntimeError: Connection reset by peer "
                              f"(all of it in {tmp_path / 'run-1.collectives.txt'})")
    assert result.lines() == [f"collectives check failed: {result.problem} "
                              f"(the check took {result.seconds:.1f} s; kept in {result.saved})"]


def test_a_test_past_its_time_is_stopped_whole(tmp_path: Path):
    env = _launcher(tmp_path, "import subprocess; subprocess.Popen(['sleep', '60']); time.sleep(60)")
    started = time.monotonic()
    result = check(["torchrun", "train.py"], tmp_path / "run-1.log", env=env, timeout_s=2)
    assert time.monotonic() - started < 15
    assert result.problem is not None and result.problem.startswith("the test did not end within 2 s")
    # This test's own `sleep 60` (its PATH holds tmp_path), not one of another test's running beside
    # it under xdist; a zombie is a stopped process that init has not reaped yet.
    leftovers = [p for p in psutil.process_iter(["cmdline", "environ", "status"])
                 if p.info["cmdline"] == ["sleep", "60"] and p.info["status"] != psutil.STATUS_ZOMBIE
                 and str(tmp_path) in (p.info["environ"] or {}).get("PATH", "")]
    assert leftovers == []


def test_a_measurement_that_is_not_one_is_said(tmp_path: Path):
    env = _launcher(tmp_path, "open(out, 'x').write('{\"version\": 7}')")
    result = check(["torchrun", "train.py"], tmp_path / "run-1.log", env=env)
    assert result.problem is not None and result.problem.startswith("the test wrote no usable measurement: ")
    assert result.problem.endswith("measurement.json: not a collective test's measurement (version 1)")


@pytest.mark.parametrize("strict", [False, True])
def test_the_gate_says_the_outlier_and_stops_only_when_strict(tmp_path: Path, monkeypatch, capsys, strict: bool):
    monkeypatch.setenv("PATH", _launcher(tmp_path, _writes(_measurement(slow_rank=1)))["PATH"])
    gate = before_launch(["torchrun", "train.py"], strict=strict)(tmp_path / "run-1.log")
    [finding] = gate.findings
    assert (finding.rule, finding.category, finding.severity, finding.rank, finding.node) == \
        ("collectives-slow-rank", "preflight", "warning", 1, "vm")
    assert finding.remedy == "check its GPU's link (nvidia-smi topo -m) and what else runs on its CPUs"
    err = capsys.readouterr().err
    assert "monitor: rank 1 on node vm is 80x slower than the other ranks of its node" in err
    if strict:
        assert gate.stop_code == 1 and gate.reason == f"the collectives check: {finding.title}"
        assert f"monitor: --check-collectives=strict: the job is not launched: {finding.title}" in err
    else:
        assert gate.stop_code is None


def test_a_node_slow_on_all_reduce_is_a_finding_of_its_own_beside_its_pairs():
    from monitor.collectives.verdict import Outlier
    from monitor.runner.collectives_check import finding

    by_all_reduce = finding(Outlier("node", "gpu-07", (4, 5), "all_reduce", 0.03, 0.005, 1 << 20))
    by_pairs = finding(Outlier("node", "gpu-07", (4, 5), "transfer", 0.04, 0.001, 1 << 20))
    assert (by_all_reduce.rule, by_all_reduce.node, by_all_reduce.ranks, by_all_reduce.rank) == \
        ("collectives-slow-node-all-reduce", "gpu-07", [4, 5], None)
    assert by_all_reduce.title.startswith("node gpu-07 is 6x slower on all_reduce than the others (")
    assert by_pairs.rule == "collectives-slow-node"


def test_run_says_when_it_cannot_check_and_strict_refuses(tmp_path: Path):
    job = (sys.executable, "-c", "print('trained')")
    result = subprocess.run(monitor_cmd(tmp_path, *job, extra=("--check-collectives",)), capture_output=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 0 and result.stdout == b"trained\n"
    assert b"monitor: collectives not checked: the collective test rides on torchrun" in result.stderr
    assert only_log(tmp_path).read_bytes() == b"trained\n"
    strict = subprocess.run(monitor_cmd(tmp_path / "strict", *job, extra=("--check-collectives=strict",)),
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert strict.returncode == 2 and strict.stderr.decode().count("\n") == 1
    assert "run: --check-collectives=strict: the collective test rides on torchrun" in strict.stderr.decode()


def test_run_launches_after_naming_an_outlier_and_reports_it_with_the_job(tmp_path: Path):
    # The stand-in torchrun runs the exercise (given --out) and then the job itself.
    body = ("if '--out' not in sys.argv: print('trained'); sys.exit(0)\n" + _writes(_measurement(slow_rank=3)))
    env = _launcher(tmp_path, body)
    result = subprocess.run(monitor_cmd(tmp_path / "logs", "torchrun", "train.py", extra=("--check-collectives",)),
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
    err = result.stderr.decode()
    assert result.returncode == 0 and result.stdout == b"trained\n", err
    assert err.index("monitor: rank 3 on node vm is 80x slower") < err.index("recording to")
    diagnosis = json.loads(only_log(tmp_path / "logs").with_suffix(".diagnosis.json").read_text())
    [finding] = [f for f in diagnosis["findings"] if f["rule"] == "collectives-slow-rank"]
    assert (finding["rank"], finding["severity"], finding["origin"]) == (3, "warning", "preflight")
    assert diagnosis["root_cause"] is None


def test_run_reports_a_node_slow_on_all_reduce_before_the_launch_and_with_the_job(tmp_path: Path):
    body = ("if '--out' not in sys.argv: print('trained'); sys.exit(0)\n" + _writes(_nodes_measurement("gpu-07")))
    env = _launcher(tmp_path, body)
    result = subprocess.run(monitor_cmd(tmp_path / "logs", "torchrun", "train.py", extra=("--check-collectives",)),
                            capture_output=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
    err = result.stderr.decode()
    assert result.returncode == 0 and result.stdout == b"trained\n", err
    line = ("node gpu-07 is 6x slower on all_reduce than the others (1.0 MiB in 30 ms with it, 5.00 ms between "
            "the others): all_reduce with gpu-07 is slow: check its NIC/IB (ibstat, the link's error counters)")
    assert err.index(f"monitor: {line} (the check took ") < err.index("recording to")
    log = only_log(tmp_path / "logs")
    saved = json.loads(log.with_name(f"{log.stem}.collectives.json").read_text())
    assert saved["verdict"]["lines"][-1] == line
    assert log.with_name(f"{log.stem}.collectives.txt").read_text().endswith(f"\nmonitor: {line}\n")
    diagnosis = json.loads(log.with_suffix(".diagnosis.json").read_text())
    [finding] = [f for f in diagnosis["findings"] if f["rule"] == "collectives-slow-node-all-reduce"]
    assert (finding["node"], finding["ranks"], finding["origin"]) == ("gpu-07", [2], "preflight")
    assert finding["title"] == line.split(": all_reduce with")[0]
    # The end report, after the job, holds it too.
    assert f"warning [confirm] {finding['title']} — node gpu-07, rank 2, ×1, before the job started " \
           "(collectives-slow-node-all-reduce)" in err[err.index("recording to"):]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_during_the_test_stops_the_test_too(tmp_path: Path, signum: int):
    env = _launcher(tmp_path, "import subprocess; subprocess.Popen(['sleep', '61']); time.sleep(61)")
    # The monitor's own temporary folder, where the measurement's private folder is made: SIGTERM's
    # default action ended the monitor before it removed that folder.
    (tmp_path / "tmp").mkdir()
    monitor = subprocess.Popen([sys.executable, "-m", "monitor", "check-collectives", "--log-dir", str(tmp_path),
                                "--", "torchrun", "train.py"], env={**env, "TMPDIR": str(tmp_path / "tmp")},
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def launched() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "61"]
                and os.getsid(p.pid) != os.getsid(0)]
    deadline = time.monotonic() + 30
    while not (test := launched()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert test, "the stand-in launcher never started"
    monitor.send_signal(signum)
    _, err = monitor.communicate(timeout=20)
    assert monitor.returncode in (-signum, 130, 128 + signum), err.decode()[-2000:]
    psutil.wait_procs(test, timeout=5)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in test)
    assert list((tmp_path / "tmp").iterdir()) == []
