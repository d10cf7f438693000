"""The attribute stage: which ranks exist, and the rank of a match that named only a process
(docs/architecture.md, "Stages").

Ranks exist where the first lines of a file carry them or say ``world_size=N``, and where a
launcher's summary lists them; the summary also pairs each failed rank with its pid, so a
SIGKILL or a kernel OOM kill that names only the pid gets its rank (``Attribution.rank_of``),
and matches taken earlier get it too (the finding book, from ``learn_summary``'s answer).

NCCL's own lines (``host:pid:tid [dev] NCCL ...``: the device in brackets is no rank) say their
process's rank where NCCL_DEBUG=INFO sets up a communicator: "comm 0x.. rank R nranks N ..."
(init.cc), "Channel 00/02 : R[dev] -> P[dev] via ..." (the sender's rank first; "[receive]"
lines put the peer first: transport/net.cc) and "Ring 00 : P -> R -> N" (NCCL 2.4). They are
read among each file's first ``EARLY_LINES`` lines, where the job sets up (read everywhere, a
log of NCCL's noise would cost the fast path twice its time). A process in several communicators
(a tensor-parallel group beside the world) shows other ranks in each: the widest communicator's
rank counts, and a process whose channels disagree gets none. An error NCCL prints in that
process (``NCCL WARN Cuda failure 'out of memory'``) gets that rank, also where the line that
says it comes after the error (NCCL's "comm 0x.. rank R nranks N ... - Abort COMPLETE"): a
process's rank learnt or changed reaches the findings taken before on its lines
(``FindingBook.rank_of_process``), so the fast scan (which reads those first lines in bulk, a block
at a time) and the line-by-line reading say the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import regex

from monitor.diagnosis.classify import Match, is_summary
from monitor.diagnosis.records import ENTRY_RANK, Record
from monitor.logs.ranks import parse_prefix

WORLD_SIZE = regex.compile(r"(?i)\bworld[_ ]?size\s*[=:]\s*(\d+)")
_SUMMARY_HOST = regex.compile(r"^\s*host\s*:\s*(\S+)\s*$")
_SUMMARY_PID = regex.compile(r"^\s*exitcode\s*:\s*-?\d+ \(pid: (\d+)\)")
MAX_WORLD = 1 << 16
_NCCL_COMM = regex.compile(r"\bNCCL INFO comm 0x[0-9a-f]+ rank (\d+) n[Rr]anks (\d+)\b")
_NCCL_CHANNEL = regex.compile(r"\bNCCL INFO Channel \d+(?:/\d+)? : (\d+)\[[0-9a-fx]+\] -> (\d+)\[[0-9a-fx]+\]( \[receive\])?")
_NCCL_RING = regex.compile(r"\bNCCL INFO Ring \d+ : \d+ -> (\d+) -> \d+")


@dataclass(frozen=True, slots=True)
class ProcessClaim:
    """An NCCL line of process ``stream`` (host:pid) says it is ``rank``, in a communicator of
    ``size`` ranks where the line says (a channel or ring line does not)."""
    stream: str
    rank: int
    size: int | None = None


def process_claim(text: str) -> ProcessClaim | None:
    """What an NCCL_DEBUG=INFO setup line says of its process's rank, or None."""
    if " NCCL INFO " not in text:
        return None
    stream = nccl_stream(text)
    if stream is None:
        return None
    if (comm := _NCCL_COMM.search(text)) is not None:
        return ProcessClaim(stream, int(comm[1]), int(comm[2]))
    if (channel := _NCCL_CHANNEL.search(text)) is not None:
        return ProcessClaim(stream, int(channel[2] if channel[3] else channel[1]))
    if (ring := _NCCL_RING.search(text)) is not None:
        return ProcessClaim(stream, int(ring[1]))
    return None


def nccl_stream(text: str) -> str | None:
    """The NCCL process (host:pid) whose line ``text`` is, behind a launcher's label too
    ("[default0]:host:pid:tid [0] NCCL ...", Ray's "(pid=34272) host:pid:tid [0] NCCL ..."): NCCL's
    own host:pid first, so the whole line (the fast scan) and its body (the line-by-line reading)
    name the same process."""
    prefix = parse_prefix(text)
    return parse_prefix(prefix.body).stream or prefix.stream


def process_of(match: Match) -> str | None:
    """The NCCL process (host:pid) whose line ``match`` is (its first matched line), if it is one."""
    return nccl_stream(match.record.lines[match.positions[0]].text)


@dataclass(frozen=True, slots=True)
class ProcessRank:
    """What NCCL's lines of process ``stream`` (host:pid) now say its rank is (None: they disagree)."""
    stream: str
    rank: int | None


