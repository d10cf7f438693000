"""The nodes of a job bigger than one machine: one folder per node in a shared job folder.

``monitor run --job-dir DIR`` writes each node's log, metrics recording and diagnosis under
``DIR/<node>/`` and a ``node.json`` there (``NODE_FILE``): the node's name, its host, the job's id,
and how the node's local ranks map to the job's global ranks. A folder holding a ``node.json``
is a node; a folder whose sub-folders are nodes is a job folder.

Global ranks: torchrun's ``--tee`` prefix (``[default1]:``) and ``--log-dir`` layout
(``attempt_0/1/stdout.log``) carry the *local* rank; the excepthook's ``[rank3]:`` and NCCL's
``[Rank 3]`` the global one. A node's local rank ``l`` is global rank ``ranks[l]`` as read from
the ranks' own environment (RANK, LOCAL_RANK), else ``rank_offset + l`` (``--node-rank`` times
``--nproc-per-node``), else unknown (the local rank is kept, as on one machine).
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from monitor.files import replace_file

NODE_FILE = "node.json"
# A node name is a folder name: host names are, but SLURMD_NODENAME or --node could hold anything.
_UNSAFE = str.maketrans({c: "_" for c in "/\\\0\n\r\t "})


@dataclass(frozen=True, slots=True)
class Node:
    """One node of a job: its ``name``, ``folder``, and the global rank of each local rank."""

    name: str
    folder: str
    host: str = ""
    job: str = ""
    ranks: dict[int, int] = field(default_factory=dict)
    rank_offset: int | None = None

    def global_rank(self, local_rank: int) -> int:
        if local_rank in self.ranks:
            return self.ranks[local_rank]
        return local_rank if self.rank_offset is None else self.rank_offset + local_rank


def node_name(env: Mapping[str, str] | None = None, given: str | None = None) -> str:
    """This node's name, as the scheduler knows it: ``given`` (``--node``), SLURM's
    ``SLURMD_NODENAME``, else the short host name (Kubernetes pods and plain ssh launches)."""
    env = os.environ if env is None else env
    name = given or env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0] or "node"
    return name.translate(_UNSAFE).lstrip(".") or "node"


def job_id(env: Mapping[str, str] | None = None) -> str:
    """The job's id: SLURM's (an array task as ``<array job>_<task>``), else ""."""
    env = os.environ if env is None else env
    if array := env.get("SLURM_ARRAY_JOB_ID"):
        return f"{array}_{env.get('SLURM_ARRAY_TASK_ID', '')}"
    return env.get("SLURM_JOB_ID", "")


def read_node(folder: str | os.PathLike) -> Node | None:
    """The node whose folder this is, or None (no ``node.json``, or one that cannot be read)."""
    try:
        with open(os.path.join(folder, NODE_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
        ranks = {int(local): int(rank) for local, rank in (data.get("ranks") or {}).items()}
        offset = data.get("rank_offset")
        return Node(str(data["node"]), str(folder), str(data.get("host", "")), str(data.get("job", "")),
                    ranks, int(offset) if offset is not None else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


@lru_cache(maxsize=4096)
def _node_in(folder: str) -> Node | None:
    """The node of ``folder`` or of its nearest ancestor (a node's logs can sit in sub-folders:
    torchrun's --log-dir), looked up once per folder."""
    node = read_node(folder)
    if node is not None:
        return node
    parent = os.path.dirname(folder)
    return None if parent == folder else _node_in(parent)


def node_of(path: str) -> Node | None:
    """The node a log file belongs to (its folder, or an ancestor, holds ``node.json``)."""
    return _node_in(os.path.dirname(os.path.abspath(path)))


def node_name_of(path: str) -> str | None:
    """The name of the node the log file ``path`` belongs to (``node_of``), or None."""
    node = node_of(path)
    return node.name if node is not None else None


# A host name as SLURM's %N puts it in --output (gpu-037, node001, nid004069, c000001): letters,
# then digits; not a rank's or task's file (rank3.log), nor an attempt's or run's.
_HOST_TOKEN = re.compile(r"^(?!(?:rank|task|proc|attempt|run|part|shard|epoch|step)\d)[A-Za-z][A-Za-z0-9-]*?\d+$", re.IGNORECASE)
_NAME_TOKENS = re.compile(r"[._]")


def nodes_from_names(files) -> dict[str, str]:
    """The node of each file written one per node (SLURM's ``--output=%N.out``, ``%j_%N.out``):
    files of one folder whose names differ in one token only, a host name in each (gpu-037.out,
    gpu-038.out). A lone file, or names that differ otherwise (rank0.log), name no node."""
    by_folder: dict[str, list[tuple[str, list[str]]]] = {}
    for file in map(str, files):
        by_folder.setdefault(os.path.dirname(os.path.abspath(file)), []).append(
            (file, _NAME_TOKENS.split(os.path.basename(file))))
    found: dict[str, str] = {}
    for entries in by_folder.values():
        if len(entries) < 2 or len({len(tokens) for _, tokens in entries}) != 1:
            continue
        varying = [i for i in range(len(entries[0][1])) if len({tokens[i] for _, tokens in entries}) > 1]
        if len(varying) != 1 or not all(_HOST_TOKEN.match(tokens[varying[0]]) for _, tokens in entries):
            continue
        found.update((file, tokens[varying[0]]) for file, tokens in entries)
    return found


def forget() -> None:
    """Drop what ``node_of`` learned (a node's rank map is written once its ranks start)."""
    _node_in.cache_clear()


def nodes_in(folder: str | os.PathLike[str]) -> list[Node]:
    """The nodes of a job folder (its sub-folders that are nodes), by name; [] for any other."""
    try:
        entries = sorted(e.path for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))
    except OSError:
        return []
    return [node for node in map(read_node, entries) if node is not None]


def write_node(folder: Path, node: Node, extra: dict | None = None) -> str | None:
    """Write ``folder/node.json`` whole; returns a one-line error, never raises."""
    data = {"node": node.name, "host": node.host, "job": node.job,
            "ranks": {str(k): v for k, v in sorted(node.ranks.items())}, "rank_offset": node.rank_offset,
            **(extra or {})}
    return replace_file(folder / NODE_FILE, (json.dumps(data, indent=2) + "\n").encode())
