"""The decide stage's finding book: matches in, findings out (docs/architecture.md, "Stages").

The book is the one writer of a job's findings. It merges the matches of one key into one
finding (a rule on seven ranks: one finding, ``count`` 7), renders titles and remedies from the
finding's numbers, lets a confirm finding confirm its category, and takes findings from
outside the logs (a stall, a metric signal, the exit). A ``Finding`` is frozen: a change is a
new value in the book's list (same ``seq``, so the same ``id``), never an edit of one handed
out. What the book keeps per finding beyond it (each occurrence's rank and numbers, the
classifier's templates and advice) lives in its ``_Entry``, keyed by the match's key.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace


from monitor.diagnosis.catalogue import CONFIRM_PREFIX, CONFIRMED_BY
from monitor.diagnosis.attribute import process_of
from monitor.diagnosis.classify import MAX_EVIDENCE, Match, record_rank_source
from monitor.diagnosis.prefilter import Prefilter
from monitor.diagnosis.records import Record
from monitor.diagnosis.root_cause import Occurrence
from monitor.diagnosis.secrets import mask
from monitor.diagnosis.templates import render
from monitor.diagnosis.timestamps import parse_timestamp
from monitor.logs.nodes import node_name_of
from monitor.model import SEVERITY_ORDER, Category, Finding, LogLine


@dataclass(slots=True)
class _Entry:
    """What the book keeps of one finding made from matches."""
    match: Match  # the first: the templates, advice and confirmed title of every occurrence
    finding: Finding
    occurrences: list[Occurrence] = field(default_factory=list)
    # A rank-less finding's first matched line (without prefix), to know it again with a prefix.
    first_text: str | None = None
    # Per occurrence, the NCCL process (host:pid) whose line it is where its rank is that process's
    # or not known (``rank_of_process``), else None; and which occurrence the finding tells of.
    streams: list[str | None] = field(default_factory=list)
    first: int = 0
    # The session revised the finding (``revise``: a stop it forwarded, worded as such): its title
    # and remedy are no longer the rule's to render again.
    revised: bool = False


class LogConditions:
    """Advice shown only when a pattern was (not) found in the job's logs so far (``if_log`` /
    ``unless_log``): which of the prefilter's log patterns have been found."""

    def __init__(self, prefilter: Prefilter, regex_timeout: float, problems: list[str]) -> None:
        self.prefilter = prefilter
        self.regex_timeout = regex_timeout
        self.problems = problems
        self.seen: set[int] = set()
        self._disabled: set[int] = set()

    def note(self, line: LogLine, hits: frozenset[int]) -> bool:
        """Looks for the patterns whose literals ``line`` holds; True when one was found."""
        changed = False
        for index in hits - self.seen - self._disabled:
            pattern = self.prefilter.log_patterns[index]
            try:
                found = pattern.search(line.text, timeout=self.regex_timeout)
            except TimeoutError:
                self._disabled.add(index)
                self.problems.append(
                    f"advice log pattern {pattern.pattern!r} took over {self.regex_timeout:g}s on "
                    f"{line.file}:{line.line} (catastrophic backtracking); pattern disabled"
                )
                continue
            if found:
                self.seen.add(index)
                changed = True
        return changed

    def holds(self, advice) -> bool:
        index = self.prefilter.log_pattern_index
        if advice.unless_log is not None and index[advice.unless_log.pattern] in self.seen:
            return False
        return advice.if_log is None or index[advice.if_log.pattern] in self.seen


