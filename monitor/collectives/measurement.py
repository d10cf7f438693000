"""What the collective test measured (``exercise.py`` writes it as JSON), as plain frozen data.

Read back from a file the job's ranks wrote: every field is checked, and a bad file is one line
(``MeasurementError``) naming it, never a traceback.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from monitor.files import read_at_most

# A measurement of 1,000 ranks is well under this; a bigger file is not ours.
MAX_BYTES = 32 << 20
OPS = ("all_reduce", "all_gather")


class MeasurementError(ValueError):
    """The measurement file is missing or not what the exercise writes: one line."""


@dataclass(frozen=True)
class RankSite:
    """Where a rank ran: the host it reported, its place on it, its device."""

    rank: int
    host: str
    local_rank: int
    device: str


@dataclass(frozen=True)
class CollectiveTiming:
    """One rank's median time of one collective at one size (waiting for the others included)."""

    op: str
    nbytes: int      # bytes each rank contributes
    rank: int
    seconds: float


@dataclass(frozen=True)
class NodePairAllReduce:
    """One rank's best time of ``all_reduce`` among every rank of its node and of ``peer``: a slow
    NIC or link is slow every time, a rank descheduled once (a busy machine) is not."""

    rank: int
    node: str       # the rank's own
    peer: str
    nbytes: int
    seconds: float


@dataclass(frozen=True)
class PairTiming:
    """Send/recv between ranks ``a`` < ``b``: half a round trip of a tiny message (latency), and of
    ``nbytes`` (transfer)."""

    a: int
    b: int
    latency_s: float
    transfer_s: float
    nbytes: int


@dataclass(frozen=True)
class Measurement:
    backend: str
    world_size: int
    torch: str
    ranks: tuple[RankSite, ...]
    collectives: tuple[CollectiveTiming, ...]
    pairs: tuple[PairTiming, ...]
    phases: tuple[tuple[str, float], ...]   # ("join", s), ("collectives", s), ("nodes", s), ("pairs", s)
    node_all_reduce: tuple[NodePairAllReduce, ...] = ()   # none from one node, or from a file before them

    def nodes(self) -> tuple[str, ...]:
        """The hosts, in the order of their first rank."""
        return tuple(dict.fromkeys(site.host for site in sorted(self.ranks, key=lambda s: s.rank)))


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise MeasurementError(f"{what} is not a time or count: {value!r:.40}")
    return float(value)


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MeasurementError(f"{what} is not a whole number: {value!r:.40}")
    return value


def _object(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise MeasurementError(f"{what} is not an object")
    return value


def from_json(data) -> Measurement:
    """The measurement in ``data`` (the JSON the exercise wrote, parsed); raises ``MeasurementError``."""
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("ranks"), list):
        raise MeasurementError("not a collective test's measurement (version 1)")
    world = _int(data.get("world_size"), "world_size")
    if len(data["ranks"]) != world:
        raise MeasurementError(f"{len(data['ranks'])} ranks reported, world size {world}")
    sites, collectives, pairs, node_all_reduce = [], [], [], []
    for entry in data["ranks"]:
        rank = _int(_object(entry, "a rank's entry").get("rank"), "rank")
        if rank >= world:
            raise MeasurementError(f"rank {rank} in a world of {world}")
        sites.append(RankSite(rank, str(entry.get("host", "?"))[:200], _int(entry.get("local_rank", 0), "local_rank"),
                              str(entry.get("device", "?"))[:200]))
        for item in entry.get("collectives") or []:
            _object(item, f"rank {rank}'s collective entry")
            times = [_number(t, f"rank {rank}'s {item.get('op')} time") for t in item.get("seconds") or []]
            if item.get("op") not in OPS or not times:
                raise MeasurementError(f"rank {rank}: a collective entry without op or times")
            collectives.append(CollectiveTiming(item["op"], _int(item.get("bytes"), "bytes"), rank,
                                                statistics.median(times)))
        host = sites[-1].host
        for item in entry.get("node_all_reduce") or []:
            _object(item, f"rank {rank}'s node all_reduce entry")
            times = [_number(t, f"rank {rank}'s all_reduce time") for t in item.get("seconds") or []]
            peer = item.get("peer")
            if not isinstance(peer, str) or peer[:200] == host or not times:
                raise MeasurementError(f"rank {rank}: a node all_reduce entry without another node or times")
            node_all_reduce.append(NodePairAllReduce(rank, host, peer[:200], _int(item.get("bytes"), "bytes"),
                                                     min(times)))
        for item in entry.get("pairs") or []:
            _object(item, f"rank {rank}'s pair entry")
            a, b = _int(item.get("a"), "pair rank"), _int(item.get("b"), "pair rank")
            if not a < b < world:
                raise MeasurementError(f"rank {rank}: pair {a}-{b} outside the world of {world}")
            pairs.append(PairTiming(a, b, _number(item.get("latency_s"), "latency_s"),
                                    _number(item.get("transfer_s"), "transfer_s"), _int(item.get("bytes"), "bytes")))
    if sorted(site.rank for site in sites) != list(range(world)):
        raise MeasurementError("the ranks reported are not 0 to world_size - 1, each once")
    hosts = {site.host for site in sites}
    if stranger := next((t for t in node_all_reduce if t.peer not in hosts), None):
        raise MeasurementError(f"rank {stranger.rank}: an all_reduce with a node no rank is on")
    phases = tuple((str(name), _number(value, name)) for name, value in (data.get("seconds") or {}).items())
    return Measurement(str(data.get("backend", "?"))[:20], world, str(data.get("torch", "?"))[:40],
                       tuple(sorted(sites, key=lambda s: s.rank)), tuple(collectives), tuple(pairs), phases,
                       tuple(node_all_reduce))


def read(path: Path) -> Measurement:
    """The measurement in ``path`` (read bounded, never through a link); ``MeasurementError``
    (one line naming the file) when it is missing or bad."""
    try:
        raw = read_at_most(path, MAX_BYTES, follow=False)
    except OSError as exc:
        raise MeasurementError(f"{path}: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise MeasurementError(f"{path}: larger than {MAX_BYTES >> 20} MiB")
    try:
        return from_json(json.loads(raw))
    except (ValueError, UnicodeDecodeError) as exc:
        message = str(exc) if isinstance(exc, MeasurementError) else f"not JSON ({exc})"
        raise MeasurementError(f"{path}: {message}") from None

