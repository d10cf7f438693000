"""The decide stage's last step, over the whole job: what the findings alone cannot say.

After the root-cause policy has chosen among the findings, two reviewers read the whole log
where the rules were unsure: the learned second opinion (``second_opinion.review``: which known
failure the log resembles) and, given a run that ended well, what is new since it
(``novelty.compare``). Every mode concludes here, in this order: ``diagnose``
(``diagnose_paths``, its ``--against``), a job session's report and its live root cause (the
screen, ``watch --headless``, the Prometheus root-cause series, ``run``'s end report).
"""

from __future__ import annotations

from dataclasses import replace

from monitor.diagnosis.novelty import Against, compare
from monitor.diagnosis.second_opinion import review
from monitor.diagnosis.secrets import mask
from monitor.logs.decode import LineAssembler
from monitor.logs.ranks import FileRanks
from monitor.logs.reader import make_line
from monitor.model import Diagnosis

# What is read for the last line of the rank that hung: each file's end, and at most this much in
# all (a folder of a thousand nodes' files costs what a few do); the rank's own file first.
TAIL_BYTES = 256 * 1024
MAX_READ_BYTES = 8 << 20


def conclude(diagnosis: Diagnosis, catalogue, against: Against | None = None) -> Diagnosis:
    """``diagnosis`` with the second opinion where the rules were unsure, then compared with
    ``against`` (the last good run) when there is one; a rank named as the one that hung gets
    its last line quoted."""
    diagnosis = review(diagnosis, catalogue)
    diagnosis = compared(diagnosis, against) if against is not None else diagnosis
    return with_last_line(diagnosis)


def with_last_line(diagnosis: Diagnosis) -> Diagnosis:
    """Where the root cause is the rank the others waited for (``rank_source`` "hang"), the last
    line that rank printed: what it was doing when it stopped (a data shard, an evaluation, a
    checkpoint), the first thing to look at."""
    root = diagnosis.root_cause
    if root is None or root.rank_source != "hang" or root.rank is None:
        return diagnosis
    last = _last_line(root.rank, diagnosis.files)
    if last is None:
        return diagnosis
    quoted = f"rank {root.rank}'s last line: {mask(last)}"
    root = replace(root, evidence=[*root.evidence, quoted], fields={**root.fields, "suspect_last_line": mask(last)})
    return replace(diagnosis, root_cause=root)


def _last_line(rank: int, files: list[str]) -> str | None:
    """The last line of ``rank`` in the end of the first of ``files`` (its own file first) that has one."""
    found = None
    budget = MAX_READ_BYTES
    ordered = sorted(files, key=lambda path: FileRanks(path).file_rank != rank)  # its own file first
    for path in ordered:
        if budget <= 0 or found is not None:
            break
        try:
            with open(path, "rb") as stream:
                size = stream.seek(0, 2)
                stream.seek(max(0, size - TAIL_BYTES))
                tail = stream.read(TAIL_BYTES)
        except OSError:
            continue
        budget -= len(tail)
        ranks = FileRanks(path)
        for raw in reversed(tail.split(b"\n")[1 if size > TAIL_BYTES else 0:]):
            if not raw.strip():
                continue
            line = make_line(path, 0, LineAssembler().feed(raw + b"\n")[0], ranks)
            if line.rank == rank:
                found = line.text
                break
    return found


def compared(diagnosis: Diagnosis, against: Against) -> Diagnosis:
    """``diagnosis`` with what is new since the good run ``against``."""
    return compare(diagnosis, diagnosis.files, set(against.templates), against.name, list(against.changes))
