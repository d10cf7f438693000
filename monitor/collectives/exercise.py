"""The collective test, run by every rank of the job's own launcher in place of its script
(``monitor run --check-collectives``, ``monitor check-collectives``).

A script run by path under torchrun or srun: it imports the standard library and torch only
(``sys.path[0]`` is this folder, not the monitor's root). Each rank:

1. joins the job's rendezvous with the job's backend (nccl where CUDA is available, else gloo);
2. times ``all_reduce`` and ``all_gather`` at a few sizes (a barrier before each, so each time
   is one collective, waiting included);
3. times ``all_reduce`` within pairs of nodes (every rank of both, in a group of their own) in
   rounds over the nodes (the circle method, ``MAX_NODE_ROUNDS`` partners each at most): a node
   whose NIC or link is slow makes the all_reduce of every pair it is in slow;
4. times send/recv with partners in rounds (the circle method: every pair once when the world
   is small, ``MAX_ROUNDS`` partners each beyond): a small ping-pong (latency: the quickest round
   trip) and a larger message each way (transfer: the median of a few);
5. gathers everything, and the first rank of each node writes it as JSON to ``--out`` (created
   new, owner-only, never through a link; on a shared folder the first node's copy stands).

A failure (a rank that never joins, a collective past ``--timeout``) ends it with torch's own
error in the launcher's output, which the monitor keeps (``run-X.collectives.txt``) and quotes
in one line.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from datetime import timedelta

SIZES = (4 << 10, 256 << 10, 2 << 20)   # bytes per rank of each collective
WARMUP, ITERATIONS = 2, 5
PING_BYTES, PING_ITERATIONS = 4, 8
TRANSFER_BYTES, TRANSFER_ITERATIONS = 1 << 20, 3
MAX_ROUNDS = 15
NODE_BYTES, NODE_ITERATIONS = 1 << 20, 3
# Fewer than MAX_ROUNDS: each pair of nodes is a process group of its own, and NCCL sets up a
# communicator for each on its first collective.
MAX_NODE_ROUNDS = 7
PASSES = 2
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def _identity(env) -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them in ``env``, else as srun does (then
    the rendezvous's address is set in ``env`` too, as torchrun would)."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        env.setdefault("MASTER_ADDR", _first_host(env.get("SLURM_JOB_NODELIST", "127.0.0.1")))
        env.setdefault("MASTER_PORT", str(20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000))
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", "0"))
    return 0, 1, 0


def _first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``gpu-[07-09,12],cpu-1`` -> ``gpu-07``."""
    head = nodelist.split(",")[0]
    if "[" not in head:
        return head
    prefix, _, ranges = head.partition("[")
    return prefix + ranges.split("-")[0].split(",")[0].rstrip("]")


