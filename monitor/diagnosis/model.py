"""Plain data passed between the core packages (logs, diagnosis, live, runner) and the UI.

Everything here is a dataclass of plain values so that any layer can build, compare and
serialise it without importing the others.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from monitor.logs.decode import safe_text

Severity = Literal["error", "warning", "info"]
# root: can start a failure; cascade: a symptom of another rank's failure;
# confirm: only strengthens another finding (e.g. a kernel OOM-kill line for a SIGKILL).
Role = Literal["root", "cascade", "confirm"]

# The category of a launcher stopped from outside the job (scancel, preemption, kill).
STOPPED = "stopped"
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True, slots=True)
class LogLine:
    """One decoded line of a log, as the engine and the UI see it.

    ``text`` is clean: no line end, no terminal escape codes, only the last state of a
    ``\\r``-updated progress line, capped in length. ``line`` is 1-based within ``file``.
    ``rank`` is the rank the line belongs to when known (from its prefix or its file name).
    """

    file: str
    line: int
    text: str
    rank: int | None = None


@dataclass(slots=True)
class Finding:
    """One diagnosed problem: a rule (or a built-in classifier) matched one or more records.

    The same rule firing on several ranks is one finding with ``count`` and ``ranks``;
    ``rank``/``file``/``line``/``evidence``/``fields`` describe the first occurrence.
    """

    rule: str
    category: str
    severity: Severity
    role: Role
    title: str
    rank: int | None
    ranks: list[int]
    file: str
    line: int
    count: int
    evidence: list[str]
    fields: dict[str, str]
    remedy: str
    # Order in which the engine first saw this finding (0, 1, 2, ...): "earliest" for root cause.
    seq: int = 0
    # When the first occurrence happened, in seconds since the epoch. From the engine (diagnose
    # and live alike): the time written in the log line (glog/torchelastic ``E1121 10:40:02.118``,
    # ISO dates, syslog; see ``diagnosis/timestamps.py``), else None, never the time it was read.
    # Findings with no log line behind them (metrics, a live stall) carry wall-clock time. A UI
    # that fills a None with the time it saw the finding should show that it did.
    first_seen: float | None = None

    def for_display(self) -> Finding:
        """This finding with every text cleaned for a terminal (``decode.safe_text``): the file
        name, and a title or remedy from a user's rule pack, may hold escape codes."""
        return replace(
            self, title=safe_text(self.title), remedy=safe_text(self.remedy, keep_newlines=True),
            file=safe_text(self.file), rule=safe_text(self.rule), category=safe_text(self.category),
            evidence=[safe_text(line) for line in self.evidence],
        )

    def to_json(self) -> dict:
        """The documented JSON shape of a finding (``diagnose --json``, ``watch --json``)."""
        data = asdict(self)
        return {
            key: data[key]
            for key in (
                "rule", "category", "severity", "role", "title", "rank", "ranks", "file",
                "line", "count", "evidence", "fields", "remedy", "first_seen",
            )
        }


@dataclass(slots=True)
class Diagnosis:
    """The result of reading a whole job's logs: what ``diagnose`` prints and exits on."""

    root_cause: Finding | None
    findings: list[Finding]
    files: list[str]
    # Problems with the input itself (unreadable file, binary file, rule timeout): one line each.
    problems: list[str] = field(default_factory=list)
    # Files named or found that could not be read (permissions, not a regular file, a read
    # error; not a binary file, which is skipped on purpose): an input error, exit 2 as grep.
    # Each is also one of ``problems``, which is what the JSON carries.
    unread: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def to_json(self) -> dict:
        return {
            "root_cause": self.root_cause.to_json() if self.root_cause else None,
            "findings": [f.to_json() for f in self.findings],
            "files": list(self.files),
            "problems": list(self.problems),
        }
