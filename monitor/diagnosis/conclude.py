"""The decide stage's last step, over the whole job: what the findings alone cannot say.

After the root-cause policy has chosen among the findings, two reviewers read the whole log
where the rules were unsure: the learned second opinion (``second_opinion.review``: which known
failure the log resembles) and, given a run that ended well, what is new since it
(``novelty.compare``). Every mode concludes here, in this order: ``diagnose``
(``diagnose_paths``, its ``--against``), a job session's report and its live root cause (the
screen, ``watch --headless``, the Prometheus root-cause series, ``run``'s end report).
"""

from __future__ import annotations

from monitor.diagnosis.novelty import Against, compare
from monitor.diagnosis.second_opinion import review
from monitor.model import Diagnosis


def conclude(diagnosis: Diagnosis, catalogue, against: Against | None = None) -> Diagnosis:
    """``diagnosis`` with the second opinion where the rules were unsure, then compared with
    ``against`` (the last good run) when there is one."""
    diagnosis = review(diagnosis, catalogue)
    return compared(diagnosis, against) if against is not None else diagnosis


def compared(diagnosis: Diagnosis, against: Against) -> Diagnosis:
    """``diagnosis`` with what is new since the good run ``against``."""
    return compare(diagnosis, diagnosis.files, set(against.templates), against.name, list(against.changes))