def _circle_rounds(world: int, max_rounds: int = MAX_ROUNDS) -> list[dict[int, int]]:
    """Partners per round (the circle method): each round pairs every member with at most one other."""
    n = world + world % 2  # an odd world gets a resting slot
    slots = list(range(n))
    rounds = []
    for _ in range(min(n - 1, max_rounds)):
        partners = {}
        for i in range(n // 2):
            a, b = slots[i], slots[n - 1 - i]
            if a < world and b < world:
                partners[a], partners[b] = b, a
        rounds.append(partners)
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return rounds


class Exercise:
    def __init__(self, backend: str, rank: int, world: int, local_rank: int) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rank, self.world = rank, world
        self.device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def _timed(self, action) -> float:
        self._sync()
        start = time.perf_counter()
        action()
        self._sync()
        return time.perf_counter() - start

    def collectives(self) -> list[dict]:
        dist, torch = self.dist, self.torch
        results = []
        for nbytes in SIZES:
            tensor = torch.ones(nbytes // 4, dtype=torch.float32, device=self.device)
            gathered = [torch.empty_like(tensor) for _ in range(self.world)]
            for op, call in (("all_reduce", lambda: dist.all_reduce(tensor)),
                             ("all_gather", lambda: dist.all_gather(gathered, tensor))):
                times = []
                for i in range(WARMUP + ITERATIONS):
                    dist.barrier()
                    seconds = self._timed(call)
                    if i >= WARMUP:
                        times.append(seconds)
                results.append({"op": op, "bytes": nbytes, "seconds": times})
        return results

    def node_all_reduce(self, hosts: list[str]) -> list[dict]:
        """This rank's all_reduce times with each node its node is paired with: every rank of the
        two nodes in a group of their own, the pairs of a round at once (they share no node)."""
        nodes = list(dict.fromkeys(hosts))
        if len(nodes) < 2:
            return []
        mine = nodes.index(hosts[self.rank])
        groups = []
        for partners in _circle_rounds(len(nodes), MAX_NODE_ROUNDS):
            own = None
            for a, b in sorted(partners.items()):  # every rank makes every group, in one order (new_group's rule)
                if a < b:
                    group = self.dist.new_group([r for r, host in enumerate(hosts) if host in (nodes[a], nodes[b])])
                    if mine in (a, b):
                        own = (nodes[b if mine == a else a], group)
            groups.append(own)
        tensor = self.torch.zeros(NODE_BYTES // 4, dtype=self.torch.float32, device=self.device)
        times: dict[str, list[float]] = {}
        # In ``PASSES`` passes, as the send/recv pairs: the reader keeps each rank's best, and a
        # rank descheduled for a while (a busy machine) is not so in both.
        for n in range(PASSES):
            warmup = 1 if n == 0 else 0  # the group's first all_reduce sets it up
            for own in groups:
                self.dist.barrier()
                if own is None:
                    continue
                peer, group = own
                timed = [self._timed(lambda: self.dist.all_reduce(tensor, group=group))
                         for _ in range(warmup + NODE_ITERATIONS)]
                times.setdefault(peer, []).extend(timed[warmup:])
        self.dist.barrier()
        return [{"peer": peer, "bytes": NODE_BYTES, "seconds": seconds} for peer, seconds in times.items()]

    def pairs(self) -> list[dict]:
        """This rank's send/recv with each partner; only the lower rank of a pair reports it. Each
        pair is timed in ``PASSES`` passes and keeps its best latency and its best transfer (each
        from whichever pass had it): a link that is slow is slow every time, while a rank
        descheduled once (a busy machine) is not a slow link."""
        best: dict[int, dict] = {}
        for _ in range(PASSES):
            for peer, figures in self._pass():
                if peer not in best:
                    best[peer] = figures
                else:
                    for key in ("latency_s", "transfer_s"):
                        best[peer][key] = min(best[peer][key], figures[key])
        return [best[peer] for peer in sorted(best)]

    def _pass(self) -> list[tuple[int, dict]]:
        results = []
        small = self.torch.zeros(PING_BYTES // 4, dtype=self.torch.float32, device=self.device)
        large = self.torch.zeros(TRANSFER_BYTES // 4, dtype=self.torch.float32, device=self.device)
        for partners in _circle_rounds(self.world):
            self.dist.barrier()
            peer = partners.get(self.rank)
            if peer is None:
                continue
            first = self.rank < peer
            latency = [self._timed(lambda: self._exchange(small, peer, first)) / 2
                       for _ in range(1 + PING_ITERATIONS)][1:]
            transfer = [self._timed(lambda: self._exchange(large, peer, first)) / 2
                        for _ in range(1 + TRANSFER_ITERATIONS)][1:]
            if first:
                # A link's latency is its quickest round trip: scheduling on a busy machine only
                # adds to some (a median of them named a rank whose pairs were merely descheduled).
                results.append((peer, {"a": self.rank, "b": peer, "latency_s": min(latency),
                                       "transfer_s": statistics.median(transfer), "bytes": TRANSFER_BYTES}))
        self.dist.barrier()
        return results

    def _exchange(self, tensor, peer: int, first: bool) -> None:
        """One message there and one back (the lower rank speaks first)."""
        if first:
            self.dist.send(tensor, peer)
            self.dist.recv(tensor, peer)
        else:
            self.dist.recv(tensor, peer)
            self.dist.send(tensor, peer)


def _write_new(path: str, data: bytes) -> bool:
    try:
        fd = os.open(path, NEW_FILE, 0o600)
    except FileExistsError:
        return False  # another node's first rank wrote it (a shared folder)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="where the first rank of each node writes the measurement")
    parser.add_argument("--backend", choices=("nccl", "gloo"), help="default: nccl where CUDA is available, else gloo")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a collective may wait")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    import torch
    import torch.distributed as dist

    rank, world, local_rank = _identity(os.environ)
    backend = args.backend or ("nccl" if torch.cuda.is_available() else "gloo")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if backend == "nccl":  # before the group: NCCL binds each rank's communicator to its device
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout))
    joined = time.perf_counter()
    exercise = Exercise(backend, rank, world, local_rank)
    device = torch.cuda.get_device_name(exercise.device) if exercise.device.type == "cuda" else "cpu"
    hosts: list = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    mine = {"rank": rank, "local_rank": local_rank, "host": hosts[rank], "device": device,
            "collectives": exercise.collectives()}
    collectives_done = time.perf_counter()
    mine["node_all_reduce"] = exercise.node_all_reduce(hosts)
    nodes_done = time.perf_counter()
    mine["pairs"] = exercise.pairs()
    everyone: list = [None] * world
    dist.all_gather_object(everyone, mine)
    finished = time.perf_counter()
    dist.destroy_process_group()
    if local_rank == 0 and os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        measurement = {"version": 1, "backend": backend, "world_size": world, "torch": torch.__version__,
                       "seconds": {"join": joined - started, "collectives": collectives_done - joined,
                                   "nodes": nodes_done - collectives_done, "pairs": finished - nodes_done},
                       "ranks": everyone}
        _write_new(args.out, json.dumps(measurement).encode())
    # Nothing is left to do, while the launcher (and the job after it) waits for each rank's
    # exit: torch's interpreter teardown costs a second or so.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
