"""The GPUs of every node of a job folder, for a watch from any machine that sees the folder.

Each node's ``monitor run --job-dir`` keeps a sample a second in ``run-X.metrics.jsonl``;
``NodesSampler`` takes this machine's sample (its host panel) and puts in the newest sample of
each node's GPUs, named by their node (``GpuSample.node``: "gpu-07 GPU 3"). A node whose monitor
stopped sampling shows its GPUs as not read, saying since when.
"""

from __future__ import annotations

import glob
import json
import os
import time
from dataclasses import replace

from monitor.logs.nodes import Node, nodes_in
from monitor.metrics.model import GpuSample, Sample
from monitor.units import duration

# How far back from a recording's end its last sample is looked for: a sample is a few KB
# (more with many processes), so the short read nearly always finds it.
TAIL_BYTES = (64 << 10, 1 << 20)
# A node's sample older than this is shown as not read.
STALE_S = 10.0
# How often the folders are looked at again for nodes that joined.
NODES_EVERY_S = 5.0


def last_sample(path: str) -> Sample | None:
    """The newest complete sample of a recording, or None."""
    for tail_bytes in TAIL_BYTES:
        try:
            with open(path, "rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(0, size - tail_bytes))
                tail = handle.read()
        except OSError:
            return None
        for line in reversed(tail.split(b"\n")[1 if size > tail_bytes else 0:]):
            if line.strip():
                try:
                    return Sample.from_json(json.loads(line))
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut by a crash, or not a sample: the one before it
        if size <= tail_bytes:
            return None
    return None


def node_gpus(node: Node, now: float) -> list[GpuSample]:
    """The GPUs of ``node``'s newest run, named by the node, while it runs."""
    recordings = sorted(glob.glob(os.path.join(glob.escape(node.folder), "run-*.metrics.jsonl")))
    if not recordings or os.path.exists(recordings[-1].removesuffix(".metrics.jsonl") + ".diagnosis.json"):
        return []  # none yet, or the node's run has ended (its monitor wrote the end report)
    sample = last_sample(recordings[-1])
    if sample is None:
        return []
    age = now - sample.time
    gpus = []
    for gpu in sample.gpus:
        gpu = replace(gpu, node=node.name)
        if age > STALE_S:
            gpu = replace(gpu, status="error", message=f"no sample from node {node.name} for {duration(age)}")
        gpus.append(gpu)
    return gpus


class NodesSampler:
    """A Sampler of this machine whose samples carry the GPUs of the nodes under ``folders``
    (none: this machine's own, as before)."""

    def __init__(self, local, folders: list[str], clock=time.monotonic) -> None:
        self.local = local
        self.folders = folders
        self._clock = clock
        self._nodes: list[Node] = []
        self._next = 0.0

    def sample(self) -> Sample:
        sample = self.local.sample()
        if self._clock() >= self._next:
            self._next = self._clock() + NODES_EVERY_S
            self._nodes = [node for folder in self.folders for node in nodes_in(folder)]
        if not self._nodes:
            return sample
        gpus = [gpu for node in self._nodes for gpu in node_gpus(node, sample.time)]
        if not gpus:
            return sample
        return replace(sample, gpus=gpus, gpu_status="ok", events=[], gpu_message="GPUs of the job's nodes, from their recordings")

    def close(self) -> None:
        self.local.close()