@dataclass(frozen=True, slots=True)
class LocalRank:
    """A launcher's summary in ``file`` says its node's local rank ``local`` is global ``rank``; None
    where the file turned out to hold more than one node's summaries (the same local rank is another
    global rank on each node: no telling which node a prefixed line came from)."""
    file: str
    local: int
    rank: int | None


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
        # (file, local rank) -> global rank, from the summaries in that file; the hosts those summaries
        # named, and the files found to hold several nodes' (whose local ranks are not mapped).
        self._local_ranks: dict[tuple[str, int], int] = {}
        self._summary_hosts: dict[str, str] = {}
        self._several_nodes: set[str] = set()
        # Per NCCL stream (host:pid): the widest communicator's (nranks, rank), and the ranks its
        # channel and ring lines gave.
        self._comm_ranks: dict[str, tuple[int, int | None]] = {}
        self._channel_ranks: dict[str, set[int]] = {}

    def learn_early(self, rank: int | None, body: str) -> ProcessRank | None:
        """Ranks that exist, from the start of each file: a line's rank, a ``world_size=N``; and
        the rank an NCCL process set up with: where that changed what its process's rank is, the
        process and its rank now (matches of it taken before are to get it too)."""
        if rank is not None:
            self.known_ranks.add(rank)
        changed = self.learn_process(claim) if (claim := process_claim(body)) is not None else None
        match = WORLD_SIZE.search(body) if "orld" in body or "ORLD" in body else None
        if match:
            self.learn_world_size(int(match.group(1)))
        return changed

    def learn_world_size(self, size: int) -> None:
        """The job has ``size`` ranks (a line's ``world_size=N``): all of them exist."""
        if 0 < size <= MAX_WORLD:
            self.world_size = max(self.world_size or 0, size)
            self.known_ranks.update(range(self.world_size))

    def learn_ranks(self, ranks, world_sizes, claims: list[ProcessClaim]) -> list[ProcessRank]:
        """What a file's first lines say in bulk (``scan.EarlyLines``): ranks, world sizes, the
        ranks NCCL processes set up with; the processes whose rank that changed, as ``learn_early``."""
        changed = {change.stream: change for claim in claims if (change := self.learn_process(claim)) is not None}
        self.known_ranks.update(ranks)
        for size in world_sizes:
            self.learn_world_size(size)
        return list(changed.values())

    def learn_summary(self, record: Record) -> list[PidRank]:
        """torchelastic's summary lists every failed rank (all of them exist) with its pid: the
        pairs not known before."""
        if not is_summary(record):
            return []
        learnt = []
        summary_rank = None
        for body in record.bodies:
            match = ENTRY_RANK.match(body)
            if match:
                summary_rank = int(match.group(1))
                self.known_ranks.add(summary_rank)
            elif summary_rank is not None and (match := _SUMMARY_PID.match(body)):
                pid = match.group(1)
                if pid not in self._pid_ranks:
                    self._pid_ranks[pid] = summary_rank
                    learnt.append(PidRank(pid, summary_rank))
        return learnt

    def learn_locals(self, record: Record) -> list[LocalRank]:
        """torchelastic's summary pairs each failed rank with its local rank on the node whose
        agent printed it ("rank : 9 (local_rank: 1)", also where a cut paste kept only that line):
        the pairs of its file not known before. A file whose summaries name two hosts, or give one
        local rank two global ranks, holds several nodes' output: its pairs are withdrawn (rank None)."""
        if record.kind != "line" and not is_summary(record):
            return []  # the summary's lines, whole or cut into lines of their own; no traceback's
        learnt = []
        for line, body in zip(record.lines, record.bodies):
            file = line.file
            if file in self._several_nodes:
                continue
            if "host" in body and (host := _SUMMARY_HOST.match(body)) is not None:
                if self._summary_hosts.setdefault(file, host.group(1)) != host.group(1):
                    learnt.extend(self._withdraw(file))
            elif "local_rank" in body and (match := ENTRY_RANK.match(body)) is not None and match.group(2):
                key, rank = (file, int(match.group(2))), int(match.group(1))
                if key not in self._local_ranks:
                    self._local_ranks[key] = rank
                    learnt.append(LocalRank(file, key[1], rank))
                elif self._local_ranks[key] != rank:
                    learnt.extend(self._withdraw(file))
        return learnt

    def _withdraw(self, file: str) -> list[LocalRank]:
        """``file`` holds several nodes' summaries: its local ranks map to no global rank after all."""
        self._several_nodes.add(file)
        withdrawn = [key for key in self._local_ranks if key[0] == file]
        for key in withdrawn:
            del self._local_ranks[key]
        return [LocalRank(file, local, None) for _, local in withdrawn]

    def learn_process(self, claim: ProcessClaim) -> ProcessRank | None:
        """What an NCCL setup line says of its process's rank (``process_claim``): the process and
        its rank now where that changed it."""
        before = self.process_rank(claim.stream)
        if claim.size is None:
            self._channel_ranks.setdefault(claim.stream, set()).add(claim.rank)
        else:
            held_size, held_rank = self._comm_ranks.get(claim.stream, (0, None))
            if claim.size > held_size:
                self._comm_ranks[claim.stream] = (claim.size, claim.rank)
            elif claim.size == held_size and claim.rank != held_rank:
                self._comm_ranks[claim.stream] = (claim.size, None)  # two communicators as wide: no telling
        now = self.process_rank(claim.stream)
        return ProcessRank(claim.stream, now) if now != before else None

    def process_rank(self, stream: str) -> int | None:
        """The rank NCCL's lines of process ``stream`` (host:pid) said it has, if they agree."""
        if stream in self._comm_ranks:
            return self._comm_ranks[stream][1]
        ranks = self._channel_ranks.get(stream, set())
        return next(iter(ranks)) if len(ranks) == 1 else None

    def attribute(self, match: Match) -> Match:
        """``match`` with the rank of the pid it names, or of the NCCL process whose line it is,
        where it named no rank; with the global rank of the local one its prefix gave, where its
        file's summary says which."""
        if match.rank is not None:
            if match.rank_source == "local-prefix":
                known = self._local_ranks.get((match.record.lines[0].file, match.rank))
                if known is not None:
                    return replace(match, rank=known, rank_source="summary-local", local_rank=match.rank)
            return match
        if (pid := match.fields.get("pid")) is not None and pid in self._pid_ranks:
            return replace(match, rank=self._pid_ranks[pid], rank_source="launcher")
        if self._comm_ranks or self._channel_ranks:
            stream = process_of(match)
            if stream is not None and (rank := self.process_rank(stream)) is not None:
                return replace(match, rank=rank, rank_source="process")
        return match
