"""The watched job's process tree through psutil, each process mapped to its rank.

Ranks come from RANK / LOCAL_RANK in /proc/PID/environ (set by torchrun, accelerate,
DeepSpeed and most SLURM wrappers), read once per process; else from an MPI launcher's own
(Open MPI's OMPI_COMM_WORLD_RANK, MPICH's and Intel MPI's PMI_RANK: mpirun starting the ranks
itself), except for a process whose children carry RANK (a torchrun that mpirun started, one per
node: its MPI rank is its node's). Where the environment is not readable (another user's process)
the rank stays None. Processes seen once are kept while
they run, so ranks orphaned by a dead launcher are still shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil

from monitor.metrics.model import JobProcess, JobSample

JobPids = Iterable[int] | Callable[[], Iterable[int]]

# Finding new descendants scans every process of the machine (/proc/*/stat), the dominant
# cost on a busy node; it runs on every DISCOVER_EVERY-th read and whenever the roots change.
# Known processes are re-read on every read.
DISCOVER_EVERY = 5
# Environment variables kept per process: advice must not suggest what the job already does.
# torch reads its allocator settings from PYTORCH_ALLOC_CONF (the primary name in recent torch,
# include/c10/core/AllocatorConfig.h) or PYTORCH_CUDA_ALLOC_CONF (kept for compatibility).
ALLOC_CONF_VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
ENV_KEPT = (*ALLOC_CONF_VARIABLES, "CUDA_VISIBLE_DEVICES", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
# The rank an MPI launcher gives each process it starts, where no RANK is set.
MPI_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK")
# Reads of a process's environment while it shows no RANK: a child caught between fork and exec
# shows its parent's environment (a launcher's, without RANK) until it execs, microseconds later.
ENV_READS = 3


class JobReader:
    def __init__(self, job_pids: JobPids) -> None:
        # A fixed collection is copied: a generator would be spent after the first read.
        self._job_pids = job_pids if callable(job_pids) else [int(p) for p in job_pids]
        # pid -> (process, its kept environment). psutil.Process compares create times, so a
        # recycled PID is a new entry.
        # pid -> (the process, its environment as read, how many times it was read)
        self._known: dict[int, tuple[psutil.Process, dict[str, str], int]] = {}
        self._reads = 0
        self._last_roots: list[int] = []

    def root_pids(self) -> list[int]:
        pids = self._job_pids() if callable(self._job_pids) else self._job_pids
        return [int(p) for p in pids]

    def read(self) -> JobSample:
        roots = self.root_pids()
        discover = self._reads % DISCOVER_EVERY == 0 or roots != self._last_roots
        self._reads += 1
        self._last_roots = roots
        tree: dict[int, psutil.Process] = {}
        # Parents first (a lower PID, as a rule): a root already found below another root needs
        # no walk of its own (a runner passes the whole tree as roots; each walk scans /proc).
        for pid in sorted(roots):
            if pid in tree:
                continue
            root = self._process(pid)
            if root is None:
                continue
            tree[pid] = root
            if not discover:
                continue
            try:
                for child in root.children(recursive=True):
                    tree.setdefault(child.pid, self._known[child.pid][0] if child.pid in self._known else child)
            except psutil.Error:
                pass
        for pid, (proc, _, _) in list(self._known.items()):
            if pid not in tree:
                tree[pid] = proc
        processes = []
        # The job's roots first, then the rest by pid: pids wrap around, and a child started after
        # the wrap must not be listed above the process the user named.
        for _, proc in sorted(tree.items(), key=lambda item: (item[0] not in roots, item[0])):
            row = self._read_process(proc)
            if row is not None:
                processes.append(row)
        # A launcher's MPI rank is its node's, not a rank of the job's: its workers carry RANK.
        launchers = {row.ppid for row in processes if "RANK" in self._env_of(row.pid)}
        for row in processes:
            if row.pid in launchers and "RANK" not in self._env_of(row.pid):
                row.rank = None
        rank_of = {p.pid: p.rank for p in processes}
        for row in processes:
            row.worker = row.rank is not None and row.ppid is not None and rank_of.get(row.ppid) == row.rank
        return JobSample(root_pids=roots, alive=bool(processes), processes=processes)

    def _env_of(self, pid: int) -> dict[str, str]:
        known = self._known.get(pid)
        return known[1] if known is not None else {}

    def _process(self, pid: int) -> psutil.Process | None:
        known = self._known.get(pid)
        if known is not None:
            return known[0]
        try:
            return psutil.Process(pid)
        except psutil.Error:
            return None

    def _read_process(self, proc: psutil.Process) -> JobProcess | None:
        known = self._known.get(proc.pid)
        try:
            if known is not None and not proc.is_running():
                raise psutil.NoSuchProcess(proc.pid)
            with proc.oneshot():
                if proc.status() == psutil.STATUS_ZOMBIE:
                    raise psutil.NoSuchProcess(proc.pid)
                cpu = proc.cpu_percent(None)
                row = JobProcess(
                    pid=proc.pid,
                    ppid=proc.ppid(),
                    name=proc.name(),
                    # The first cpu_percent() call only sets a baseline.
                    cpu_percent=cpu if known is not None else None,
                    rss_bytes=proc.memory_info().rss,
                )
        except psutil.Error:
            self._known.pop(proc.pid, None)
            return None
        if known is None or ("RANK" not in known[1] and known[2] < ENV_READS):
            known = (proc, _environment(proc), known[2] + 1 if known is not None else 1)
            self._known[proc.pid] = known
        env = known[1]
        row.rank, row.local_rank = _int(env.get("RANK")), _int(env.get("LOCAL_RANK"))
        if row.rank is None:
            row.rank = next((_int(env[name]) for name in MPI_RANK_VARIABLES if name in env), None)
        row.env = {k: env[k] for k in ENV_KEPT if k in env}
        return row


def _environment(proc: psutil.Process) -> dict[str, str]:
    """RANK, LOCAL_RANK, an MPI launcher's rank and ENV_KEPT from /proc/PID/environ; empty when
    not readable."""
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return {}
    return {k: env[k] for k in ("RANK", "LOCAL_RANK", *MPI_RANK_VARIABLES, *ENV_KEPT) if k in env}


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
