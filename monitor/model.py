"""Plain data passed between the core packages (logs, diagnosis, metrics, session, runner) and
the UI: the bottom layer, which imports nothing of ``monitor`` but ``monitor.text``.

Everything here is a dataclass of plain values so that any layer can build, compare and
serialise it without importing the others.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Literal

from monitor.text import safe_text

Severity = Literal["error", "warning", "info"]
# root: can start a failure; cascade: a symptom of another rank's failure;
# confirm: only strengthens another finding (e.g. a kernel OOM-kill line for a SIGKILL).
Role = Literal["root", "cascade", "confirm"]
# Where a finding came from: a log line (a rule, or an uncaught exception), the metrics (NVML,
# psutil), the checks before the launch, a checkpoint check, how the job exited, the silence
# of every log (a stall), the stacks of live ranks, their flight-recorder dumps, or the files of
# a node of a multi-node job, or the ranks' stacks sampled while the job runs (a straggler).
Origin = Literal["log", "metrics", "preflight", "checkpoint", "exit", "stall", "stacks", "flight-recorder", "node",
                 "model", "straggler"]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
# How sure a finding (or the root cause) is of what it says: ``certain``, a library's own message
# matched; ``likely``, read from a generic form (an uncaught traceback no rule names, a silence,
# only timeouts); ``weak``, inferred from what is left (an exit status, a launcher's summary).
Confidence = Literal["certain", "likely", "weak"]
CONFIDENCE_ORDER = {"certain": 0, "likely": 1, "weak": 2}
# What named a finding's rank, in the report's words: the evidence behind it, surest first.
RANK_SOURCES = ("prefix", "local-prefix", "message", "file", "launcher", "summary", "summary-local", "local", "hang",
                "process", "related")


class Category(StrEnum):
    """What kind of failure a finding is (docs/rules-format.md, "Categories"). Every finding is
    checked against it when built, so a typo is an error where it is made, not a category of
    its own that nothing groups, confirms or retries."""

    CUDA_OOM = "cuda_oom"
    HOST_OOM = "host_oom"
    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_ERROR = "nccl_error"
    GLOO_TIMEOUT = "gloo_timeout"
    RENDEZVOUS_TIMEOUT = "rendezvous_timeout"
    LIBUV = "libuv"
    PORT_IN_USE = "port_in_use"
    WANDB = "wandb"
    CORRUPT_CHECKPOINT = "corrupt_checkpoint"
    CUDA_ASSERT = "cuda_assert"
    GPU_HARDWARE = "gpu_hardware"
    NAN_LOSS = "nan_loss"
    SHM_EXHAUSTED = "shm_exhausted"
    DISK_FULL = "disk_full"
    SLURM_EVENT = "slurm_event"
    # A node of a multi-node job went silent, or its monitor did (``diagnosis/node_health.py``).
    NODE_FAILURE = "node_failure"
    # A line no earlier run that ended well printed, where no rule names anything
    # (``diagnosis/novelty.py``).
    NEW_LINES = "new_lines"
    PYTHON_EXCEPTION = "python_exception"
    HANG = "hang"
    LAUNCHER = "launcher"
    # A launcher stopped from outside the job (scancel, preemption, kill).
    STOPPED = "stopped"
    METRICS = "metrics"
    GPU_THROTTLE = "gpu_throttle"
    # A rank the others steadily wait for in their collectives (``straggler/``): slow, not failed.
    STRAGGLER = "straggler"
    PREFLIGHT = "preflight"


STOPPED = Category.STOPPED
# The finding of a job that `monitor run` stopped on request (runner/explain.py).
STOPPED_RULE = "job-stopped"
TIMEOUT_CATEGORIES = (Category.NCCL_TIMEOUT, Category.GLOO_TIMEOUT)


def is_timeout(finding: Finding) -> bool:
    """A rank waited on its peers and gave up (or lost them): evidence of where a failure or a hang
    is, weighed after every rank's own error. A rank's own setup error filed under a timeout
    category (gloo finding no address for its interface) is not one, nor the ranks' stacks that
    take a timeout's category (what was seen of every rank, not one rank's report of waiting)."""
    return finding.category in TIMEOUT_CATEGORIES and not finding.own_error and finding.origin != "stacks"


@dataclass(frozen=True, slots=True)
class LogLine:
    """One decoded line of a log, as the engine and the UI see it.

    ``text`` is clean: no line end, no terminal escape codes, only the last state of a
    ``\\r``-updated progress line, capped in length. ``line`` is 1-based within ``file``.
    ``rank`` is the rank the line belongs to when known (from its prefix or its file name).
    ``left_out``: the bytes left out of the middle of a line too long to keep whole (its text
    says where, ``logs/decode.py``), 0 for a line kept whole.
    """

    file: str
    line: int
    text: str
    rank: int | None = None
    left_out: int = 0


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosed problem: a rule (or a built-in classifier) matched one or more records, or
    a source other than the logs saw one (``origin``).

    Frozen: the finding book (``diagnosis/book.py``) is its one writer, and a change is a new
    value with the same ``seq``; one handed out never changes under its reader.

    The same rule firing on several ranks is one finding with ``count`` and ``ranks``;
    ``rank``/``file``/``line``/``evidence``/``fields`` describe the first occurrence. A finding
    with no log line behind it has ``file`` "" and ``line`` 0.
    """

    rule: str
    category: Category
    severity: Severity
    role: Role
    title: str
    rank: int | None = None
    ranks: list[int] = field(default_factory=list)
    file: str = ""
    line: int = 0
    count: int = 1
    evidence: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    remedy: str = ""
    origin: Origin = "log"
    # Order in which the engine (or the job session) took this finding in (0, 1, 2, ...):
    # unique within one engine, so ``id`` names it even after another was withdrawn.
    seq: int = 0
    # How many log lines the engine had been fed before this finding's first line: the order
    # in which things were seen, for findings whose logs carry no time (see ``chronological``).
    # A finding from outside the logs gets the count at the moment it was taken in.
    arrival: int = 0
    # The same count before its last occurrence's first line (``arrival`` until it recurs): what
    # a later attempt of a restarted job printed again is of that attempt too.
    last_arrival: int = 0
    # When the first occurrence happened, in seconds since the epoch: the time written in the
    # log line (glog/torchelastic ``E1121 10:40:02.118``, ISO dates, syslog; see
    # ``diagnosis/timestamps.py``), else None, never the time it was read. Findings with no log
    # line behind them (metrics, a stall, the exit) carry wall-clock time. A UI that fills a None
    # with the time it saw the finding should show that it did.
    first_seen: float | None = None
    # The node of a multi-node job the first occurrence was seen on (``logs/nodes.py``); None on
    # one machine.
    node: str | None = None
    # Every node it was seen on, when more than one: a cascade across the job.
    nodes: list[str] = field(default_factory=list)
    # For a finding whose line has no time (a traceback): the first time written after it in its
    # file, so it happened no later. Orders the files of several nodes (``chronological``); never
    # shown as its time.
    before: float | None = None
    # How sure it is (``Confidence``), and when not ``certain``, the evidence that is missing.
    confidence: Confidence = "certain"
    confidence_note: str = ""
    # What named ``rank`` (a key of ``RANK_SOURCES``; "" with no rank).
    rank_source: str = ""
    # For a finding from outside the logs: its source's name for it, so that a new value posted
    # again (a metric signal raised once more) replaces the one held instead of adding another.
    source_key: str = ""
    # A rank's own error in a timeout category, not a wait on a peer (``is_timeout``).
    own_error: bool = False
    # A report of other processes (``Rule.about_others``: peers that never came or were lost),
    # not of the process that printed it.
    about_others: bool = False
    # False: a retry meets the same cause (``Rule.retryable``; the restart policy).
    retryable: bool = True

    def __post_init__(self) -> None:
        # ValueError names a category that does not exist.
        object.__setattr__(self, "category", Category(self.category))

    @property
    def id(self) -> str:
        """The finding's identity within one engine or job session: ``rule#seq``."""
        return f"{self.rule}#{self.seq}"

    def for_display(self) -> Finding:
        """This finding with every text cleaned for a terminal (``monitor.text.safe_text``): the
        file name, and a title or remedy from a user's rule pack, may hold escape codes."""
        return replace(
            self, title=safe_text(self.title), remedy=safe_text(self.remedy, keep_newlines=True),
            confidence_note=safe_text(self.confidence_note),
            file=safe_text(self.file), rule=safe_text(self.rule),
            node=safe_text(self.node) if self.node is not None else None, nodes=[safe_text(n) for n in self.nodes],
            evidence=[safe_text(line) for line in self.evidence],
        )

    def to_json(self) -> dict:
        """The documented JSON shape of a finding (``diagnose --json``, ``watch --json``)."""
        data = asdict(self)
        data["category"] = str(self.category)
        return {
            key: data[key]
            for key in (
                "rule", "category", "severity", "role", "title", "rank", "ranks", "file",
                "line", "count", "evidence", "fields", "remedy", "origin", "first_seen", "node", "nodes",
                "confidence", "confidence_note", "rank_source",
            )
        }


