"""What a launch command asks for: which launcher, how many processes, which port, which log dir.

Only the launcher's own options are read (up to the training script); the script's arguments
are never mistaken for the launcher's. Knows torchrun (and ``python -m torch.distributed.run``
/ ``.launch``), ``accelerate launch``, ``deepspeed``, ``srun`` and ``mpirun``/``mpiexec``
(possibly wrapping one of the others), a shell's ``-c`` command line running one of them, and plain
``python``.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

TORCH_MODULES = {"torch.distributed.run", "torch.distributed.launch"}
# A shell running a command line (``bash -c "..."``): its commands, what may come before a command's
# name (``exec``, ``nohup``; a variable set for it: ``NAME=value``), and what separates commands.
SHELLS = {"bash", "sh", "dash", "zsh"}
_SHELL_PREFIXES = {"exec", "nohup", "time", "command"}  # env: read by ``parse`` itself
_SHELL_SEPARATORS = {"&&", "||", ";", "|", "&"}
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
# Options of each launcher that take no value (everything else starting with - takes one).
_FLAGS = {
    "torchrun": {"--standalone", "--no-python", "--no_python", "-m", "--module", "--run-path",
                 "--run_path", "--virtual-local-rank", "--virtual_local_rank", "--use-env",
                 "--use_env"},
    "accelerate": {"--multi_gpu", "--cpu", "--use_deepspeed", "--use_fsdp", "--use_megatron_lm",
                   "--use_xpu", "--debug", "-q", "--quiet", "-m", "--module", "--no_python",
                   "--same_network", "--tpu", "--tpu_use_cluster", "--downcast_bf16",
                   "--enable_cpu_affinity", "--dynamo_use_fullgraph", "--dynamo_use_dynamic"},
    "deepspeed": {"--no_python", "--no_local_rank", "--module", "--force_multi",
                  "--elastic_training", "--bind_cores_to_rank", "--no_ssh", "--no_ssh_check",
                  "--enable_each_rank_log"},
    "srun": {"-v", "--verbose", "-Q", "--quiet", "-l", "--label", "-u", "--unbuffered",
             "--exclusive", "--overlap", "-O", "--overcommit", "--mpi=pmix", "--pty", "-K",
             "--kill-on-bad-exit", "-X", "--disable-status"},
    "python": {"-u", "-O", "-OO", "-B", "-E", "-I", "-P", "-s", "-S", "-q", "-b", "-bb", "-d",
               "-v"},
}
SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_STEP_ID", "SLURMD_NODENAME",
              "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_PROCID", "SLURM_ARRAY_JOB_ID",
              "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT")


@dataclass
class LaunchPlan:
    """What the command asks of the machine. ``None`` means "not said" (or "the default")."""

    launcher: str                      # torchrun | accelerate | deepspeed | mpirun | python | other
    under_srun: bool = False
    under_mpirun: bool = False         # one launcher per process mpirun started (not per rank)
    total: int | None = None           # every process of the job, where the launcher counts them (mpirun -np)
    nproc_per_node: str | None = None  # as written: "4", "gpu", "auto"...
    master_addr: str | None = None
    master_port: int | None = None
    port_source: str | None = None     # where the port came from, e.g. "--master-port"
    standalone: bool = False
    nnodes: str | None = None          # torchrun's --nnodes as written ("2", "1:4")
    log_dir: Path | None = None
    options: dict[str, str] = field(default_factory=dict)

    @property
    def processes(self) -> int | None:
        """The number of processes per node, when the command gives a number."""
        try:
            return int(self.nproc_per_node) if self.nproc_per_node else None
        except ValueError:
            return None

    @property
    def world_size(self) -> int | None:
        """The job's number of ranks where the command alone fixes it: torchrun on one machine
        (no --nnodes, or 1, or 1:1; not one torchrun per node under srun), or accelerate launch on
        one (no --num_machines, or 1), with a number of processes per node; mpirun's count of
        every process (-np), where it starts the program itself."""
        if self.under_srun or self.under_mpirun:
            return None
        if self.launcher == "mpirun":
            return self.total
        if self.launcher == "torchrun" and self.nnodes in (None, "1", "1:1"):
            return self.processes
        if self.launcher == "accelerate" and self.options.get("num_machines") in (None, "1"):
            return self.processes
        return None


def option_groups(args: list[str], flags: set[str]) -> tuple[list[list[str]], list[str]]:
    """A launcher's options as written, one list of tokens per option (``["--nnodes", "2"]``,
    ``["--standalone"]``), and the rest: the script and its arguments."""
    groups: list[list[str]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return groups, args[i + 1:]
        if not arg.startswith("-") or arg == "-":
            break
        # ``-N2``: a short option with its value attached.
        attached = "=" in arg or (not arg.startswith("--") and len(arg) > 2)
        takes_value = not attached and arg not in flags and i + 1 < len(args)
        groups.append(args[i:i + 1 + takes_value])
        i += 1 + takes_value
    return groups, args[i:]


def option_key(group: list[str]) -> str:
    """``--nproc-per-node=4`` and ``--nproc_per_node 4`` are both ``nproc_per_node``."""
    return group[0].partition("=")[0].lstrip("-").replace("-", "_")


def _split_options(args: list[str], flags: set[str]) -> tuple[dict[str, str], list[str]]:
    """Launcher options (``--a-b`` and ``--a_b`` both as ``a_b``) and the rest (script + args)."""
    groups, rest = option_groups(args, flags)
    options = {}
    for group in groups:
        _, eq, value = group[0].partition("=")
        options[option_key(group)] = value if eq else (group[1] if len(group) > 1 else "")
    return options, rest


def _port(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def parse(command: list[str], env: dict[str, str] | None = None) -> LaunchPlan:
    env = dict(os.environ if env is None else env)
    if not command:
        return LaunchPlan("other")
    prog = os.path.basename(command[0])
    rest = command[1:]
    if prog == "srun":
        _, inner = _split_options(rest, _FLAGS["srun"])
        plan = parse(inner, env) if inner else LaunchPlan("other")
        plan.under_srun = True
        return plan
    if prog.partition(".")[0] in ("mpirun", "mpiexec", "orterun", "prterun"):  # mpirun.openmpi, mpiexec.hydra
        return _mpirun(rest, env)
    if prog in SHELLS and rest[:1] == ["-c"] and len(rest) > 1:
        return _shell(rest[1], env)
    if prog == "env":
        return _env_command(rest, env)
    if prog.startswith("python"):
        module, tail = _python_module(rest)
        if module in TORCH_MODULES:
            return _torchrun(tail, env)
        if module == "accelerate.commands.launch":
            return _accelerate(tail, env)
        if module == "deepspeed.launcher.runner":
            return _deepspeed(tail, env)
        return _env_plan("python", env)
    if prog == "torchrun":
        return _torchrun(rest, env)
    if prog == "accelerate" and rest[:1] == ["launch"]:
        return _accelerate(rest[1:], env)
    if prog == "deepspeed":
        return _deepspeed(rest, env)
    return _env_plan("other", env)


# env(1)'s options that take a value as the next word (coreutils: -u NAME, -C DIR, -S STRING).
_ENV_VALUED = frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"})


def _env_command(words: list[str], env: dict[str, str]) -> LaunchPlan:
    """``env -u PYTHONPATH HF_HUB_OFFLINE=1 accelerate launch ...``: the plan of the command env
    runs, with the variables it sets and unsets."""
    env = dict(env)
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("-i", "--ignore-environment", "-"):
            env = {}
        elif word in _ENV_VALUED and index + 1 < len(words):
            if word in ("-u", "--unset"):
                env.pop(words[index + 1], None)
            index += 1
        elif word.startswith("--unset="):
            env.pop(word.split("=", 1)[1], None)
        elif word.startswith("-"):
            pass  # -0, -v, --debug: nothing of the command's
        elif (assignment := _ASSIGNMENT.match(word)) is not None:
            env[assignment[1]] = assignment[2]
        else:
            return parse(words[index:], env)
        index += 1
    return _env_plan("other", env)


def _shell(script: str, env: dict[str, str]) -> LaunchPlan:
    """``bash -c "ulimit -v N && exec torchrun ..."``: the plan of the launcher the script runs
    (the last of its commands that is one, else its last command), with the variables the
    command line sets before it (``WORLD_SIZE=2 torchrun ...``)."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)  # "a;b", "a&&b": three words
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: the shell would refuse it too
        return _env_plan("other", env)
    commands: list[list[str]] = [[]]
    for word in words:
        if word in _SHELL_SEPARATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    plans = []
    for command in filter(None, commands):
        local = dict(env)
        while command and (command[0] in _SHELL_PREFIXES or _ASSIGNMENT.match(command[0])):
            if (assignment := _ASSIGNMENT.match(command.pop(0))) is not None:
                local[assignment[1]] = assignment[2]
        if command:
            plans.append(parse(command, local))
    return next((plan for plan in reversed(plans) if plan.launcher not in ("other", "python")),
                plans[-1] if plans else _env_plan("other", env))


