"""The flight recorder's environment variables, set for a job unless the user set them.

Names checked against torch 2.13 (``strings libtorch_cpu.so``; the CUDA build adds the NCCL
watchdog's): the recorder reads each setting from a list of names, the current one
(``TORCH_FR_*``) and the old one (``TORCH_NCCL_*``, the only one in older releases), and warns in
every rank's log when it finds the old one. So one name is set: the current one when the torch
installed beside the monitor (most often the job's) is 2.10 or newer, else the old one, which
every release reads.

- buffer size: entries kept per process (0 turns the recorder off);
- dump file prefix: each rank writes ``<prefix><rank>`` (a pickle of builtins);
- dump on timeout: the NCCL watchdog dumps when a collective times out (gloo does not);
- pipe file: each rank of an NCCL job opens the FIFO ``<prefix><rank>.pipe``; a write to it
  asks for a dump (``pipes.request_dumps``). ``serve.py`` does the same for gloo jobs.

C++ stacks in dumps stay off (their default): a dump taking them can itself hang on the GIL of
an unhealthy process (pytorch#167023); the Python stacks come from py-spy instead.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

BUFFER_SIZE = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DUMP_FILE = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DUMP_ON_TIMEOUT = ("TORCH_NCCL_DUMP_ON_TIMEOUT",)
PIPE_FILE = ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE",)
# Enough for the last few steps of a large model's collectives; each entry is a few hundred bytes.
ENTRIES = 2000
# torch's own default prefix, where dumps go when the user set none.
TORCH_DEFAULT_DUMP_FILE = "/tmp/nccl_trace_rank_"


@dataclass(slots=True)
class RecorderPlan:
    """What ``monitor run`` sets for a job, and where its dumps and pipes are."""

    folder: Path
    dump_prefix: str
    pipe_prefix: str
    set: dict[str, str] = field(default_factory=dict)        # variables we set
    kept: dict[str, str] = field(default_factory=dict)       # the user's own, left alone

    def tidy(self) -> None:
        """The job has ended: its pipes take no more requests. Remove them, and the folder when
        no rank wrote a dump there (a run that went well leaves no empty folder behind)."""
        if any(name in self.set for name in PIPE_FILE):  # the job's own pipes are its business
            for pipe in glob.glob(glob.escape(self.pipe_prefix) + "*.pipe"):
                try:
                    if stat.S_ISFIFO(os.lstat(pipe).st_mode):
                        os.unlink(pipe)
                except OSError:
                    pass
        try:
            self.folder.rmdir()
        except OSError:
            pass  # dumps in it (kept), or not ours to remove

    def describe(self) -> str:
        if not self.set:
            return f"flight recorder: the job's own settings are kept ({_names(self.kept)})"
        line = f"flight recorder on for the job ({_names(self.set)}); dumps go to {self.folder}"
        if self.kept:
            line += f"; kept the job's own {_names(self.kept)}"
        return line + "; --no-flight-recorder turns this off"


def dumps_folder(log_path: Path) -> Path:
    """Where `monitor run` has the ranks of the run logged in ``log_path`` dump: ``run-X.fr/``."""
    return log_path.with_name(log_path.stem + ".fr")


# The first release known to read the TORCH_FR_* names (checked on 2.13; its dumps say '2.10').
CURRENT_NAMES_SINCE = (2, 10)


def plan(folder: Path, env: Mapping[str, str], torch_version: tuple[int, int] | None = None) -> RecorderPlan:
    """The variables to add to ``env`` so the job records its collectives, dumps them into
    ``folder`` (the run's ``run-X.fr/``) on a timeout and answers dump requests there.
    ``torch_version``: the job's torch (default: the one installed here, if any)."""
    version = torch_version if torch_version is not None else installed_torch()
    current = version is not None and version >= CURRENT_NAMES_SINCE
    result = RecorderPlan(folder=folder, dump_prefix=str(folder / "dump-rank"),
                          pipe_prefix=str(folder / "pipe-rank"))
    wanted = ((BUFFER_SIZE, str(ENTRIES)), (DUMP_FILE, result.dump_prefix), (DUMP_ON_TIMEOUT, "1"),
              (PIPE_FILE, result.pipe_prefix))
    for names, value in wanted:
        users = {name: env[name] for name in names if name in env}
        if users:
            result.kept.update(users)
        else:
            result.set[names[0] if current or len(names) == 1 else names[1]] = value
    result.dump_prefix = _first(env, DUMP_FILE) or result.dump_prefix
    result.pipe_prefix = _first(env, PIPE_FILE) or result.pipe_prefix
    return result


def installed_torch() -> tuple[int, int] | None:
    """(major, minor) of the torch installed beside the monitor, without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        major, minor = version("torch").split(".")[:2]
        return int(major), int(minor)
    except (PackageNotFoundError, ValueError):
        return None


def recorder_of(pids: list[int]) -> RecorderPlan | None:
    """Where the running job made of ``pids`` writes its dumps and opens its pipes, from its
    ranks' environment (relative paths taken from their working folder); None when no rank
    has a pipe file set (it cannot be asked for a dump) or its environment is not readable."""
    import psutil

    for pid in pids:
        try:
            process = psutil.Process(pid)
            env = process.environ()
            pipe_file = _first(env, PIPE_FILE)
            if "RANK" not in env or not pipe_file:
                continue
            cwd = Path(process.cwd())
        except (psutil.Error, OSError):
            continue
        dump_prefix = str(cwd / (_first(env, DUMP_FILE) or TORCH_DEFAULT_DUMP_FILE))
        pipe_prefix = str(cwd / pipe_file)
        return RecorderPlan(folder=Path(dump_prefix).parent, dump_prefix=dump_prefix, pipe_prefix=pipe_prefix)
    return None


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[name] for name in names if env.get(name)), None)


def _names(variables: dict[str, str]) -> str:
    return ", ".join(f"{name}={value}" for name, value in variables.items())