def rank_words(ranks: list[int]) -> str:
    """``rank 3``, ``ranks 0,1,3``, or "" for none: how every report names ranks."""
    if not ranks:
        return ""
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks))


def who(finding: Finding) -> str:
    """Where in the job a finding is, in words: ``rank 3``, ``ranks 0,1``, ``node gpu-07, rank
    29`` on a job of several nodes, or "" when unknown."""
    if len(finding.ranks) > 1:
        ranks = rank_words(finding.ranks)
    else:
        ranks = rank_words([finding.rank]) if finding.rank is not None else ""
    if len(finding.nodes) > 1:
        nodes = "nodes " + ",".join(finding.nodes)
    elif finding.node:
        nodes = f"node {finding.node}"
    else:
        return ranks
    return f"{nodes}, {ranks}" if ranks else nodes


def one_line(finding: Finding) -> str:
    """The one-line form of a finding, the same wherever one is printed as a line (``watch
    --headless``, ``monitor run``'s notes on stderr, the demo): severity, ranks, title, where."""
    finding = finding.for_display()
    where = f"  ({finding.file}:{finding.line})" if finding.line else f"  ({finding.origin})"
    ranks = who(finding)
    if not ranks or finding.title.startswith(ranks):
        return f"{finding.severity.upper():<7} {finding.title}{where}"
    return f"{finding.severity.upper():<7} {ranks}: {finding.title}{where}"


