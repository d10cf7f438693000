"""Stall detection: the job printed nothing for much longer than it usually does.

NCCL's watchdog reports a hung collective only when the process-group timeout runs out (10
minutes by default for NCCL, 30 for gloo). Silence shows it much earlier: when no stream has
printed for ``threshold`` seconds, a ``possible-hang`` warning names the last line of each rank
and the ranks that went silent first. Output resuming, or the job exiting well, clears it.

The threshold is ``stall_after`` if given, else ``max(60 s, 10 x the typical gap)``, where the
typical gap is the median pause between bursts of output (pauses under a second are the lines
of one burst, not pauses).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from monitor.diagnosis.advice import advice
from monitor.diagnosis.novelty import level
from monitor.logs.ranks import parse_prefix
from monitor.model import Category, Finding, LogLine, rank_words

MIN_STALL_S = 60.0
GAP_FACTOR = 10.0
BURST_GAP_S = 1.0
MAX_EVIDENCE_RANKS = 16
# Longest a line that ended a silence is quoted in the note's title (characters).
MAX_QUOTED = 160
RULE = "possible-hang"
RESOLVED_RULE = "possible-hang-passed"


@dataclass(slots=True)
class LastWords:
    """The last line one rank (or, for lines without a rank, one file) printed, and when."""

    at: float
    line: LogLine


class StallDetector:
    def __init__(self, stall_after: float | None = None) -> None:
        self.stall_after = stall_after
        self.last: dict[int | str, LastWords] = {}
        self._last_arrival: float | None = None
        self._gaps: deque[float] = deque(maxlen=64)
        self.active: Finding | None = None

    def threshold(self) -> float:
        if self.stall_after is not None:
            return self.stall_after
        typical = statistics.median(self._gaps) if self._gaps else BURST_GAP_S
        return max(MIN_STALL_S, GAP_FACTOR * typical)

    def observe(self, lines: list[LogLine], now: float) -> Finding | None:
        """Note new output; returns the stall finding it cleared, if one was active."""
        if not lines:
            return None
        if self._last_arrival is not None and now - self._last_arrival >= BURST_GAP_S:
            self._gaps.append(now - self._last_arrival)
        self._last_arrival = now
        for line in lines:
            self.last[line.rank if line.rank is not None else line.file] = LastWords(now, line)
        return self.end()

    def end(self) -> Finding | None:
        """The silence is over (output resumed, or the job exited well): the stall finding it
        cleared, if one was active."""
        cleared, self.active = self.active, None
        return cleared

    def check(self, now: float, wall_now: float) -> Finding | None:
        """A new stall finding when the silence has just passed the threshold, else None. The
        times are the session's clock (``now``: monotonic, as given to ``observe``; ``wall_now``:
        when, by the wall clock, for the finding): nothing here reads a clock."""
        if self.active is not None or self._last_arrival is None:
            return None
        silent = now - self._last_arrival
        threshold = self.threshold()
        if silent < threshold:
            return None
        self.active = self._finding(now, silent, threshold, wall_now)
        return self.active

    def _finding(self, now: float, silent: float, threshold: float, wall_now: float) -> Finding:
        by_age = sorted(self.last.items(), key=lambda item: item[1].at)
        latest = by_age[-1][1].at
        # Went silent first: stopped clearly before the last stream did (a burst apart).
        first = [key for key, words in by_age if latest - words.at >= max(BURST_GAP_S, threshold / 10)]
        first_ranks = [key for key in first if isinstance(key, int)]
        ranks = sorted(key for key in self.last if isinstance(key, int))
        evidence = [
            f"{_who(key)}, silent {now - words.at:.0f} s: {words.line.text}"
            for key, words in by_age[:MAX_EVIDENCE_RANKS]
        ]
        subject = self.last[first[0]] if first else by_age[-1][1]
        if first:
            title = advice("title-stall-first", silent=f"{silent:.0f}", first=_who_list(first))
        else:
            title = advice("title-stall", silent=f"{silent:.0f}")
        fields = {"silent_s": f"{silent:.0f}", "threshold_s": f"{threshold:.0f}"}
        if first:
            fields["first_silent"] = ",".join(str(key) for key in first)
        return Finding(
            rule=RULE, category=Category.HANG, severity="warning", role="root", title=title, origin="stall",
            rank=first_ranks[0] if len(first_ranks) == 1 else None, ranks=ranks,
            file=subject.line.file, line=subject.line.line, count=1, evidence=evidence,
            fields=fields, remedy=_remedy(silent, threshold, first, subject), first_seen=wall_now - silent,
            confidence="likely", confidence_note=advice("confidence-stall"),
        )


def resolved_note(stall: Finding, wall_now: float, exited: bool = False, resumed: Sequence[LogLine] = ()) -> Finding:
    """What stays of a stall once it ended: an info note of when and how long, worded by what
    ended it: the job exited well (``exited``); among the ``resumed`` lines an error (the silence
    ended in a failure, not in work resuming); only some of its ranks printed again (the others
    still silent); else output resumed, a possible hang passed."""
    started = stall.first_seen if stall.first_seen is not None else wall_now
    silent = f"{wall_now - started:.0f}"
    error = next((line for line in resumed if level(line.text) == "error"), None)
    back = sorted({line.rank for line in resumed if line.rank is not None})
    still = [rank for rank in stall.ranks if rank not in back]
    if exited:
        title, remedy = advice("title-stall-exited", silent=silent), advice("stall-exited")
    elif error is not None:
        who = _who(error.rank if error.rank is not None else error.file)
        line = parse_prefix(error.text).body.strip()[:MAX_QUOTED]
        title, remedy = advice("title-stall-error", silent=silent, who=who, line=line), advice("stall-error")
    elif back and still:
        title = advice("title-stall-partly", silent=silent, back=rank_words(back), still=rank_words(still))
        remedy = advice("stall-partly")
    else:
        title, remedy = advice("title-stall-passed", silent=silent), advice("stall-passed")
    return Finding(
        rule=RESOLVED_RULE, category=Category.HANG, severity="info", role="confirm", origin="stall", title=title,
        rank=stall.rank, ranks=list(stall.ranks), file=stall.file, line=stall.line, evidence=list(stall.evidence),
        fields={**stall.fields, "resumed_after_s": silent}, first_seen=started, remedy=remedy,
    )


def _who(key: int | str) -> str:
    return f"rank {key}" if isinstance(key, int) else str(key)


def _who_list(keys: list[int | str]) -> str:
    ranks = [k for k in keys if isinstance(k, int)]
    if len(ranks) == len(keys):
        return rank_words(ranks)
    return ", ".join(_who(k) for k in keys)


def _remedy(silent: float, threshold: float, first: list[int | str], subject: LastWords) -> str:
    fields = {"silent": f"{silent:.0f}", "threshold": f"{threshold:.0f}"}
    if first:
        fields.update(first=_who_list(first), last_line=subject.line.text)
    return advice("stall", **fields)
