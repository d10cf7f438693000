"""What a run's job ran with, recorded so a failed run can be compared with the last good one
(``diagnosis/changes.py``): the Python and the versions of the packages that matter as the job's
own interpreter sees them, the environment variables that steer NCCL, torch and CUDA, the
command, the world, the git commit of the working folder and the GPU driver.

Taken on a thread beside the job (``EnvironmentProbe``), never before it: the job starts at once.
Every value that could hold a credential is masked as everywhere else.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

from monitor.diagnosis.secrets import mask, mask_args

PACKAGES = ("torch", "accelerate", "deepspeed", "transformers", "numpy", "triton", "nvidia-nccl-cu12",
            "nvidia-nccl-cu11", "jax", "jaxlib", "lightning", "pytorch-lightning", "megatron-core", "wandb")
ENV_PREFIXES = ("NCCL_", "TORCH_", "CUDA_", "PYTORCH_", "OMP_", "MASTER_", "GLOO_", "TORCHELASTIC_")
ENV_NAMES = ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "NNODES", "SLURM_JOB_NODELIST", "SLURM_NNODES")
PROBE_TIMEOUT_S = 10.0
MAX_ENV_VALUE = 500
# Run by the job's own interpreter: versions from package metadata, torch's CUDA version from its
# version.py; nothing is imported, so it costs milliseconds, not torch's import.
_VERSIONS = r"""
import json, platform, sys
from importlib import metadata
packages = {}
for name in sys.argv[1:]:
    try:
        packages[name] = metadata.version(name)
    except Exception:
        pass
cuda = None
try:
    text = metadata.distribution("torch").locate_file("torch/version.py").read_text()
    cuda = next((line.split("=", 1)[1].strip().strip("'\"") for line in text.splitlines()
                 if line.startswith("cuda")), None)
except Exception:
    pass
print(json.dumps({"python": platform.python_version(), "packages": packages, "torch_cuda": cuda}))
"""


def interpreter(command: list[str]) -> str:
    """The Python the job runs: ``python ...`` itself, the interpreter of a script's shebang
    (torchrun, accelerate, deepspeed), else the monitor's own."""
    if command:
        found = shutil.which(command[0])
        if found and Path(found).name.startswith("python"):
            return found
        if found:
            try:
                with open(found, "rb") as stream:
                    first = stream.readline(512).decode("utf-8", "replace")
            except OSError:
                first = ""
            if first.startswith("#!") and "python" in first:
                words = first[2:].split()
                if words and Path(words[0]).name == "env" and len(words) > 1:
                    return shutil.which(words[1]) or sys.executable
                if words:
                    return words[0]
    return sys.executable


def record(command: list[str], cwd: str, env: dict[str, str] | None = None) -> dict:
    """The environment of a job started with ``command`` in ``cwd`` (plain data, masked)."""
    env = dict(os.environ if env is None else env)
    data: dict = {"host": socket.gethostname(), "command": mask_args(list(command))}
    data.update(_versions(interpreter(command)))
    data["env"] = {name: mask(f"{name}={value[:MAX_ENV_VALUE]}").split("=", 1)[1]
                   for name, value in sorted(env.items())
                   if name.startswith(ENV_PREFIXES) or name in ENV_NAMES}
    data["git"] = _git(cwd)
    data["driver"] = _driver()
    return data


def _versions(python: str) -> dict:
    try:
        out = subprocess.run([python, "-c", _VERSIONS, *PACKAGES], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        return json.loads(out.stdout) if out.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}


def _git(cwd: str) -> dict | None:
    """The commit of the working folder and whether it has changes, when it is a git checkout."""
    try:
        head = subprocess.run(["git", "-C", cwd, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, stdin=subprocess.DEVNULL)
        if head.returncode != 0:
            return None
        status = subprocess.run(["git", "-C", cwd, "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=5, stdin=subprocess.DEVNULL)
        return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return None


def _driver() -> str | None:
    """The NVIDIA driver's version, from the kernel module (no NVML needed)."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as stream:
            first = stream.readline(1000)
    except OSError:
        return None
    words = first.split()
    return next((w for w in words if w[:1].isdigit() and "." in w), None)


class EnvironmentProbe(threading.Thread):
    """``record`` on its own thread, started beside the job; ``result`` waits a little for it."""

    def __init__(self, command: list[str], cwd: str) -> None:
        super().__init__(name="environment-probe", daemon=True)
        self.command, self.cwd = list(command), cwd
        self._result: dict | None = None

    def run(self) -> None:
        try:
            self._result = record(self.command, self.cwd)
        except Exception as exc:  # a fault of the monitor never reaches the job or its report
            self._result = {"error": f"{type(exc).__name__}: {exc}"[:200]}

    def result(self, timeout: float = 2.0) -> dict | None:
        self.join(timeout)
        return self._result