class FindingBook:
    def __init__(self, conditions: LogConditions, known_ranks: set[int], other_ranks_text: str,
                 node_of: Callable[[str], str | None] = node_name_of,
                 dated: Callable[[], float | None] = lambda: None) -> None:
        self.conditions = conditions
        self._dated = dated  # the logs' first dated time, for times written without a year
        self._node_of = node_of  # a log file's node (its folder's node.json, or its name)
        self._known_ranks = known_ranks  # the attribution stage's, read when rendering
        self._other_ranks_text = other_ranks_text
        self.version = 0
        self._seq = itertools.count()  # Finding.seq: order taken in, unique even after a withdrawal
        self._held: dict[int, Finding] = {}  # by seq, in the order taken in
        self._list: list[Finding] | None = []
        self._entries: dict[tuple, _Entry] = {}
        self._entry_of: dict[int, tuple] = {}  # seq -> key of the entry that made it
        self._confirmed: dict[str, Finding] = {}  # category -> its first confirm finding
        # Per file, the keys of findings without a time still waiting for one written after them.
        self._untimed: dict[str, list[tuple]] = {}
        self._by_source: dict[str, int] = {}  # Finding.source_key -> seq
        self._changed: dict[int, None] = {}  # seqs of findings given a new value since take_changed

    # ---- reading -------------------------------------------------------------------------

    @property
    def findings(self) -> list[Finding]:
        """Every finding held, in the order taken in (a new list after each change)."""
        if self._list is None:
            self._list = list(self._held.values())
        return self._list

    def occurrences(self, finding: Finding) -> tuple[Occurrence, ...]:
        key = self._entry_of.get(finding.seq)
        return tuple(self._entries[key].occurrences) if key is not None else ()

    def waits_for_time(self, file: str) -> bool:
        return bool(self._untimed.get(file))

    # ---- matches -------------------------------------------------------------------------

    def take(self, match: Match) -> Finding | None:
        """A match into its finding: a new finding (returned), or another occurrence of one held."""
        record, positions = match.record, match.positions
        fields = {name: mask(value) for name, value in match.fields.items()}
        rank = match.rank
        entry = self._entries.get(match.key)
        if entry is not None:
            self._occur(entry, match, fields)
            return None
        first = record.lines[positions[0]]
        node = self._node_of(first.file)
        if node is not None:
            fields.setdefault("node", node)  # what a remedy names to exclude: --exclude={node}
        finding = Finding(
            rule=match.rule, category=Category(match.category), severity=match.severity, role=match.role,
            title="", rank=rank, ranks=[rank] if rank is not None else [], file=first.file,
            line=first.line, count=1, evidence=[mask(record.lines[p].text) for p in match.evidence],
            fields=fields, remedy="", seq=next(self._seq), arrival=record.arrival, last_arrival=record.arrival,
            first_seen=_record_time(record, positions, self._dated()), node=node,
            confidence=match.confidence, confidence_note=match.confidence_note,
            rank_source=match.rank_source if rank is not None else "", own_error=match.own_error,
            about_others=match.about_others,
            retryable=match.retryable,
        )
        if finding.first_seen is None:
            finding = replace(finding, before=record.time_after)
            if finding.before is None:
                self._untimed.setdefault(first.file, []).append(match.key)
        entry = _Entry(match, finding, [Occurrence(rank, dict(fields))],
                       record.bodies[positions[0]] if rank is None else None, [_process_of(match)])
        self._entries[match.key] = entry
        self._entry_of[finding.seq] = match.key
        entry.finding = self._confirm(entry, self._rendered(entry, finding))
        self._hold(entry.finding)
        if finding.role == "confirm":
            self._confirm_category(finding)
        return self._held[finding.seq]

    def _occur(self, entry: _Entry, match: Match, fields: dict[str, str]) -> None:
        """Another occurrence of a finding held: its count, ranks and nodes grow; an earlier
        occurrence (another rank's file, read later) takes the first's place."""
        record, positions, rank = match.record, match.positions, match.rank
        finding = entry.finding
        changes: dict = {"count": finding.count + 1, "last_arrival": max(finding.last_arrival, record.arrival)}
        if finding.node is not None and (node := self._node_of(record.lines[positions[0]].file)) is not None:
            if node not in finding.nodes:
                changes["nodes"] = sorted({*finding.nodes, finding.node, node})
        if rank is not None and rank not in finding.ranks:
            changes["ranks"] = sorted([*finding.ranks, rank])
        entry.occurrences.append(Occurrence(rank, dict(fields)))
        entry.streams.append(_process_of(match))
        if finding.rank is None and rank is not None and (
                entry.first_text == record.bodies[positions[0]] or match.rank_source == "summary"):
            # The first occurrence named no rank and this is the same message with one (a
            # traceback printed bare and again through a rank prefix), or the rank a launcher's
            # summary names (a paste that lost the summary's head: its title line came alone):
            # title and remedy can now. Another message (a later rank's traceback after a bare
            # "loss inf") tells nothing of which rank printed the first.
            changes["rank"], changes["rank_source"] = rank, match.rank_source or "message"
        # Numbers the finding lacks, from a line that has them (the kernel's OOM report: its
        # first lines name the process, the victim line its memory).
        gained = {name: value for name, value in fields.items() if value and name not in finding.fields}
        if gained:
            changes["fields"] = {**finding.fields, **gained}
        stamp = _record_time(record, positions, self._dated())
        if stamp is not None and finding.first_seen is not None and stamp < finding.first_seen \
                or (stamp is None or finding.first_seen is None) and _above(record.lines[positions[0]], finding):
            changes.update(self._earlier(finding, match, fields, stamp))
            entry.first = len(entry.occurrences) - 1
        self._update(entry, replace(finding, **changes),
                     render=("rank" in changes or "fields" in changes) and not entry.revised)
        if gained and entry.finding.role == "confirm" and self._confirmed.get(entry.finding.category) is not None \
                and self._confirmed[entry.finding.category].seq == entry.finding.seq:
            self._reconfirm(entry.finding)

    def _earlier(self, finding: Finding, match: Match, fields: dict[str, str], stamp: float | None) -> dict:
        """An occurrence written earlier than the one a finding was made from: the finding tells
        of the first, so it takes this one's place, rank, numbers and evidence."""
        record, positions = match.record, match.positions
        first = record.lines[positions[0]]
        # Its place among the findings is this occurrence's too (``chronological``: with no times, the
        # order lines were fed in).
        changes: dict = {"file": first.file, "line": first.line, "first_seen": stamp,
                         "arrival": min(finding.arrival, record.arrival),
                         "evidence": [mask(record.lines[p].text) for p in positions[:MAX_EVIDENCE]]}
        if finding.before is None and record.time_after is not None:
            changes["before"] = record.time_after
        node = self._node_of(first.file)
        if node is not None:
            fields = {**fields, "node": fields.get("node", node)}
            changes["node"] = node
        # What confirmed the finding still does, and numbers only the later line had stay.
        changes["fields"] = {**finding.fields, **{k: v for k, v in fields.items() if v}}
        if match.rank is not None:
            changes["rank"], changes["rank_source"] = match.rank, match.rank_source or record_rank_source(record) or "message"
        return changes

    def rank_of_pid(self, pid: str, rank: int) -> None:
        """A launcher's summary named the rank of process ``pid``: findings that named only the
        pid (a SIGKILL, a kernel OOM kill; torchrun's SIGTERM to each peer is one finding) get it."""
        for entry in self._entries.values():
            named = [i for i, o in enumerate(entry.occurrences) if o.rank is None and o.fields.get("pid") == pid]
            if not named:
                continue
            for i in named:
                entry.occurrences[i] = Occurrence(rank, entry.occurrences[i].fields)
            finding = entry.finding
            changes: dict = {"ranks": _ranks(entry)}
            if finding.rank is None and finding.fields.get("pid") == pid:
                changes["rank"], changes["rank_source"] = rank, "launcher"
            self._update(entry, replace(finding, **changes), render=not entry.revised)

    def rank_of_local(self, file: str, local: int, rank: int | None) -> None:
        """The launcher's summary in ``file`` says its node's local rank ``local`` is global rank
        ``rank``: findings of that file whose rank was that local rank from a prefix no node map
        made global (torchrun --tee's "[default1]:") take the global one. ``rank`` None: the file
        holds several nodes' summaries after all, and those findings name the local rank again."""
        for entry in self._entries.values():
            finding = entry.finding
            if finding.file != file or finding.rank is None:
                continue
            if rank is None:
                if finding.rank_source != "summary-local" or _local_of(entry.match) != local:
                    continue
                old, new, source = finding.rank, local, "local-prefix"
            elif finding.rank_source == "local-prefix" and finding.rank == local:
                old, new, source = local, rank, "summary-local"
            else:
                continue
            for i, occurrence in enumerate(entry.occurrences):
                if occurrence.rank == old:
                    entry.occurrences[i] = Occurrence(new, occurrence.fields)
            self._update(entry, replace(finding, ranks=_ranks(entry), rank=new, rank_source=source),
                         render=not entry.revised)

    def rank_of_process(self, stream: str, rank: int | None) -> None:
        """NCCL's lines of process ``stream`` (host:pid) now say it is ``rank`` (None: they
        disagree): the occurrences on its lines take it, the finding's ranks are theirs again, and
        a finding that tells of one of them names it."""
        for entry in self._entries.values():
            mine = [i for i, process in enumerate(entry.streams) if process == stream]
            if not mine or all(entry.occurrences[i].rank == rank for i in mine):
                continue
            for i in mine:
                entry.occurrences[i] = Occurrence(rank, entry.occurrences[i].fields)
            changes: dict = {"ranks": _ranks(entry)}
            if entry.first in mine:
                changes["rank"], changes["rank_source"] = rank, "process" if rank is not None else ""
            self._update(entry, replace(entry.finding, **changes), render="rank" in changes and not entry.revised)

    def time_written(self, file: str, stamp: float) -> None:
        """A time written in ``file`` after its findings that had none: they happened no later."""
        for key in self._untimed.pop(file, []):
            entry = self._entries[key]
            self._update(entry, replace(entry.finding, before=stamp), render=False)

    def several_ranks_known(self) -> None:
        """The job shows a second rank: remedies of findings with no rank name "the other ranks" now."""
        for entry in self._entries.values():
            if entry.finding.rank is None and not entry.revised:
                self._update(entry, entry.finding, render=True)
        self.version += 1

    def conditions_changed(self) -> None:
        """An advice condition's pattern was found in the logs: remedies that depend on one again."""
        for entry in self._entries.values():
            if any(a.unless_log is not None or a.if_log is not None for a in entry.match.advice):
                self._update(entry, entry.finding, render=True)
        self.version += 1

    # ---- findings from outside the logs ----------------------------------------------------

    def add_external(self, finding: Finding, arrival: int) -> Finding | None:
        """A finding no log line made (a stall, a metric signal, the exit), ordered after the
        ``arrival`` lines fed so far: the finding as held (its ``seq`` set), or None when it
        is a new value of one held (the same ``source_key``), which it replaces."""
        held = self._by_source.get(finding.source_key) if finding.source_key else None
        if held is not None and held in self._held:
            old = self._held[held]
            self._hold(replace(finding, seq=old.seq, arrival=old.arrival))
            return None
        finding = replace(finding, seq=next(self._seq), arrival=arrival)
        if finding.source_key:
            self._by_source[finding.source_key] = finding.seq
        self._hold(finding)
        return finding

    def revise(self, finding: Finding) -> None:
        """A new value of a held finding (the same ``seq``), from the session's own thread."""
        if finding.seq in self._held:
            key = self._entry_of.get(finding.seq)
            if key is not None:
                self._entries[key].finding = finding
                self._entries[key].revised = True
            self._hold(finding)

    def withdraw(self, finding: Finding) -> bool:
        """Removes a finding from outside the logs whose condition has ended (output resumed)."""
        held = self._held.get(finding.seq)
        if held is None or held.rule != finding.rule or finding.seq in self._entry_of:
            return False
        del self._held[finding.seq]
        if held.source_key:
            self._by_source.pop(held.source_key, None)
        self._list = None
        self.version += 1
        return True

    # ---- plumbing --------------------------------------------------------------------------

    def take_changed(self) -> list[Finding]:
        """The newest values of the findings held that changed since the last call (a count up
        on another rank, a confirmation, a metric raised again), not those new since then."""
        changed = [self._held[seq] for seq in self._changed if seq in self._held]
        self._changed.clear()
        return changed

    def _hold(self, finding: Finding) -> None:
        if finding.seq in self._held:
            self._changed[finding.seq] = None
        self._held[finding.seq] = finding
        self._list = None
        self.version += 1

    def _update(self, entry: _Entry, finding: Finding, render: bool) -> None:
        if render:
            finding = self._rendered(entry, finding)
        entry.finding = finding
        self._hold(finding)

    def _values(self, finding: Finding) -> dict[str, str]:
        values = dict(finding.fields)
        values.update(
            rank=str(finding.rank) if finding.rank is not None else "", file=finding.file,
            line=str(finding.line), count=str(finding.count), ranks=",".join(map(str, finding.ranks)),
        )
        if finding.rank is not None or len(self._known_ranks) > 1:
            values["other_ranks"] = self._other_ranks_text
        return values

    def _rendered(self, entry: _Entry, finding: Finding) -> Finding:
        """``finding`` with its title and remedy rendered from its numbers (and the advice that
        holds for them, its record and the logs so far)."""
        match = entry.match
        values = self._values(finding)
        confirmed = match.confirmed_title and CONFIRMED_BY in finding.fields
        title = render(match.confirmed_title if confirmed else match.title, values, missing="?")
        lines = [render(match.remedy, values)]
        for number, advice in enumerate(match.advice):
            if number in match.skipped_advice:
                continue
            if advice.when is not None and not advice.when.holds(finding.fields):
                continue
            if any(finding.fields.get(name) for name in advice.unless_field):
                continue
            if not self.conditions.holds(advice):
                continue
            lines.append(render(advice.text, values))
        return replace(finding, title=title, remedy="\n".join(line for line in lines if line))

    def _confirm(self, entry: _Entry, finding: Finding) -> Finding:
        """A new finding of a category a confirm finding already confirmed: confirmed at once."""
        confirm = self._confirmed.get(finding.category)
        if confirm is None or finding.role == "confirm":
            return finding
        return self._rendered(entry, _confirmed(finding, confirm))

    def _reconfirm(self, confirm: Finding) -> None:
        """The confirm finding of its category gained numbers: the findings it confirmed get them."""
        self._confirmed[confirm.category] = confirm
        for entry in self._entries.values():
            target = entry.finding
            if target.category == confirm.category and target.role != "confirm" and CONFIRMED_BY in target.fields:
                self._update(entry, _confirmed(target, confirm), render=not entry.revised)

    def _confirm_category(self, confirm: Finding) -> None:
        """A confirm finding confirms the other findings of its category (e.g. a kernel OOM-kill
        line, a bare SIGKILL): their fields get ``confirmed_by`` and ``confirm_<name>`` for each
        of the confirming finding's fields, a cascade becomes a root, the severity rises to the
        confirm finding's, and title (``confirmed_title``) and remedy are rendered again."""
        if confirm.category in self._confirmed:
            return
        self._confirmed[confirm.category] = confirm
        for entry in self._entries.values():
            target = entry.finding
            if target.category == confirm.category and target.role != "confirm":
                self._update(entry, _confirmed(target, confirm), render=True)


