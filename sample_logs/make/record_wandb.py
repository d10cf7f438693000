"""Record the real wandb samples in sample_logs/demo/: a 2-rank torchrun job whose rank 0 calls
wandb.init (1) with no API key and (2) with a key but no network (this machine reaches only
package registries), which ends in wandb's init timeout.

wandb is not a dependency of monitor; record with an interpreter that has torch and wandb:

    python -m venv --system-site-packages /tmp/wandbenv && /tmp/wandbenv/bin/pip install wandb
    /tmp/wandbenv/bin/python sample_logs/make/record_wandb.py

HOME and the working directory are a fresh temporary directory, so no real credentials
(~/.netrc, ~/.config/wandb) are read and wandb's run files are thrown away.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

MAKE = Path(__file__).resolve().parent
DEMO_DIR = MAKE.parent / "demo"
# A well-formed (40 characters) but made-up key: wandb accepts it locally, then has to reach
# its server, which it cannot from here.
FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"


def record(name: str, **env_extra: str) -> int:
    with tempfile.TemporaryDirectory(prefix="monitor-wandb-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
        env.update(HOME=home, PYTHONUNBUFFERED="1", **env_extra)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", str(MAKE / "wandb_job.py")]
        with open(DEMO_DIR / name, "wb") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=env, cwd=home, timeout=300)
    print(f"{name}: exit {proc.returncode}")
    return proc.returncode


def main() -> int:
    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    record("wandb-no-api-key-2ranks.log")
    record("wandb-init-timeout-2ranks.log", WANDB_API_KEY=FAKE_KEY, WANDB_INIT_TIMEOUT="15")
    return 0


if __name__ == "__main__":
    sys.exit(main())
