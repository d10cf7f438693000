"""From a measurement to a verdict: the slow node, the slow rank, or nobody.

A node first by its all_reduce: the all_reduce of each pair of nodes (every rank of both) is as
slow as the slower node's NIC or link, so a node is named when the all_reduce of the pairs of
nodes it is in is ``FACTOR`` times that of the pairs it is not in ("node gpu-07 is 6x slower on
all_reduce than the others"), by the same rule as the send/recv pairs below.

The send/recv pairs tell where slowness lives: a node whose NIC or link is bad makes every pair
it is in slow, and only those. So a member (a node, or a rank) is named when the lower median of
its pairs is ``FACTOR`` times the median of the pairs it is not in, and slower by more than the
backend's noise floor. Medians both sides: one unlucky pair (a rank descheduled on a busy
machine) moves neither, and a balanced set, where every member's pairs look like everyone
else's, names nobody. A minority can be named; when most pairs are slow there is no "usual" to
compare with, and the figures are shown without a name.

Nodes first (pairs between nodes, one value per node pair: the lower median of its rank pairs), then
ranks: among the ranks of one node (pairs inside it: a GPU's link, a starved CPU), and across
nodes for the ranks of nodes not named (a rank's own NIC, a rail).
"""

from __future__ import annotations

import statistics
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from monitor.collectives.measurement import OPS, Measurement, PairTiming
from monitor.units import binary_size

FACTOR = 3.0
# How much slower than usual a pair must be, besides FACTOR times, to mean something: on CPUs
# (gloo) the OS scheduler alone moves a round trip by a millisecond on a busy machine; NCCL's
# times are taken with the GPU synchronised, microseconds apart.
NOISE_FLOOR_S = {"gloo": {"latency": 1e-3, "transfer": 4e-3, "all_reduce": 4e-3},
                 "nccl": {"latency": 30e-6, "transfer": 200e-6, "all_reduce": 200e-6}}
Metric = Literal["latency", "transfer", "all_reduce"]


@dataclass(frozen=True)
class Slow:
    """A member the rule named: the lower median of its pairs against the median of the others'."""

    member: Hashable
    own_s: float
    usual_s: float

    @property
    def factor(self) -> float:
        return self.own_s / self.usual_s if self.usual_s > 0 else float("inf")


def slow_members(pairs: Sequence[tuple[Hashable, Hashable, float]], floor_s: float,
                 factor: float = FACTOR) -> list[Slow]:
    """The members whose pairs are slow: the lower median of the values of the pairs a member is
    in at least ``factor`` times, and ``floor_s`` more than, the median of the pairs it is not in.
    Needs three members at least (with two, a slow pair belongs to either), and names fewer
    than half of them."""
    members = sorted({m for a, b, _ in pairs for m in (a, b)}, key=str)
    if len(members) < 3:
        return []
    named = []
    for member in members:
        own = [value for a, b, value in pairs if member in (a, b)]
        rest = [value for a, b, value in pairs if member not in (a, b)]
        if not own or not rest:
            continue
        # The lower median: a slow member makes most of its pairs slow, so one unlucky pair (with
        # three members, half of a member's two) never names it.
        mine, usual = statistics.median_low(own), statistics.median(rest)
        if mine >= factor * usual and mine - usual >= floor_s:
            named.append(Slow(member, mine, usual))
    # Slowness is pinned on a minority only: when half the members look slow, the "usual" they
    # are compared with is no usual (with three ranks, one slow pair makes two of them look slow).
    return named if 2 * len(named) < len(members) else []


@dataclass(frozen=True)
class Outlier:
    """A node or a rank the check names, with the figure that names it."""

    kind: Literal["node", "rank", "rank-across-nodes"]
    node: str
    ranks: tuple[int, ...]
    metric: Metric
    own_s: float
    usual_s: float
    nbytes: int          # of the transfer, or of the all_reduce

    @property
    def factor(self) -> float:
        return self.own_s / self.usual_s if self.usual_s > 0 else float("inf")

    def figures(self) -> str:
        if self.metric == "all_reduce":
            return (f"{binary_size(self.nbytes)} in {_ms(self.own_s)} with it, "
                    f"{_ms(self.usual_s)} between the others")
        if self.metric == "latency":
            return f"latency {_ms(self.own_s)} against {_ms(self.usual_s)}"
        return f"{binary_size(self.nbytes)} in {_ms(self.own_s)} against {_ms(self.usual_s)}"

    def title(self) -> str:
        times = f"{self.factor:.0f}x" if self.factor < 100 else "over 100x"
        if self.kind == "node" and self.metric == "all_reduce":
            return f"node {self.node} is {times} slower on all_reduce than the others ({self.figures()})"
        if self.kind == "node":
            return f"node {self.node} is {times} slower than the others on send/recv ({self.figures()})"
        if self.kind == "rank":
            return (f"rank {self.ranks[0]} on node {self.node} is {times} slower than the other ranks of its "
                    f"node on send/recv ({self.figures()})")
        return (f"rank {self.ranks[0]} (node {self.node}) is {times} slower with other nodes than the other "
                f"ranks ({self.figures()})")

    def remedy(self) -> str:
        if self.kind == "node" and self.metric == "all_reduce":
            return f"all_reduce with {self.node} is slow: check its NIC/IB (ibstat, the link's error counters)"
        if self.kind == "node":
            return f"pairs with {self.node} are slow: check its NIC/IB (ibstat, the link's error counters)"
        if self.kind == "rank":
            return "check its GPU's link (nvidia-smi topo -m) and what else runs on its CPUs"
        return "check the NIC it uses (its rail: NCCL_IB_HCA, ibstat)"

    def line(self) -> str:
        return f"{self.title()}: {self.remedy()}"