def _confirmed(target: Finding, confirm: Finding) -> Finding:
    fields = dict(target.fields)
    fields[CONFIRMED_BY] = confirm.rule
    for name, value in confirm.fields.items():
        fields.setdefault(CONFIRM_PREFIX + name, value)
    severity = confirm.severity if SEVERITY_ORDER[confirm.severity] < SEVERITY_ORDER[target.severity] else target.severity
    # What it lacked is here.
    return replace(target, role="root" if target.role == "cascade" else target.role, severity=severity,
                   fields=fields, confidence="certain", confidence_note="")


def _local_of(match: Match) -> int | None:
    """The node's local rank the prefix of an entry's first match gave: its rank while no summary
    had mapped it, else the one kept beside the global rank the summary gave (``Match.local_rank``)."""
    return match.local_rank if match.rank_source == "summary-local" else match.rank


def _ranks(entry: _Entry) -> list[int]:
    """A finding's ranks: those of its occurrences."""
    return sorted({o.rank for o in entry.occurrences if o.rank is not None})


def _process_of(match: Match) -> str | None:
    """The NCCL process (host:pid) whose line ``match`` is, where its rank is that process's or not
    known: a rank learnt of the process later is its rank."""
    if match.rank is not None and match.rank_source != "process":
        return None
    return process_of(match)


def _above(line: LogLine, finding: Finding) -> bool:
    """Whether ``line`` is above the finding's own line in the same file: with no two times to
    compare (a timestamped line's wrapped rest has none), the file's order is the order things were
    printed (a traceback's record is complete, and arrives, only after single lines below it: a
    terminal's wrap of its exception line)."""
    return line.file == finding.file and line.line < finding.line


def _record_time(record: Record, positions: tuple[int, ...], dated: float | None) -> float | None:
    """When a record's occurrence was written: its first line's time, else its matched line's (the
    whole line: a time written before the rank prefix is not in the body); a time without a year
    in the year nearest ``dated``, the logs' own."""
    return parse_timestamp(record.lines[0].text, dated) or parse_timestamp(record.lines[positions[0]].text, dated)
