"""Record the real sample runs in sample_logs/cpu/ by running each job of make/cpu_jobs/ under
`monitor run` (CPU, gloo, 2 ranks under torchrun).

    python sample_logs/make/record_cpu_jobs.py              # every job
    python sample_logs/make/record_cpu_jobs.py segv-rank1

Each job runs in a scratch folder of its own (the jobs write ckpt/ and data beside themselves);
what `monitor run --log-dir` wrote of it is kept: the log, the recorder's run-X.job.json and the
launch's run-X.meta.json (its world size). Nothing is edited afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

JOBS = Path(__file__).resolve().parent / "cpu_jobs"
CPU_DIR = Path(__file__).resolve().parent.parent / "cpu"
KEPT = (".log", ".job.json", ".meta.json")
# Jobs launched otherwise: torchrun's options before the script, and the environment they need
# (torch 2.13's restarted workers reuse the agent's store and the first attempt's addresses unless
# TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: their init_process_group then times out).
LAUNCH = {"restart-once-clean": (["--max-restarts", "1"], {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})}


def record(name: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copy(JOBS / f"{name}.py", Path(scratch) / "job.py")
        options, extra_env = LAUNCH.get(name, ([], {}))
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        subprocess.run([sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight", "--no-user-rules",
                        "--log-dir", "logs", "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                        "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", *options, "job.py"],
                       cwd=scratch, env={**env, **extra_env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        target = CPU_DIR / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for path in sorted((Path(scratch) / "logs").iterdir()):
            if path.name.endswith(KEPT):
                shutil.copy(path, target / path.name)
        print(f"{name}: {sorted(p.name for p in target.iterdir())}")


if __name__ == "__main__":
    for name in sys.argv[1:] or sorted(p.stem for p in JOBS.glob("*.py")):
        record(name)
