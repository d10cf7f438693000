"""Which node of a multi-node job went quiet, from the files each node's monitor keeps writing.

Under ``monitor run --job-dir``, each node's folder holds the job's log there (written by the
node's recorder as the job prints), its metrics recording (``run-X.metrics.jsonl``, a sample a
second from the node's monitor: its heartbeat) and, once the monitor saw the job end, its end
report (``run-X.diagnosis.json``). The times of those files tell, from any machine that sees the
shared folder:

- a node whose log *and* metrics stopped well before the other nodes' (``node-silent``, an
  error: the node failed, or everything on it was killed; the other ranks then time out);
- a node whose monitor stopped (no metrics for 15 s, no report), whether its log goes on or
  its ranks are quiet (``node-monitor-lost``, a warning: the recorder keeps the log).

``post_mortem(folder)`` judges a finished job; ``NodeWatch`` the same live, each few seconds.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from monitor.diagnosis.advice import advice, language
from monitor.logs.nodes import Node, nodes_in
from monitor.model import Category, Finding
from monitor.units import clock, duration

# A node this much quieter than the others (no log line, no metrics sample) went silent.
SILENT_S = 60.0
# A monitor samples every second: this long without a sample, and without a report, it is gone.
MONITOR_QUIET_S = 15.0
CHECK_EVERY_S = 5.0


@dataclass(frozen=True, slots=True)
class NodeState:
    node: Node
    log_at: float | None       # when its newest run's log was last written
    metrics_at: float | None   # when its monitor last kept a sample
    reported: bool             # its monitor wrote the end report

    @property
    def last_word(self) -> float | None:
        times = [t for t in (self.log_at, self.metrics_at) if t is not None]
        return max(times) if times else None


def node_states(folder: str | os.PathLike) -> list[NodeState]:
    """Each node of a job folder, as its files say now (a few stats per node)."""
    states = []
    for node in nodes_in(folder):
        logs = sorted(Path(node.folder).glob("run-*.log"))
        if not logs:
            states.append(NodeState(node, None, None, False))
            continue
        stem = logs[-1].with_suffix("")
        states.append(NodeState(node, _mtime(logs[-1]), _mtime(Path(f"{stem}.metrics.jsonl")),
                                Path(f"{stem}.diagnosis.json").exists()))
    return states


def judge(states: list[NodeState], now: float) -> list[Finding]:
    """The findings of nodes that went quiet, as of ``now`` (the newest word of any node, for a
    finished job)."""
    findings = []
    for state in states:
        last = state.last_word
        if state.reported or last is None:
            continue
        others = [s.last_word for s in states if s is not state and s.last_word is not None]
        others_on = max(others, default=None)
        if others_on is not None and others_on - last >= SILENT_S and now - last >= SILENT_S:
            findings.append(_silent(state, last, others_on - last))
        elif state.metrics_at is not None and now - state.metrics_at >= MONITOR_QUIET_S:
            findings.append(_monitor_lost(state, now))
    return findings


def post_mortem(folder: str | os.PathLike) -> list[Finding]:
    states = node_states(folder)
    words = [s.last_word for s in states if s.last_word is not None]
    return judge(states, max(words)) if len(states) > 1 and words else []


class NodeWatch:
    """The live check of a job folder, at most every ``CHECK_EVERY_S``: ``check()`` returns the
    findings that hold now (the caller withdraws those that no longer do)."""

    def __init__(self, folder: str | os.PathLike, clock=time.monotonic, wall_clock=time.time) -> None:
        self.folder = folder
        self._clock = clock
        self._wall_clock = wall_clock
        self._next = 0.0

    def due(self) -> bool:
        return self._clock() >= self._next

    def check(self) -> list[Finding]:
        self._next = self._clock() + CHECK_EVERY_S
        states = node_states(self.folder)
        return judge(states, self._wall_clock()) if len(states) > 1 else []


def _silent(state: NodeState, last: float, quiet: float) -> Finding:
    name = state.node.name
    return Finding(
        rule="node-silent", category=Category.NODE_FAILURE, severity="error", role="root",
        title=advice("title-node-silent", node=name), node=name, file=state.node.folder, origin="node",
        evidence=[f"{name}: last log line or metrics sample at {clock(last)}, "
                  f"{duration(quiet)} before the other nodes' last"],
        fields={"node": name, "quiet_s": f"{quiet:.0f}"}, first_seen=last,
        remedy=advice("node-silent", node=name, quiet=duration(quiet), since=clock(last)),
    )


def _monitor_lost(state: NodeState, now: float) -> Finding:
    name = state.node.name
    log_at = state.log_at or 0.0
    assert state.metrics_at is not None  # asked only of a node whose monitor kept a sample
    words = LOG_WORDS.get(language(), LOG_WORDS["en"])
    if log_at > state.metrics_at:
        log = words["grows"] if now - log_at < MONITOR_QUIET_S else words["went on"].format(clock(log_at))
    else:
        log = words["quiet"].format(clock(log_at))
    return Finding(
        rule="node-monitor-lost", category=Category.NODE_FAILURE, severity="warning", role="confirm",
        title=advice("title-node-monitor-lost", node=name), node=name, file=state.node.folder, origin="node",
        evidence=[f"{name}: last metrics sample at {clock(state.metrics_at)}; log written until {clock(log_at)}"],
        fields={"node": name}, first_seen=state.metrics_at,
        remedy=advice("node-monitor-lost", node=name, since=clock(state.metrics_at), log=log),
    )


# How the node's log went on, in the advice's language (``{log}`` of ``node-monitor-lost``).
LOG_WORDS = {
    "en": {"grows": "its log still grows", "went on": "its log went on until {}",
           "quiet": "its log was last written at {} (its ranks may just be quiet)"},
    "zh": {"grows": "它的日志仍在增长", "went on": "它的日志一直写到 {}",
           "quiet": "它的日志最后写于 {}（它的 rank 可能只是没有输出）"},
}


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