@dataclass(frozen=True)
class CollectiveFigure:
    """A collective at one size: the median over ranks of each rank's median time, and the bus
    bandwidth as nccl-tests counts it (what each link carries)."""

    op: str
    nbytes: int
    seconds: float
    bus_gb_s: float


@dataclass(frozen=True)
class Verdict:
    backend: str
    world_size: int
    nodes: tuple[str, ...]
    collectives: tuple[CollectiveFigure, ...]
    latency_s: float | None     # the median pair
    transfer_s: float | None
    transfer_bytes: int
    node_all_reduce_s: float | None   # the median pair of nodes
    node_all_reduce_bytes: int
    outliers: tuple[Outlier, ...]
    notes: tuple[str, ...]
    seconds: float               # the test's own time, rendezvous included

    @property
    def clean(self) -> bool:
        return not self.outliers

    def summary(self) -> str:
        nodes = f"{len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}"
        parts = []
        for op in OPS:
            figures = [f for f in self.collectives if f.op == op]
            if figures:
                sizes = ", ".join(f"{binary_size(f.nbytes)} {_ms(f.seconds)}" for f in figures)
                parts.append(f"{op} {sizes} (bus {figures[-1].bus_gb_s:.2f} GB/s)")
        if self.node_all_reduce_s is not None:
            parts.append(f"all_reduce by pairs of nodes {binary_size(self.node_all_reduce_bytes)} "
                         f"{_ms(self.node_all_reduce_s)} (median pair)")
        if self.latency_s is not None and self.transfer_s is not None:
            parts.append(f"send/recv latency {_ms(self.latency_s)}, {binary_size(self.transfer_bytes)} in "
                         f"{_ms(self.transfer_s)}")
        ranks = f"{self.world_size} rank{'s' if self.world_size != 1 else ''}"
        return f"collectives check ({self.backend}, {ranks} on {nodes}, {self.seconds:.1f} s): " + "; ".join(parts)

    def lines(self) -> list[str]:
        """What the check says: the summary, then each outlier or that nothing stands out."""
        said = [self.summary(), *self.notes]
        return said + ([o.line() for o in self.outliers] or ["no node, rank or link stands out"])

    def to_json(self) -> dict:
        return {**asdict(self), "lines": self.lines()}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.0f} ms"


def _bus_gb_s(op: str, nbytes: int, world: int, seconds: float) -> float:
    if seconds <= 0 or world < 2:
        return 0.0
    if op == "all_reduce":
        return nbytes / seconds * 2 * (world - 1) / world / 1e9
    return nbytes * world / seconds * (world - 1) / world / 1e9


