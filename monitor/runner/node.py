"""This node's part of a multi-node job: ``monitor run --job-dir DIR`` on every node.

The node's files go under ``DIR/<node>/``; ``node.json`` there says who the node is and how its
local ranks map to the job's global ranks (``logs/nodes.py`` reads it). The map is first what the
command says (``--node-rank`` times ``--nproc-per-node``), then what the ranks' own environment
says once they run (RANK and LOCAL_RANK, read by the metrics sampler).
"""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from pathlib import Path

from monitor.logs import nodes
from monitor.metrics.model import Sample
from monitor.runner.launchers import LaunchPlan


def node_folder(job_dir: Path, node: str) -> Path:
    return job_dir / node


def rank_offset(plan: LaunchPlan) -> int | None:
    """The global rank of this node's local rank 0, from the command (torchrun's ``--node-rank``
    and ``--nproc-per-node``); None when it does not say, or when a dynamic rendezvous (c10d,
    etcd) hands out node ranks itself and ignores ``--node-rank``."""
    node_rank = plan.options.get("node_rank")
    if node_rank is None or plan.processes is None or plan.options.get("rdzv_backend", "static") != "static":
        return None
    try:
        return int(node_rank) * plan.processes
    except ValueError:
        return None


class NodeRecord:
    """``node.json`` of this node, rewritten when the ranks' environment shows a new mapping.
    ``observe`` runs on the metrics thread after each sample; it never raises."""

    def __init__(self, folder: Path, name: str, plan: LaunchPlan, env: dict[str, str], monitor_pid: int) -> None:
        self.folder = folder
        self.node = nodes.Node(name, str(folder), socket.gethostname(), nodes.job_id(env), {},
                               rank_offset(plan))
        self._extra = {"monitor_pid": monitor_pid, "started": time.time(),
                       "nnodes": plan.options.get("nnodes"), "nproc_per_node": plan.nproc_per_node}
        self.error = nodes.write_node(folder, self.node, self._extra)

    def observe(self, sample: Sample) -> None:
        ranks = {p.local_rank: p.rank for p in sample.job.processes
                 if not p.worker and p.rank is not None and p.local_rank is not None} if sample.job else {}
        if not ranks or all(self.node.ranks.get(local) == rank for local, rank in ranks.items()):
            return
        self.node = replace(self.node, ranks={**self.node.ranks, **ranks})
        self.error = nodes.write_node(self.folder, self.node, self._extra)
        nodes.forget()  # files opened from now on read the new map