def any_error(findings) -> bool:
    """Whether the job failed, as the findings say: one of them is an error (the exit code of
    ``diagnose`` and ``stacks``, the screen's "failed")."""
    return any(f.severity == "error" for f in findings)


def chronological(findings: list[Finding]) -> list[Finding]:
    """The findings in the order they happened, by one sort key for the whole list.

    When every file's findings carry a time (``first_seen``; a finding without one takes that of
    the next one of its file, see ``_times``), the key is ``(time, arrival, seq)``: the logs' own
    clocks order lines of different files. Otherwise it is ``(arrival, seq)``: the order in which
    their first lines were read, which within a file is line order (a traceback counts from its
    first line, not from when it completed). One key for the
    whole list is a strict total order, so the earliest finding does not depend on the order
    of the list (a pairwise rule mixing the two can go round in a circle).
    """
    times = _times(findings)
    if times is not None:
        return sorted(findings, key=lambda f: (times[id(f)], f.arrival, f.seq))
    return sorted(findings, key=lambda f: (f.arrival, f.seq))


def _times(findings: list[Finding]) -> dict[int, float] | None:
    """Each finding's time for ordering: its own; else (a traceback prints no time) the first time
    written after it in its file (``before``), else that of the next finding of its file that has
    one, else of the one before. So the files of several nodes are ordered by their clocks, not by
    which was read first. None when some file holds no time at all (the order of reading decides)."""
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        by_file.setdefault(finding.file, []).append(finding)
    times: dict[int, float] = {}
    for same in by_file.values():
        same.sort(key=lambda f: (f.arrival, f.seq))
        if all(f.first_seen is None and f.before is None for f in same):
            return None
        later = None
        for finding in reversed(same):
            # The next finding's time bounds this one's, whichever way it was known (a "before" too).
            if (time := finding.first_seen if finding.first_seen is not None else finding.before or later) is not None:
                times[id(finding)] = later = time
        # The first finding has a time: some finding of the file has one, and bounds all before it.
        earlier = times[id(same[0])]
        for finding in same:  # the last ones, with no time after them: the time before them
            earlier = times.setdefault(id(finding), earlier)
    return times


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
    # What was read of the input, one line each (which run of a folder of several).
    notes: list[str] = field(default_factory=list)
    # Files read that hold nothing at all (a job that never wrote, a log truncated away).
    empty: list[str] = field(default_factory=list)
    # How sure the root cause is, as a cause (``root_cause.confidence``): its own confidence, or
    # less when it was chosen from what was left (only timeouts, only a launcher's report).
    confidence: Confidence | None = None
    confidence_note: str = ""
    # Compared with the last run that ended well (``diagnosis/novelty.py``): its name, the lines
    # whose template it never printed (``NewLine.to_json``), and what changed in between.
    against: str | None = None
    new_lines: list[dict] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any_error(self.findings)

    def to_json(self) -> dict:
        return {
            "root_cause": self._root_json(),
            "findings": [f.to_json() for f in self.findings],
            "files": list(self.files),
            "problems": list(self.problems),
            "notes": list(self.notes),
            "empty": list(self.empty),
            "against": self.against,
            "new_since_good_run": list(self.new_lines),
            "changes": list(self.changes),
        }

    def _root_json(self) -> dict | None:
        if self.root_cause is None:
            return None
        data = self.root_cause.to_json()
        if self.confidence is not None:
            data["confidence"], data["confidence_note"] = self.confidence, self.confidence_note
        return data
