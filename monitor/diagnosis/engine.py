"""The diagnosis pipeline: lines in, findings out, root cause on demand.

A line travels through the stages (docs/architecture.md, "Stages"): records
(``assembler.RecordAssembler``), classify (``classify.py``: the rule catalogue, the reader of
uncaught exceptions, and any classifier registered), attribute (``attribute.Attribution``) and
decide (``book.FindingBook``, then ``root_cause.choose`` over its findings). ``Engine`` only
passes each stage's output to the next; it keeps no state of its own but the problems met and
the note of the lines cut.

``Engine.feed(line)`` is the reference path: every line of every file, in order, live or
post-mortem. ``scan.py`` feeds only candidate lines of big files; it gives the same findings
because a line is a no-op here unless (a) one of the prefilter's literals occurs in it, (b) its
file has a record in progress, or (c) it is among the first ``EARLY_LINES`` of its file (where
the ranks that exist are learnt, for finding the rank that hung).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from monitor.diagnosis import advice as advice_file, pyexc
from monitor.diagnosis.assembler import (
    EARLY_LINES, ConditionLiterals, EarlyLine, Glued, RecordAssembler, TimeWritten,
)
from monitor.diagnosis.attribute import MAX_WORLD, Attribution
from monitor.diagnosis.book import FindingBook, LogConditions
from monitor.diagnosis.catalogue import Catalogue
from monitor.diagnosis.classify import REGEX_TIMEOUT_S, Match, classifiers, is_summary
from monitor.diagnosis.records import Record, embedded_traceback
from monitor.diagnosis.root_cause import RankEvidence, choose, confidence, with_rank
from monitor.diagnosis.secrets import mask
from monitor.diagnosis.timestamps import FileDate
from monitor.logs.nodes import node_name_of
from monitor.model import Category, Diagnosis, Finding, LogLine, is_timeout

__all__ = ["EARLY_LINES", "Engine"]

# The lines cut that the note quotes by place (file:line, bytes left out); the rest are counted.
CUT_LINES_QUOTED = 5


class Engine:
    def __init__(self, catalogue: Catalogue, regex_timeout: float = REGEX_TIMEOUT_S,
                 node_of: Callable[[str], str | None] | None = None) -> None:
        """``node_of``: the node of a file that names its node (SLURM's ``%N.out``: the caller's
        ``nodes_from_names``); files of a node folder (``node.json``) are known without it."""
        self.catalogue = catalogue
        self.prefilter = catalogue.prefilter
        self.problems: list[str] = []
        self.records = RecordAssembler(self.prefilter)
        self.classifiers = classifiers(catalogue, self.problems, regex_timeout)
        self.attribution = Attribution()
        self.command_world_size: int | None = None  # ``note_world_size``
        texts = pyexc.TEXTS.get(catalogue.lang, pyexc.TEXTS["en"])
        self.conditions = LogConditions(self.prefilter, regex_timeout, self.problems)
        self.book = FindingBook(self.conditions, self.attribution.known_ranks, other_ranks_text=texts[4],
                                dated=lambda: self.records.dated,
                                node_of=lambda file: node_name_of(file) or (node_of(file) if node_of else None))
        # The lines too long to read whole, each (file, line, bytes left out), and the one note
        # that says so (``_line_cut``).
        self.cut_lines: list[tuple[str, int, int]] = []
        self._cut_note: Finding | None = None

    # ---- the stages ----------------------------------------------------------------------

    def feed(self, line: LogLine) -> list[Finding]:
        """The findings this line made new (most lines: none)."""
        new: list[Finding] = []
        if line.left_out:
            self._line_cut(line, new)
        for event in self.records.feed(line):
            if isinstance(event, Record):
                self._decide(event, new)
            elif isinstance(event, EarlyLine):
                known = len(self.attribution.known_ranks)
                if (change := self.attribution.learn_early(event.rank, event.body)) is not None:
                    self.book.rank_of_process(change.stream, change.rank)
                self._ranks_learnt(known)
            elif isinstance(event, TimeWritten):
                self.book.time_written(event.file, event.stamp)
            elif isinstance(event, ConditionLiterals):
                if self.conditions.note(event.line, event.hits):
                    self.book.conditions_changed()
            elif isinstance(event, Glued):
                new.append(self._glued_note(event.line))
        return new

    def early_lines(self, ranks, world_sizes, count: int, claims=(), dated: float | None = None) -> None:
        """What ``count`` lines among their file's first ``EARLY_LINES`` teach besides findings:
        the ranks that exist, the world sizes they say, the ranks NCCL processes set up with and
        the first dated time; ``scan.py`` reads them in bulk (its ``EarlyLines``) and feeds only
        the lines a literal marks. Counted in the order as read."""
        self.records.lines_fed += count
        self.records.note_dated(dated)
        known = len(self.attribution.known_ranks)
        for change in self.attribution.learn_ranks(ranks, world_sizes, list(claims)):
            self.book.rank_of_process(change.stream, change.rank)
        self._ranks_learnt(known)

    def _ranks_learnt(self, known_before: int) -> None:
        """Findings of no rank say "the other ranks" once the job shows several: rendered again when
        the second rank is learnt, whenever that is (in bulk ahead of a file's records, or line by
        line after some), so both readings say the same."""
        if known_before <= 1 < len(self.attribution.known_ranks):
            self.book.several_ranks_known()

    def note_world_size(self, size: int) -> None:
        """The job's number of ranks, where the caller knows it from outside the logs (the launch
        command): ranks that printed nothing of their own still exist for the root-cause policy,
        unless the logs show a rank beyond it (the command's environment made more nodes)."""
        self.command_world_size = size

    def note_dated(self, seconds: float | None) -> None:
        """The logs' first dated time, where the caller found it before reading them (``diagnose``)."""
        self.records.note_dated(seconds)

    def read_date_in_bulk(self, file: str) -> FileDate:
        """The look for ``file``'s year that ``scan.py`` feeds its first lines to in bulk (the
        engine then does not look at the lines fed to it one by one)."""
        look = self.records.file_dates[file] = FileDate(bulk=True)
        return look

    def wants_time(self, file: str) -> bool:
        """Whether a finding of ``file`` waits for a time written after it (so every line is read)."""
        return file in self.records.times_wanted

    def flush(self, file: str | None = None) -> list[Finding]:
        """Completes the records in progress (of ``file``, or all): end of file, or idle."""
        new: list[Finding] = []
        for record in self.records.flush(file):
            self._decide(record, new)
        return new

    def _decide(self, record: Record, new: list[Finding]) -> None:
        """A completed record through classify, attribute and the finding book."""
        known = len(self.attribution.known_ranks)
        for learnt in self.attribution.learn_summary(record):
            self.book.rank_of_pid(learnt.pid, learnt.rank)
        self._ranks_learnt(known)
        for pair in self.attribution.learn_locals(record):
            self.book.rank_of_local(pair.file, pair.local, pair.rank)
        if is_summary(record) and (embedded := embedded_traceback(record)) is not None:
            self._decide(embedded, new)  # first: its rank is the failing rank's own
        for match in self._classify(record):
            finding = self.book.take(self.attribution.attribute(match))
            if finding is not None:
                new.append(finding)
                if finding.first_seen is None and finding.before is None:
                    self.records.times_wanted.add(finding.file)

    def _classify(self, record: Record) -> list[Match]:
        matches: list[Match] = []
        for classifier in self.classifiers:
            if classifier.fallback and matches:
                continue
            matches += classifier.classify(record)
        return matches

    def _glued_note(self, line: LogLine) -> Finding:
        """Once: the output of several ranks ran together, and how to keep it apart."""
        return self.add_new(Finding(
            rule="glued-output", category=Category.LAUNCHER, severity="info", role="confirm",
            title=advice_file.advice("title-glued-output"),
            file=line.file, line=line.line, evidence=[mask(line.text)], origin="log",
            remedy=advice_file.advice("glued-output"),
        ))

    def _line_cut(self, line: LogLine, new: list[Finding]) -> None:
        """One note for every line too long to read whole (its middle left out, ``logs/decode.py``):
        where each is and how many bytes went unread, since an error printed there is missed.
        Revised with each line cut, so it is said once, in every mode."""
        self.cut_lines.append((line.file, line.line, line.left_out))
        cut = self.cut_lines
        left_out = f"{sum(n for _, _, n in cut):,}"
        if len(cut) == 1:
            title = advice_file.advice("title-line-cut", line=str(line.line), file=os.path.basename(line.file),
                                       left_out=left_out)
        else:
            title = advice_file.advice("title-lines-cut", count=str(len(cut)), left_out=left_out)
        evidence = [f"{file}:{number}: {n:,} bytes left out" for file, number, n in cut[:CUT_LINES_QUOTED]]
        if len(cut) > CUT_LINES_QUOTED:
            evidence.append(f"and {len(cut) - CUT_LINES_QUOTED:,} more")
        if self._cut_note is None:
            self._cut_note = self.add_new(Finding(
                rule="line-cut", category=Category.LAUNCHER, severity="info", role="confirm", title=title,
                file=line.file, line=line.line, evidence=evidence, origin="log",
                remedy=advice_file.advice("line-cut"),
            ))
            new.append(self._cut_note)
        else:
            self._cut_note = replace(self._cut_note, title=title, evidence=evidence, count=len(cut))
            self.revise(self._cut_note)

    # ---- what the stages hold ------------------------------------------------------------

    @property
    def findings(self) -> list[Finding]:
        return self.book.findings

    @property
    def version(self) -> int:
        """Bumped on every change of the findings, so a UI can redraw only then."""
        return self.book.version

    def touch(self) -> None:
        """Something the findings depend on changed outside the book (a finding posted again)."""
        self.book.version += 1

    @property
    def lines_fed(self) -> int:
        return self.records.lines_fed

    @property
    def known_ranks(self) -> set[int]:
        return self.attribution.known_ranks

    @property
    def world_size(self) -> int | None:
        return self.attribution.world_size

    def has_pending(self, file: str) -> bool:
        return self.records.has_pending(file)

    @property
    def log_seen(self) -> frozenset[int]:
        """Indexes (``prefilter.log_patterns``) of unless_log/if_log patterns found in the logs so far."""
        return frozenset(self.conditions.seen)

    @property
    def log_seen_count(self) -> int:
        return len(self.conditions.seen)

    # ---- findings from outside the logs ----------------------------------------------------

    def add_external(self, finding: Finding) -> Finding | None:
        """A finding that no log line made (a stall, a metric signal): reported, counted in
        ``version`` and weighed for the root cause like the others, ordered after the lines fed
        so far. Returns it as held (its ``seq`` set), or None when it replaced the value held
        under its ``source_key``."""
        return self.book.add_external(finding, self.records.lines_fed)

    def add_new(self, finding: Finding) -> Finding:
        """``add_external`` of a finding without a ``source_key`` (a stall, a node gone quiet, a
        new line): always held as new; returns it as held."""
        assert not finding.source_key, "a finding with a source_key may replace one held: add_external"
        held = self.book.add_external(finding, self.records.lines_fed)
        assert held is not None  # only a finding with a source_key replaces one held
        return held

    def revise(self, finding: Finding) -> None:
        """A new value of a finding held (the same ``seq``)."""
        self.book.revise(finding)

    def take_changed(self) -> list[Finding]:
        """The newest values of findings that changed since the last call (``FindingBook``)."""
        return self.book.take_changed()

    def withdraw(self, finding: Finding) -> bool:
        """Remove a finding added with ``add_external`` whose condition has ended (output resumed)."""
        return self.book.withdraw(finding)

    # ---- results -------------------------------------------------------------------------

    def rank_evidence(self) -> RankEvidence:
        """What the root-cause policy weighs to name the rank that hung among timeouts."""
        known, world = frozenset(self.attribution.known_ranks), self.attribution.world_size
        command = self.command_world_size
        if command is not None and 0 < command <= MAX_WORLD and all(rank < command for rank in known):
            known, world = known | frozenset(range(command)), max(world or 0, command)
        return RankEvidence(
            occurrences={f.seq: self.book.occurrences(f) for f in self.book.findings if is_timeout(f)},
            known_ranks=known, world_size=world,
        )

    def root_cause(self) -> Finding | None:
        """The root cause of the findings (``root_cause.choose``), with the launcher's rank for
        it where its own lines named none (``root_cause.with_rank``)."""
        findings = self.book.findings
        evidence = self.rank_evidence()
        lang = self.catalogue.lang
        return with_rank(choose(findings, evidence, lang), findings, evidence, lang)

    def diagnosis(self, files) -> Diagnosis:
        """The diagnosis so far (call ``flush()`` first to include records still in progress)."""
        root = self.root_cause()
        level, note = confidence(root, self.catalogue.lang)
        return Diagnosis(
            root_cause=root, findings=sorted(self.findings, key=lambda f: f.seq),
            files=list(files), problems=list(self.problems), confidence=level, confidence_note=note,
        )
