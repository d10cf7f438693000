"""A real one-node SLURM cluster for the tests, started by hand from Debian's packages (munge,
slurmctld, slurmd, slurm-client): munged with a key of its own, slurmctld -D and slurmd -D, every
file (key, socket, state, spool, logs, slurm.conf) in a temporary folder; this host is the only
node, with 4 CPUs whatever it has (SlurmdParameters=config_overrides), so 2-4 tasks fit.

``slurm_cluster`` skips where the daemons are not installed or the tests do not run as root (the
daemons run as SlurmUser=root here), and fails with the daemons' own last lines where they are
installed but do not come up. Commands reach the cluster through ``Cluster.env`` (SLURM_CONF);
nothing of the host's own configuration is read or changed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sbatch", "scancel", "scontrol", "squeue", "sinfo", "salloc")
START_TIMEOUT_S = 60.0
CPUS = 4


@dataclass
class Cluster:
    root: Path
    node: str
    env: dict[str, str]
    start_seconds: float
    processes: list[subprocess.Popen] = field(default_factory=list)

    def run(self, *command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def wait_gone(self, job: str, timeout: float) -> None:
        """Until ``job`` has left the queue (ended: squeue no longer lists it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if job not in self.run("squeue", "-h", "-o", "%i").stdout.split():
                return
            time.sleep(0.5)
        raise AssertionError(f"job {job} still in the queue after {timeout:g} s: {self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}"
                         for path in sorted((self.root / "log").glob("*")))


def missing() -> str | None:
    """Why a real cluster cannot be started here, or None."""
    absent = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if absent:
        return (f"SLURM is not installed ({', '.join(absent)} not found; Debian: apt-get install munge "
                f"slurmctld slurmd slurm-client)")
    if os.geteuid() != 0:
        return "the one-node SLURM cluster runs its daemons as root (SlurmUser=root): run the tests as root"
    return None


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _config(root: Path, host: str, ctld_port: int, slurmd_port: int) -> str:
    # A first job id of its own: collectives/exercise.py takes its rendezvous port from the job id.
    first_job = random.randrange(1000, 19000)
    return f"""\
ClusterName=monitortest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge/socket
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
PlugStackConfig={root}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=2
InactiveLimit=0
FirstJobId={first_job}
NodeName={host} NodeAddr=127.0.0.1 CPUs={CPUS} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
"""


def _start(cluster: Cluster) -> None:
    """Start the daemons into ``cluster`` (its processes, as they start: stopped even when a later
    one fails) and wait until a step runs."""
    root = cluster.root
    for folder in ("munge", "state", "spool", "log"):
        (root / folder).mkdir(mode=0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    (root / "plugstack.conf").write_text("")
    host = socket.gethostname().split(".")[0]
    ctld_port, slurmd_port = _free_ports(2)
    conf = root / "slurm.conf"
    conf.write_text(_config(root, host, ctld_port, slurmd_port))
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "SBATCH_", "SALLOC_"))}
    env["SLURM_CONF"] = str(conf)
    started = time.monotonic()
    cluster.node, cluster.env = host, env
    munge = root / "munge"
    commands = [
        ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={munge}/socket",
         f"--pid-file={munge}/munged.pid", f"--seed-file={munge}/seed", f"--log-file={root}/log/munged.log"],
        ["slurmctld", "-D", "-i"],
        ["slurmd", "-D", "-N", host],
    ]
    for command in commands:
        log = open(root / "log" / f"{command[0]}.out", "wb")  # noqa: SIM115 (the daemon's, closed with it)
        cluster.processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                  stdin=subprocess.DEVNULL, start_new_session=True))
        log.close()
        if command[0] == "munged":
            _wait(cluster, lambda: (munge / "socket").exists(), "munged's socket")
    _wait(cluster, lambda: cluster.run("sinfo", "-h", "-o", "%T").stdout.strip() == "idle", "the node idle in sinfo")
    _wait(cluster, lambda: cluster.run("srun", "-n", "1", "true", timeout=20).returncode == 0, "srun true")
    cluster.start_seconds = time.monotonic() - started


def _wait(cluster: Cluster, ready, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        for process in cluster.processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args[0]} exited {process.returncode} before {what}")
        if ready():
            return
        time.sleep(0.1)
    raise RuntimeError(f"no {what} within {START_TIMEOUT_S:g} s")


def _stop(cluster: Cluster) -> None:
    """Cancel what a failed test left queued or running, then stop the daemons, newest first."""
    if cluster.env and cluster.processes and cluster.processes[-1].poll() is None:
        if jobs := cluster.run("squeue", "-h", "-o", "%i").stdout.split():
            cluster.run("scancel", *jobs)
            for job in jobs:
                try:
                    cluster.wait_gone(job, 30)
                except AssertionError:
                    break  # the daemons' stop below ends what is left
    for process in reversed(cluster.processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if reason := missing():
        pytest.skip(reason)
    cluster = Cluster(tmp_path_factory.mktemp("slurm"), "", {}, 0.0)
    try:
        _start(cluster)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        _stop(cluster)
        pytest.fail(f"the one-node SLURM cluster did not start: {exc}\n{cluster.logs()}", pytrace=False)
    try:
        yield cluster
    finally:
        _stop(cluster)