def _python_module(args: list[str]) -> tuple[str | None, list[str]]:
    """``python [opts] -m MODULE ARGS`` -> (MODULE, ARGS); (None, []) for a script or -c."""
    at = _python_options_end(args)
    if args[at:at + 1] == ["-m"] and at + 1 < len(args):
        return args[at + 1], args[at + 2:]
    return None, []


def _python_options_end(args: list[str]) -> int:
    """Where python's own options end (at ``-m``, a script or ``-c``)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            return i
        if arg in ("-W", "-X"):
            i += 2
        elif arg in _FLAGS["python"] or arg.startswith(("-W", "-X")):
            i += 1
        else:
            break
    return i


@dataclass(frozen=True)
class ScriptSlot:
    """A launch command cut where each rank's program starts: ``head`` starts the ranks (``srun
    -N2 torchrun``, ``python -m torch.distributed.run``) with ``options`` (torchrun's, one list
    of tokens each), ``python`` runs each rank's script itself, with its options (``srun python
    -u train.py``: one task, one rank; empty under torchrun, which starts its own Python), and
    ``script`` is the program with its arguments."""

    head: tuple[str, ...]
    options: tuple[tuple[str, ...], ...]
    python: tuple[str, ...]
    script: tuple[str, ...]


def script_slot(command: list[str]) -> ScriptSlot | None:
    """Where the ranks' program starts in ``command``: torchrun (or ``python -m
    torch.distributed.run``), under srun or not, or ``srun python ...``; None for a launch whose
    ranks are not started that way (accelerate, deepspeed, a plain process)."""
    if not command:
        return None
    prog = os.path.basename(command[0])
    if prog == "srun":
        groups, inner = option_groups(command[1:], _FLAGS["srun"])
        srun = (command[0], *(token for group in groups for token in group))
        if inner and os.path.basename(inner[0]).startswith("python") and _python_module(inner[1:])[0] is None:
            at = _python_options_end(inner[1:]) + 1
            return ScriptSlot(srun, (), tuple(inner[:at]), tuple(inner[at:]))
        slot = script_slot(inner)
        return None if slot is None or slot.python else ScriptSlot(srun + slot.head, slot.options, (), slot.script)
    if prog == "torchrun":
        head: tuple[str, ...] = (command[0],)
        rest = command[1:]
    elif prog.startswith("python") and _python_module(command[1:])[0] in TORCH_MODULES:
        _, rest = _python_module(command[1:])
        head = tuple(command[:len(command) - len(rest)])
    else:
        return None
    groups, script = option_groups(rest, _FLAGS["torchrun"])
    return ScriptSlot(head, tuple(tuple(group) for group in groups), (), tuple(script))


# mpirun's (Open MPI's, MPICH's Hydra mpiexec's) options that count the job's processes, those that
# take one word after them or two (--mca KEY VALUE, -genv NAME VALUE), and those that take none. An
# option not among them may take a word that would be read as the program: no world size is claimed.
_MPI_COUNT = frozenset({"-np", "--np", "-n", "--n", "-c"})
_MPI_VALUED = frozenset({
    "-H", "--host", "-host", "-hosts", "--hostfile", "-hostfile", "--machinefile", "-machinefile", "-f",
    "-x", "--bind-to", "-bind-to", "--map-by", "-map-by", "--rank-by", "-rank-by", "-wdir", "--wdir",
    "-wd", "--prefix", "-iface", "-N", "-npernode", "--npernode", "-ppn", "--ppn",
})
_MPI_TWO_VALUED = frozenset({"--mca", "-mca", "--gmca", "-gmca", "-genv", "-env", "--env"})
_MPI_FLAGS = frozenset({
    "--allow-run-as-root", "--oversubscribe", "-oversubscribe", "--report-bindings", "-report-bindings",
    "--tag-output", "-tag-output", "--timestamp-output", "--display-map", "--display-allocation",
    "-q", "--quiet", "-v", "--verbose", "-l", "-prepend-rank", "--merge-stderr-to-stdout",
    "-genvall", "-genvnone",
})
_MPI_KNOWN = _MPI_COUNT | _MPI_VALUED | _MPI_TWO_VALUED | _MPI_FLAGS
_MPI_ONE_VALUE = _MPI_COUNT | _MPI_VALUED
# A program mpirun starts that is a rank itself: Python running a script (not a module, which may be
# a launcher parse knows or not), where the count of its processes is the job's ranks.
_PYTHON = re.compile(r"^python(?:\d+(?:\.\d+)?)?$")


def _mpirun(args: list[str], env: dict[str, str]) -> LaunchPlan:
    """``mpirun -np 8 python train.py``: its -np (-n, -c) counts every process of the job, each a
    rank. Only where every option before the program is known, the program is Python running a
    script and one program is started (no MPMD ``:``): a per-node launcher behind a wrapper
    (a container's exec, a shell script) would make the count a count of nodes. Where the program is
    a launcher parse knows (one torchrun per node), that launcher's plan, with no world size."""
    total: int | None = None
    known = True
    index = 0
    while index < len(args) and args[index].startswith("-") and args[index] != "--":
        name, eq, value = args[index].partition("=")
        if name in _MPI_COUNT:
            count = value if eq else (args[index + 1] if index + 1 < len(args) else "")
            total = int(count) if count.isdigit() and int(count) > 0 else None
        elif name not in _MPI_KNOWN:
            known = False
            break
        index += 1 if eq else 1 + (2 if name in _MPI_TWO_VALUED else 1 if name in _MPI_ONE_VALUE else 0)
    program = args[index + 1:] if args[index:index + 1] == ["--"] else args[index:]
    inner = parse(program, env) if program and known else _env_plan("other", env)
    if inner.launcher not in ("python", "other"):
        inner.under_mpirun = True
        return inner
    plan = _env_plan("mpirun", env)
    if known and program and _PYTHON.match(os.path.basename(program[0])) and ":" not in program \
            and inner.launcher == "python" and _python_module(program[1:])[0] is None:
        plan.total = total
    return plan


def _env_plan(launcher: str, env: dict[str, str]) -> LaunchPlan:
    """A job that sets up torch.distributed itself reads MASTER_ADDR/MASTER_PORT (env://)."""
    port = _port(env.get("MASTER_PORT"))
    return LaunchPlan(launcher, master_addr=env.get("MASTER_ADDR"), master_port=port,
                      port_source="MASTER_PORT" if port else None)


def _torchrun(args: list[str], env: dict[str, str]) -> LaunchPlan:
    options, _ = _split_options(args, _FLAGS["torchrun"])
    plan = LaunchPlan("torchrun", options=options, standalone="standalone" in options)
    plan.nproc_per_node = options.get("nproc_per_node") or env.get("PET_NPROC_PER_NODE")
    plan.nnodes = options.get("nnodes") or env.get("PET_NNODES")
    log_dir = options.get("log_dir") or env.get("PET_LOG_DIR")
    plan.log_dir = Path(log_dir) if log_dir else None
    endpoint = options.get("rdzv_endpoint") or env.get("PET_RDZV_ENDPOINT")
    if plan.standalone:
        return plan  # torchrun picks a free port itself
    if endpoint:
        host, _, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
        plan.master_addr = host or endpoint
        plan.master_port = _port(port) or 29400
        plan.port_source = "--rdzv-endpoint"
        return plan
    plan.master_addr = options.get("master_addr") or env.get("PET_MASTER_ADDR") or "127.0.0.1"
    if "master_port" in options:
        plan.master_port, plan.port_source = _port(options["master_port"]), "--master-port"
    else:
        plan.master_port, plan.port_source = _port(env.get("PET_MASTER_PORT")) or 29500, "torchrun default"
    return plan


def _accelerate(args: list[str], env: dict[str, str]) -> LaunchPlan:
    options, _ = _split_options(args, _FLAGS["accelerate"])
    # accelerate counts processes over all machines.
    total, machines = options.get("num_processes"), options.get("num_machines") or "1"
    per_node = (str(int(total) // max(int(machines), 1))
                if total and total.isdigit() and machines.isdigit() else total)
    plan = LaunchPlan("accelerate", options=options, nproc_per_node=per_node)
    plan.master_addr = options.get("main_process_ip") or env.get("MASTER_ADDR")
    if "main_process_port" in options:
        plan.master_port, plan.port_source = _port(options["main_process_port"]), "--main_process_port"
    elif _port(env.get("MASTER_PORT")):
        plan.master_port, plan.port_source = _port(env.get("MASTER_PORT")), "MASTER_PORT"
    return plan


def _deepspeed(args: list[str], env: dict[str, str]) -> LaunchPlan:
    options, _ = _split_options(args, _FLAGS["deepspeed"])
    plan = LaunchPlan("deepspeed", options=options, nproc_per_node=options.get("num_gpus"))
    plan.master_addr = options.get("master_addr") or env.get("MASTER_ADDR")
    plan.master_port = _port(options.get("master_port")) or 29500
    plan.port_source = "--master_port" if "master_port" in options else "deepspeed default"
    return plan


def rank_log_files(command: list[str], since: float) -> list[Path]:
    """Files the launcher writes per rank (torchrun ``--log-dir`` with ``--redirects``/``--tee``)
    that belong to this run (written since ``since``), oldest first."""
    log_dir = parse(command).log_dir
    if log_dir is None or not log_dir.is_dir():
        return []
    found = []
    for path in log_dir.rglob("*.log"):
        try:
            mtime = path.stat().st_mtime
        except OSError:
            continue
        if mtime >= since - 1:
            found.append((mtime, path))
    return [path for _, path in sorted(found)]


def slurm_context(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The SLURM job, step and node this runs in (empty outside SLURM)."""
    env = os.environ if env is None else env
    return {key: env[key] for key in SLURM_KEYS if env.get(key)}
