"""The attribute stage: which ranks exist, and the rank of a match that named only a process
(docs/architecture.md, "Stages").

Ranks exist where the first lines of a file carry them or say ``world_size=N``, and where a
launcher's summary lists them; the summary also pairs each failed rank with its pid, so a
SIGKILL or a kernel OOM kill that names only the pid gets its rank (``Attribution.rank_of``),
and matches taken earlier get it too (the finding book, from ``learn_summary``'s answer).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import regex

from monitor.diagnosis.classify import Match, is_summary
from monitor.diagnosis.records import Record

WORLD_SIZE = regex.compile(r"(?i)\bworld[_ ]?size\s*[=:]\s*(\d+)")
_SUMMARY_RANK = regex.compile(r"^\s*rank\s*:\s*(\d+)")
_SUMMARY_PID = regex.compile(r"^\s*exitcode\s*:\s*-?\d+ \(pid: (\d+)\)")
MAX_WORLD = 1 << 16


@dataclass(frozen=True, slots=True)
class PidRank:
    """A launcher's summary says process ``pid`` was rank ``rank``."""
    pid: str
    rank: int


class Attribution:
    def __init__(self) -> None:
        self.known_ranks: set[int] = set()
        self.world_size: int | None = None  # from a world_size=N line, when one was seen
        self._pid_ranks: dict[str, int] = {}

    def learn_early(self, rank: int | None, body: str) -> None:
        """Ranks that exist, from the start of each file: a line's rank, a ``world_size=N``."""
        if rank is not None:
            self.known_ranks.add(rank)
        match = WORLD_SIZE.search(body) if "orld" in body or "ORLD" in body else None
        if match and 0 < int(match.group(1)) <= MAX_WORLD:
            self.world_size = max(self.world_size or 0, int(match.group(1)))
            self.known_ranks.update(range(self.world_size))

    def learn_ranks(self, ranks, world_sizes) -> None:
        """What a file's first lines say in bulk (``scan.EarlyLines``): ranks, world sizes."""
        self.known_ranks.update(ranks)
        for size in world_sizes:
            if 0 < size <= MAX_WORLD:
                self.world_size = max(self.world_size or 0, size)
                self.known_ranks.update(range(self.world_size))

    def learn_summary(self, record: Record) -> list[PidRank]:
        """torchelastic's summary lists every failed rank (all of them exist) with its pid: the
        pairs not known before."""
        if not is_summary(record):
            return []
        learnt = []
        summary_rank = None
        for body in record.bodies:
            match = _SUMMARY_RANK.match(body)
            if match:
                summary_rank = int(match.group(1))
                self.known_ranks.add(summary_rank)
            elif summary_rank is not None and (match := _SUMMARY_PID.match(body)):
                pid = match.group(1)
                if pid not in self._pid_ranks:
                    self._pid_ranks[pid] = summary_rank
                    learnt.append(PidRank(pid, summary_rank))
        return learnt

    def attribute(self, match: Match) -> Match:
        """``match`` with the rank of the pid it names, where it named no rank."""
        if match.rank is None and (pid := match.fields.get("pid")) is not None and pid in self._pid_ranks:
            return replace(match, rank=self._pid_ranks[pid], rank_source="launcher")
        return match
