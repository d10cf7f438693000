"""The demo's default checkpoint directory lives under the system temp dir and is removed when
the run ends, failed or not; directories of launchers that are gone are removed too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


def _run_demo(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["TMPDIR"] = str(tmp)  # tempfile.gettempdir() in the job
    return subprocess.run([sys.executable, "-m", "monitor.demo.train", "--steps", "2", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("scenario, code", [("ok", 0), ("bad-ckpt", 1), ("crash", 1)])
def test_default_checkpoint_dir_is_removed_when_the_run_ends(tmp_path: Path, scenario: str, code: int) -> None:
    orphan = tmp_path / f"monitor-demo-{_dead_pid()}"
    (orphan / "final.pt").parent.mkdir()
    (orphan / "final.pt").write_bytes(b"left by a killed run")
    unrelated = tmp_path / "monitor-demo-notapid"
    unrelated.mkdir()
    proc = _run_demo(tmp_path, "--scenario", scenario, "--fail-step", "2")
    assert proc.returncode == code, proc.stderr[-2000:]
    if scenario == "ok":
        assert f"saved checkpoint {tmp_path}" in proc.stdout  # it was used, under TMPDIR
    if scenario == "bad-ckpt":
        assert "PytorchStreamReader failed reading zip archive" in proc.stderr
    assert sorted(p.name for p in tmp_path.glob("monitor-demo-*")) == ["monitor-demo-notapid"]
