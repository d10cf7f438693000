"""The demo job fails for real: each scenario runs under torchrun (2 ranks, gloo, CPU).

All torchrun launches start together in one module fixture so the suite waits for the slowest
(the gloo timeout of `hang`), not for the sum of them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

# Short enough to keep the test fast, long enough that a loaded CI machine does not time out
# in the scenarios that are not meant to.
HANG_TIMEOUT_S = 5
OTHER_TIMEOUT_S = 60
SCENARIOS = ("ok", "hang", "crash", "sigkill", "nan", "bad-ckpt")


def _job_env() -> dict[str, str]:
    env = dict(os.environ)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _torchrun(scenario: str, ckpt_dir: Path) -> subprocess.Popen:
    timeout = HANG_TIMEOUT_S if scenario == "hang" else OTHER_TIMEOUT_S
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
        "-m", "monitor.demo.train", "--scenario", scenario, "--timeout", str(timeout),
        "--ckpt-dir", str(ckpt_dir),
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_job_env())


class Run:
    def __init__(self, rc: int, output: str, ckpt_dir: Path) -> None:
        self.rc, self.output, self.ckpt_dir = rc, output, ckpt_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    started = {}
    for scenario in SCENARIOS:
        ckpt_dir = tmp_path_factory.mktemp(f"ckpt-{scenario}")
        started[scenario] = (_torchrun(scenario, ckpt_dir), ckpt_dir)
    results = {}
    for scenario, (proc, ckpt_dir) in started.items():
        out, _ = proc.communicate(timeout=180)
        results[scenario] = Run(proc.returncode, out.decode("utf-8", "replace"), ckpt_dir)
    return results


def test_ok_trains_and_saves_a_loadable_checkpoint(runs: dict[str, Run]) -> None:
    run = runs["ok"]
    assert run.rc == 0, run.output
    losses = [float(v) for v in re.findall(r"^step \d+ loss ([\d.]+)$", run.output, re.M)]
    assert len(losses) == 6
    assert re.search(r"^\{'loss': [\d.]+, 'learning_rate': 0\.1, 'epoch': 1\.0\}$", run.output, re.M)
    state = torch.load(run.ckpt_dir / "final.pt", weights_only=True)
    assert state["step"] == 6 and "0.weight" in state["model"]
    assert not list(run.ckpt_dir.glob("*.tmp")), "atomic save left its temporary file"
    assert "[rank0] done" in run.output and "[rank1] done" in run.output


def test_hang_times_out_in_ddp_backward_on_the_waiting_rank(runs: dict[str, Run]) -> None:
    run = runs["hang"]
    assert run.rc == 1, run.output
    assert f"[rank1] step 3: loading the batch will block for {HANG_TIMEOUT_S * 3:g}s" in run.output
    rank0 = [line for line in run.output.splitlines() if line.startswith("[rank0]:")]
    # The peers wait in DDP's gradient all-reduce, inside loss.backward().
    assert any("loss.backward()" in line for line in rank0), run.output
    assert any(f"Timed out waiting {HANG_TIMEOUT_S * 1000}ms for recv operation to complete" in line
               for line in rank0), run.output
    assert "ChildFailedError" in run.output
    # The gloo timeout ended it, not rank 1's stall running out: torchrun's first failure is rank
    # 0's, and rank 1 never got past its stall (past it, its backward would have met the dead peer
    # and printed a "[rank1]:" traceback). A wall-clock bound here failed on a loaded machine, where
    # the six jobs' start-up alone took a minute.
    first_failure = run.output.split("Root Cause (first observed failure):", 1)[1]
    assert re.search(r"rank\s*:\s*0 \(local_rank: 0\)", first_failure), run.output
    assert not any(line.startswith("[rank1]:") for line in run.output.splitlines()), run.output


def test_crash_raises_the_users_value_error_on_rank_1(runs: dict[str, Run]) -> None:
    run = runs["crash"]
    assert run.rc == 1, run.output
    assert "[rank1]: ValueError: step 3: target batch has 33 rows but the input has 32" in run.output
    assert "ChildFailedError" in run.output
    assert not re.search(r"^step 3 loss", run.output, re.M)


def test_sigkill_kills_rank_1_with_signal_9(runs: dict[str, Run]) -> None:
    run = runs["sigkill"]
    assert run.rc == 1, run.output
    pid = re.search(r"\[rank1\] step 3: sending SIGKILL to myself \(pid (\d+)\)", run.output).group(1)
    assert re.search(rf"exitcode\s*: -9 \(pid: {pid}\)", run.output), run.output
    assert f"Signal 9 (SIGKILL) received by PID {pid}" in run.output


def test_nan_prints_nan_loss_then_stops(runs: dict[str, Run]) -> None:
    run = runs["nan"]
    assert run.rc == 1, run.output
    assert re.search(r"^step \d+ loss nan$", run.output, re.M)
    assert re.search(r"^\{'loss': nan, ", run.output, re.M)
    assert re.search(r"FloatingPointError: loss is nan at step \d+; stopping", run.output)


def test_bad_ckpt_fails_in_torch_load_with_the_real_reader_error(runs: dict[str, Run]) -> None:
    run = runs["bad-ckpt"]
    assert run.rc == 1, run.output
    assert ("[rank1]: RuntimeError: PytorchStreamReader failed reading zip archive: "
            "failed finding central directory") in run.output
    # The good checkpoint it was cut from still loads: only the truncated copy is bad.
    torch.load(run.ckpt_dir / "good.pt", weights_only=True)
    good, cut = (run.ckpt_dir / "good.pt").stat().st_size, (run.ckpt_dir / "resume.pt").stat().st_size
    assert cut == good // 2


def test_standalone_single_rank_fails_on_rank_0(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "monitor.demo.train", "--scenario", "crash", "--steps", "2",
         "--fail-step", "2", "--ckpt-dir", str(tmp_path)],
        capture_output=True, text=True, env=_job_env(), timeout=120,
    )
    assert proc.returncode == 1
    assert "world_size=1" in proc.stdout
    assert "step 1 loss" in proc.stdout
    assert "ValueError: step 2: target batch has 33 rows" in proc.stderr


def test_bad_options_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from monitor.demo.train import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(["--steps", "3", "--fail-step", "5"])
    assert exc.value.code == 2
    assert "--fail-step must be between 1 and --steps (3)" in capsys.readouterr().err


def test_a_rank_to_fail_outside_the_job_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from monitor.demo.train import main as demo_main

    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert demo_main(["--scenario", "crash", "--rank-to-fail", "3", "--ckpt-dir", str(tmp_path)]) == 2
    assert "--rank-to-fail 3 is not a rank of this job (0..0)" in capsys.readouterr().err
    assert not torch.distributed.is_initialized()