def judge(measurement: Measurement) -> Verdict:
    """The verdict on ``measurement``: figures for the whole set, and the outliers."""
    floors = NOISE_FLOOR_S.get(measurement.backend, NOISE_FLOOR_S["gloo"])
    host = {site.rank: site.host for site in measurement.ranks}
    nodes = measurement.nodes()
    outliers: list[Outlier] = []
    notes: list[str] = []
    between = [p for p in measurement.pairs if host[p.a] != host[p.b]]
    slow_nodes = set()
    if len(nodes) == 2 and between:
        notes.append(f"two nodes: a slow link between {nodes[0]} and {nodes[1]} cannot be pinned on either")
    elif measurement.world_size == 2:
        notes.append("two ranks: a slow link between them cannot be pinned on either")
    node_all_reduce = _node_all_reduce(measurement)
    all_reduce_bytes = max((t.nbytes for t in measurement.node_all_reduce), default=0)
    for slow in slow_members(node_all_reduce, floors["all_reduce"]):
        outliers.append(Outlier("node", str(slow.member), _ranks_on(host, slow.member), "all_reduce",
                                slow.own_s, slow.usual_s, all_reduce_bytes))
    # Beside it, the node the send/recv pairs name (the same, on a slow NIC or link).
    for metric in ("transfer", "latency"):
        for slow in slow_members(_node_pairs(between, host, metric), floors[metric]):
            if slow.member not in slow_nodes:
                slow_nodes.add(slow.member)
                outliers.append(Outlier("node", str(slow.member), _ranks_on(host, slow.member), metric,
                                        slow.own_s, slow.usual_s, _nbytes(between)))
    for node in nodes:
        inside = [p for p in measurement.pairs if host[p.a] == host[p.b] == node]
        outliers += _slow_ranks("rank", inside, host, floors)
    slow_nodes |= {o.node for o in outliers if o.kind == "node"}  # their ranks' pairs are slow through them
    others = [p for p in between if host[p.a] not in slow_nodes and host[p.b] not in slow_nodes]
    outliers += _slow_ranks("rank-across-nodes", others, host, floors)
    return Verdict(
        backend=measurement.backend, world_size=measurement.world_size, nodes=nodes,
        collectives=_collective_figures(measurement),
        latency_s=statistics.median(p.latency_s for p in measurement.pairs) if measurement.pairs else None,
        transfer_s=statistics.median(p.transfer_s for p in measurement.pairs) if measurement.pairs else None,
        transfer_bytes=_nbytes(measurement.pairs),
        node_all_reduce_s=statistics.median(v for _, _, v in node_all_reduce) if node_all_reduce else None,
        node_all_reduce_bytes=all_reduce_bytes, outliers=tuple(outliers), notes=tuple(notes),
        seconds=sum(seconds for _, seconds in measurement.phases))


def _value(pair: PairTiming, metric: Metric) -> float:
    return pair.latency_s if metric == "latency" else pair.transfer_s


def _node_pairs(pairs: Sequence[PairTiming], host: dict[int, str], metric: Metric) -> list[tuple[str, str, float]]:
    by_nodes: dict[tuple[str, str], list[float]] = {}
    for pair in pairs:
        key = tuple(sorted((host[pair.a], host[pair.b])))
        by_nodes.setdefault((key[0], key[1]), []).append(_value(pair, metric))
    # The lower median: a node pair is slow when most of its rank pairs are, not when one rank's are
    # (that is the rank's own NIC, named by the pass over ranks).
    return [(a, b, statistics.median_low(values)) for (a, b), values in by_nodes.items()]


def _node_all_reduce(measurement: Measurement) -> list[tuple[str, str, float]]:
    """Each pair of nodes' all_reduce time: the median of its ranks' own (they wait for each other,
    so all are about the slowest link's)."""
    by_nodes: dict[tuple[str, str], list[float]] = {}
    for timing in measurement.node_all_reduce:
        a, b = sorted((timing.node, timing.peer))
        by_nodes.setdefault((a, b), []).append(timing.seconds)
    return [(a, b, statistics.median(values)) for (a, b), values in by_nodes.items()]


def _slow_ranks(kind, pairs: Sequence[PairTiming], host: dict[int, str], floors: dict[str, float]) -> list[Outlier]:
    found: dict[int, Outlier] = {}
    for metric in ("transfer", "latency"):
        for slow in slow_members([(p.a, p.b, _value(p, metric)) for p in pairs], floors[metric]):
            rank = int(slow.member)  # type: ignore[call-overload]
            if rank not in found:
                found[rank] = Outlier(kind, host[rank], (rank,), metric, slow.own_s, slow.usual_s, _nbytes(pairs))
    return [found[rank] for rank in sorted(found)]


def _ranks_on(host: dict[int, str], node: Hashable) -> tuple[int, ...]:
    return tuple(sorted(rank for rank, name in host.items() if name == node))


def _nbytes(pairs: Sequence[PairTiming]) -> int:
    return max((p.nbytes for p in pairs), default=0)


def _collective_figures(measurement: Measurement) -> tuple[CollectiveFigure, ...]:
    figures = []
    keys = sorted({(t.op, t.nbytes) for t in measurement.collectives}, key=lambda k: (OPS.index(k[0]), k[1]))
    for op, nbytes in keys:
        seconds = statistics.median(t.seconds for t in measurement.collectives if (t.op, t.nbytes) == (op, nbytes))
        figures.append(CollectiveFigure(op, nbytes, seconds, _bus_gb_s(op, nbytes, measurement.world_size, seconds)))
    return tuple(figures)
