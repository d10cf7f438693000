"""Record the real sample logs in sample_logs/demo/ by running the demo job (CPU, gloo).

    python sample_logs/make/record_demo.py            # all recordings
    python sample_logs/make/record_demo.py crash-2ranks port-in-use

Each recording is the byte-exact console output (stdout and stderr merged, as `2>&1` does) of
a real torchrun or python launch; `--log-dir` recordings are directories in torchrun's layout
(`<run id>/attempt_0/<local rank>/{stdout,stderr}.log`) with the launcher's console beside
them as `torchrun.log`. Nothing is edited afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent.parent / "demo"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
LOCAL_RDZV = ["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"]
DEMO = ["-m", "monitor.demo.train"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def record(cmd: list[str], out: Path, env: dict[str, str] | None = None) -> int:
    """Run cmd with stdout and stderr going to one file, as a user's `cmd > run.log 2>&1` does."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env or clean_env(),
                              timeout=300)
    return proc.returncode


def torchrun_scenario(scenario: str, *demo_args: str, nproc: int = 2,
                      launcher_args: tuple[str, ...] = ()) -> list[str]:
    return [*TORCHRUN, "--nproc-per-node", str(nproc), *LOCAL_RDZV, *launcher_args,
            *DEMO, "--scenario", scenario, *demo_args]


def record_log_dir(name: str, scenario: str, *demo_args: str) -> int:
    """A torchrun --log-dir recording: per-rank files plus the launcher console."""
    target = DEMO_DIR / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    cmd = torchrun_scenario(scenario, *demo_args,
                            launcher_args=("--log-dir", str(target), "--redirects", "3"))
    return record(cmd, target / "torchrun.log")


def record_port_in_use(name: str) -> int:
    """Two torchrun launches on one --master-port: the second cannot bind the store port."""
    port = str(free_port())
    static = ["--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port]
    first = subprocess.Popen(
        [*TORCHRUN, *static, *DEMO, "--steps", "12", "--sleep-per-step", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=clean_env(),
    )
    try:
        time.sleep(5)  # the first job's agent now listens on the port
        return record([*TORCHRUN, *static, *DEMO], DEMO_DIR / name)
    finally:
        first.wait(timeout=120)


def record_sigterm_torchrun(name: str) -> int:
    """A long run whose torchrun gets SIGTERM from outside (as scancel or kill sends it) once the
    ranks are training."""
    out = DEMO_DIR / name
    cmd = torchrun_scenario("ok", "--steps", "400", "--sleep-per-step", "0.5")
    with open(out, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=clean_env())
        deadline = time.monotonic() + 120
        while b"step 5 " not in out.read_bytes() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=120)


def record_store_connect_timeout(name: str) -> int:
    """Rank 1 started by hand while rank 0 (the store host) never came up."""
    env = clean_env(RANK="1", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                    MASTER_PORT=str(free_port()))
    return record([sys.executable, *DEMO, "--timeout", "5"], DEMO_DIR / name, env)


def record_rendezvous_timeout(name: str) -> int:
    """A 2-node c10d rendezvous where the second node never starts."""
    cmd = [*TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"localhost:{free_port()}", "--rdzv-id", "demo-job-17",
           "--rdzv-conf", "join_timeout=5", *DEMO]
    return record(cmd, DEMO_DIR / name)


def recordings(ckpt_dir: str) -> dict:
    ckpt = ("--ckpt-dir", ckpt_dir)
    return {
        "ok-2ranks.log": lambda n: record(torchrun_scenario("ok", *ckpt), DEMO_DIR / n),
        "ok-tee-2ranks.log": lambda n: record(
            torchrun_scenario("ok", "--steps", "8", *ckpt, launcher_args=("--tee", "3")),
            DEMO_DIR / n),
        "hang-gloo-2ranks.log": lambda n: record(
            torchrun_scenario("hang", "--timeout", "5", *ckpt), DEMO_DIR / n),
        "hang-gloo-logdir": lambda n: record_log_dir(n, "hang", "--timeout", "5", *ckpt),
        "crash-2ranks.log": lambda n: record(torchrun_scenario("crash", *ckpt), DEMO_DIR / n),
        "crash-4ranks.log": lambda n: record(
            torchrun_scenario("crash", "--rank-to-fail", "2", *ckpt, nproc=4), DEMO_DIR / n),
        "crash-tee-2ranks.log": lambda n: record(
            torchrun_scenario("crash", *ckpt, launcher_args=("--tee", "3")), DEMO_DIR / n),
        "sigkill-2ranks.log": lambda n: record(torchrun_scenario("sigkill", *ckpt), DEMO_DIR / n),
        "sigkill-logdir": lambda n: record_log_dir(n, "sigkill", *ckpt),
        "nan-2ranks.log": lambda n: record(torchrun_scenario("nan", *ckpt), DEMO_DIR / n),
        "nan-single.log": lambda n: record(
            [sys.executable, *DEMO, "--scenario", "nan", *ckpt], DEMO_DIR / n),
        "bad-ckpt-2ranks.log": lambda n: record(
            torchrun_scenario("bad-ckpt", *ckpt), DEMO_DIR / n),
        "bad-ckpt-single.log": lambda n: record(
            [sys.executable, *DEMO, "--scenario", "bad-ckpt", *ckpt], DEMO_DIR / n),
        "port-in-use.log": record_port_in_use,
        "sigterm-torchrun-2ranks.log": record_sigterm_torchrun,
        "store-connect-timeout.log": record_store_connect_timeout,
        "rendezvous-timeout.log": record_rendezvous_timeout,
    }


def main(names: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="monitor-demo-ckpt-") as ckpt_dir:
        table = recordings(ckpt_dir)
        unknown = [n for n in names if n not in table]
        if unknown:
            print(f"unknown recording(s): {', '.join(unknown)}; known: {', '.join(table)}",
                  file=sys.stderr)
            return 2
        for name in names or list(table):
            started = time.monotonic()
            rc = table[name](name)
            print(f"{name}: exit {rc} in {time.monotonic() - started:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
