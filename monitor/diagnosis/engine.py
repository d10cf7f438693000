"""The incremental diagnosis engine: lines in, findings out, root cause on demand.

``Engine.feed(line)`` is the reference path: every line of every file, in order, live or
post-mortem. ``scan.py`` feeds only candidate lines of big files; it gives the same findings
because a line is a no-op here unless (a) one of the prefilter's literals occurs in it, (b) its
file has a record in progress, or (c) it is among the first ``EARLY_LINES`` of its file (where
the engine learns which ranks exist, for finding the rank that hung).
"""

from __future__ import annotations

import itertools

from dataclasses import replace

import regex

from monitor.diagnosis import advice as advice_file, pyexc, records
from monitor.diagnosis.catalogue import CONFIRM_PREFIX, CONFIRMED_BY, Catalogue, Rule
from monitor.diagnosis.root_cause import choose, confidence, with_rank
from monitor.model import SEVERITY_ORDER, Diagnosis, Finding, LogLine
from monitor.logs.nodes import node_of
from monitor.logs.ranks import parse_prefix, rank_in_text
from monitor.diagnosis.records import Record
from monitor.diagnosis.secrets import mask
from monitor.diagnosis.templates import render
from monitor.diagnosis.timestamps import parse_timestamp

EARLY_LINES = 2000
# A pattern that takes longer than this on one line is backtracking catastrophically.
REGEX_TIMEOUT_S = 0.5
MAX_EVIDENCE = 8
# Shortest terminal width whose wrapped lines are joined again inside a record.
WRAP_WIDTH = 80
# Fields (named groups) that hold a rank's last completed collective, as rules name them.
LAST_COMPLETED_FIELDS = ("last_completed", "completed", "done", "last_done")
_WORLD_SIZE = regex.compile(r"(?i)\bworld[_ ]?size\s*[=:]\s*(\d+)")
_SUMMARY_RANK = regex.compile(r"^\s*rank\s*:\s*(\d+)")
_SUMMARY_PID = regex.compile(r"^\s*exitcode\s*:\s*-?\d+ \(pid: (\d+)\)")
MAX_WORLD = 1 << 16
# A rank's prefix right after other text: two ranks' output in one terminal line.
_GLUED = regex.compile(r"(?<=\S)\[rank\d+\]:")


class Engine:
    def __init__(self, catalogue: Catalogue, regex_timeout: float = REGEX_TIMEOUT_S) -> None:
        self.catalogue = catalogue
        self.prefilter = catalogue.prefilter
        self._hits = self.prefilter.hits  # Prefilter.line_hits without a call per line
        self.regex_timeout = regex_timeout
        self.findings: list[Finding] = []
        self.problems: list[str] = []
        self.version = 0
        self.lines_fed = 0  # Finding.arrival: lines fed before a finding's first line
        self._seq = itertools.count()  # Finding.seq: arrival order, unique even after a withdrawal
        self._by_key: dict[tuple, Finding] = {}
        self._occurrences: dict[int, list[tuple[int | None, dict[str, str]]]] = {}
        # A rank-less finding's first matched line (without prefix), by id(finding).
        self._first_text: dict[int, str] = {}
        self._finding_rule: dict[int, Rule | None] = {}
        self._record_skip: dict[int, set[int]] = {}  # per finding, advice its record rules out
        self._pending: dict[tuple, Record] = {}
        self._spawned: dict[tuple, int] = {}  # per stream, the process mp.spawn says the next traceback is of
        self._pending_per_file: dict[str, int] = {}
        self._disabled: set[int] = set()
        self._log_seen: set[int] = set()  # prefilter.log_patterns found in the logs so far
        self._log_disabled: set[int] = set()
        self._confirmed: dict[str, Finding] = {}  # category -> its first confirm finding
        # torchelastic's summary pairs each failed rank with its pid: pid -> rank.
        self._pid_ranks: dict[str, int] = {}
        self.known_ranks: set[int] = set()
        self.world_size: int | None = None  # from a world_size=N line, when one was seen
        self._glued_seen = False
        # Per file, the findings without a time still waiting for a time written after them.
        self._untimed: dict[str, list[Finding]] = {}
        # An uncaught exception's title and remedy, in the catalogue's language.
        self._exception_texts = pyexc.TEXTS.get(catalogue.lang, pyexc.TEXTS["en"])

    # ---- feeding -------------------------------------------------------------------------

    def feed(self, line: LogLine) -> list[Finding]:
        """The findings this line made new (most lines: none)."""
        new: list[Finding] = []
        arrival = self.lines_fed
        self.lines_fed += 1
        file_pending = self._pending_per_file.get(line.file, 0)
        if file_pending:
            self._expire(line, new)
            file_pending = self._pending_per_file.get(line.file, 0)
        rule_hits, log_hits, starter = self._hits(line.text.encode("utf-8", "surrogatepass"))
        if log_hits:
            self._note_log_patterns(line, log_hits)
        if not (rule_hits or starter or file_pending or line.line <= EARLY_LINES):
            return new
        prefix = parse_prefix(line.text)
        if "[rank" in prefix.body and (glued := _GLUED.search(prefix.body)):
            # "step 3 loss nan[rank3]: Traceback ...": two ranks wrote into one terminal line
            # (torchrun without --tee). Each part is read as the line it should have been.
            cut = len(line.text) - len(prefix.body) + glued.start()
            if not self._glued_seen:
                self._glued_seen = True
                new.append(self._glued_note(line))
            new += self.feed(LogLine(line.file, line.line, line.text[:cut], line.rank))
            new += self.feed(LogLine(line.file, line.line, line.text[cut:], None))
            return new
        if starter and (cut := _glued_traceback(prefix.body)) is not None:
            # "name? Traceback (most recent call last):", or a tqdm bar redrawn with \r and never
            # ended: the header starts a line of its own (with the line's prefix), as on a terminal.
            lead = line.text[:len(line.text) - len(prefix.body)]
            new += self.feed(LogLine(line.file, line.line, lead + prefix.body[:cut], line.rank))
            new += self.feed(LogLine(line.file, line.line, lead + prefix.body[cut:], line.rank))
            return new
        # The line's rank as its reader attributed it (a node's local rank made global), else its prefix's.
        rank = line.rank if line.rank is not None else prefix.rank
        if line.line <= EARLY_LINES:
            self._learn_ranks(rank, prefix.body)
        key = (line.file, rank if rank is not None else prefix.stream)
        body = prefix.body
        self._take(line, key, body, rank, rule_hits, starter, arrival, new)
        if (self._untimed.get(line.file) or self._pending_per_file.get(line.file)) and \
                (stamp := parse_timestamp(body)) is not None:
            self._note_time(key, stamp)
        return new

    def _note_time(self, key: tuple, stamp: float) -> None:
        """A time written in a file, by the stream ``key``: the file's findings without a time, and
        the records of its other streams still open (completed later: at the file's end), came
        before it. (A record's own lines say when it was written, not when it happened.)"""
        file = key[0]
        for finding in self._untimed.pop(file, []):
            finding.before = stamp
        for record_key, record in self._pending.items():
            if record_key[0] == file and record_key != key and record.time_after is None:
                record.time_after = stamp

    def _take(self, line: LogLine, key: tuple, body: str, rank: int | None, rule_hits, starter: bool,
              arrival: int, new: list[Finding]) -> None:
        """A candidate line into its stream's record (continuing, completing or starting one), or
        classified alone."""
        record = self._pending.get(key)
        if record is not None:
            if records.continues(record, body):
                records.append(record, line, body, rule_hits)
                if record.state == "done" or (record.kind == "last_error" and len(record.lines) == 2):
                    self._complete(key, new)
                return
            self._complete(key, new)
        kind = records.starter_kind(body) if starter else None
        if kind == "spawned":
            # torch.multiprocessing.spawn's "-- Process N terminated with the following error:": the
            # traceback that follows is process N's (its rank, under mp.spawn's usual use).
            self._spawned[key] = int(records.SPAWNED.match(body.strip())[1])
        elif kind is not None:
            record = records.start(kind, line, body, rank, arrival)
            if rank is None and kind == "traceback" and (index := self._spawned.pop(key, None)) is not None:
                record.rank, record.rank_from = index, "launcher"
            record.rule_hits.append(rule_hits)
            self._pending[key] = record
            self._pending_per_file[line.file] = self._pending_per_file.get(line.file, 0) + 1
        elif rule_hits or (starter and pyexc.parse_exception_line(body) is not None):
            self._classify(Record("line", [line], [body], rank, rule_hits=[rule_hits], arrival=arrival), new)

    def _glued_note(self, line: LogLine) -> Finding:
        """Once: the output of several ranks ran together, and how to keep it apart."""
        finding = Finding(
            rule="glued-output", category="launcher", severity="info", role="confirm",
            title=advice_file.advice("title-glued-output"),
            file=line.file, line=line.line, evidence=[mask(line.text)], origin="log",
            remedy=advice_file.advice("glued-output"), seq=next(self._seq), arrival=self.lines_fed,
        )
        self.findings.append(finding)
        self.version += 1
        return finding

    def _learn_ranks(self, rank: int | None, body: str) -> None:
        """Ranks that exist, from the start of each file: a line's rank, a ``world_size=N``."""
        if rank is not None:
            self.known_ranks.add(rank)
        match = _WORLD_SIZE.search(body) if "orld" in body or "ORLD" in body else None
        if match and 0 < int(match.group(1)) <= MAX_WORLD:
            self.world_size = max(self.world_size or 0, int(match.group(1)))
            self.known_ranks.update(range(self.world_size))

    def flush(self, file: str | None = None) -> list[Finding]:
        """Completes the records in progress (of ``file``, or all): end of file, or idle."""
        new: list[Finding] = []
        for key in [k for k in self._pending if file is None or k[0] == file]:
            self._complete(key, new)
        return new

    def has_pending(self, file: str) -> bool:
        return bool(self._pending_per_file.get(file))

    @property
    def log_seen(self) -> frozenset[int]:
        """Indexes (``prefilter.log_patterns``) of unless_log/if_log patterns found in the logs so far."""
        return frozenset(self._log_seen)

    @property
    def log_seen_count(self) -> int:
        return len(self._log_seen)

    def _expire(self, line: LogLine, new: list[Finding]) -> None:
        for key, record in list(self._pending.items()):
            if key[0] == line.file and line.line - record.last_line > record.silence_limit:
                self._complete(key, new)

    def _complete(self, key: tuple, new: list[Finding]) -> None:
        record = self._pending.pop(key)
        self._pending_per_file[key[0]] -= 1
        self._classify(records.trim(record), new)

    # ---- classifying ---------------------------------------------------------------------

    def _classify(self, record: Record, new: list[Finding]) -> None:
        if _is_summary(record):
            # torchelastic's summary lists every failed rank (all of them exist) with its pid.
            summary_rank = None
            for body in record.bodies:
                match = _SUMMARY_RANK.match(body)
                if match:
                    summary_rank = int(match.group(1))
                    self.known_ranks.add(summary_rank)
                elif summary_rank is not None and (match := _SUMMARY_PID.match(body)):
                    self._learn_pid_rank(match.group(1), summary_rank)
        views = self._views(record)
        candidates = sorted(set().union(*(hits for _, _, hits in views)) - self._disabled)
        named = False
        for index in candidates:
            rule = self.catalogue.rules[index]
            fields: dict[str, str] = {}
            matched: list[int] = []
            for pattern in rule.patterns:
                hit = self._match_pattern(rule, index, pattern, record, views)
                if hit is None:
                    continue
                positions, match = hit
                matched.extend(p for p in positions if p not in matched)
                for name, value in match.groupdict().items():
                    if value is not None and name not in fields:
                        fields[name] = value
            if index in self._disabled or not matched:
                continue
            named = True
            matched.sort()
            rank, source = record.rank, _record_rank_source(record)
            if "rank" in fields and fields["rank"].isdigit():
                rank, source = int(fields.pop("rank")), rule.rank_source or "message"
            elif rank is None and (rank := rank_in_text(record.bodies[matched[0]])) is not None:
                source = "message"
            self._add(rule, (rule.id,), record, matched, rank, fields, new, rank_source=source)
        if not named and record.kind in ("traceback", "line"):
            self._classify_exception(record, new)

    def _learn_pid_rank(self, pid: str, rank: int) -> None:
        """A pid's rank: findings that name only the pid (a SIGKILL, a kernel OOM kill) get it."""
        if pid in self._pid_ranks:
            return
        self._pid_ranks[pid] = rank
        for finding in self.findings:
            if id(finding) not in self._finding_rule:
                continue
            # Every occurrence that named the pid (torchrun's SIGTERM to each peer is one finding).
            occurrences = self._occurrences[id(finding)]
            named = [i for i, (known, fields) in enumerate(occurrences) if known is None and fields.get("pid") == pid]
            if not named:
                continue
            for i in named:
                occurrences[i] = (rank, occurrences[i][1])
            if rank not in finding.ranks:
                finding.ranks = sorted([*finding.ranks, rank])
            if finding.rank is None and finding.fields.get("pid") == pid:
                finding.rank, finding.rank_source = rank, "launcher"
            self._render(finding)
            self.version += 1

    def _views(self, record: Record) -> list[tuple[tuple[int, ...], str, set[int]]]:
        """What patterns are tried on: each line of the record, then each pair of lines that a
        terminal wrapped (the first as long as the record's longest line, 80+ characters)."""
        views = [((i,), body, hits) for i, (body, hits) in enumerate(zip(record.bodies, record.rule_hits))]
        if _is_summary(record):
            # torchelastic lists the ranks it stopped (exit -15) before its "Root Cause" entry:
            # a field both sections hold comes from the root cause.
            root = next((i for i, body in enumerate(record.bodies) if body.lstrip().startswith("Root Cause")), None)
            if root is not None:
                views = views[root:] + views[:root]
        if len(record.lines) > 1:
            width = max(len(line.text) for line in record.lines)
            for i in range(len(record.lines) - 1):
                following = record.bodies[i + 1]
                if width >= WRAP_WIDTH and len(record.lines[i].text) == width and following[:1].strip():
                    joined = record.bodies[i] + following
                    views.append(((i, i + 1), joined, self.prefilter.line_hits(joined)[0]))
        return views

    def _match_pattern(self, rule: Rule, index: int, pattern: regex.Pattern, record: Record, views):
        for positions, body, hits in views:
            if index not in hits:
                continue
            try:
                match = pattern.search(body, timeout=self.regex_timeout)
            except TimeoutError:
                self._disabled.add(index)
                line = record.lines[positions[0]]
                self.problems.append(
                    f"{rule.where}: rule {rule.id}: pattern {pattern.pattern!r} took over "
                    f"{self.regex_timeout:g}s on {line.file}:{line.line} (catastrophic backtracking); rule disabled"
                )
                return None
            if match:
                return positions, match
        return None

    def _classify_exception(self, record: Record, new: list[Finding]) -> None:
        if record.kind == "line":
            exception = pyexc.parse_exception_line(record.bodies[0])
        else:
            exception = pyexc.parse_traceback(record.bodies)
        if exception is None:
            return
        positions = [exception.index]
        key = (pyexc.RULE_ID, exception.exc_type, exception.frame_file, exception.frame_line)
        self._add(None, key, record, positions, record.rank, exception.fields(), new, exception,
                  rank_source=_record_rank_source(record))

    def _add(self, rule: Rule | None, key: tuple, record: Record, positions: list[int], rank: int | None,
             fields: dict[str, str], new: list[Finding], exception: pyexc.PythonException | None = None,
             rank_source: str = "") -> None:
        """``rank_source``: what named ``rank`` (``model.RANK_SOURCES``)."""
        fields = {name: mask(value) for name, value in fields.items()}
        if rank is None and "pid" in fields and (rank := self._pid_ranks.get(fields["pid"])) is not None:
            rank_source = "launcher"
        finding = self._by_key.get(key)
        if finding is not None:
            finding.count += 1
            if finding.node is not None and (node := node_of(record.lines[positions[0]].file)) is not None:
                if node.name not in finding.nodes:
                    finding.nodes = sorted({*finding.nodes, finding.node, node.name})
            if rank is not None and rank not in finding.ranks:
                finding.ranks.append(rank)
                finding.ranks.sort()
            self._occurrences[id(finding)].append((rank, fields))
            if finding.rank is None and rank is not None and self._first_text.get(id(finding)) == record.bodies[positions[0]]:
                # The first occurrence named no rank and this is the same message with one (a
                # traceback printed bare and again through a rank prefix): title and remedy can now.
                # Another message (a later rank's traceback after a bare "loss inf") tells nothing
                # of which rank printed the first.
                finding.rank, finding.rank_source = rank, _record_rank_source(record) or "message"
                self._render(finding)
            stamp = _record_time(record, positions)
            if stamp is not None and finding.first_seen is not None and stamp < finding.first_seen:
                self._take_earlier(finding, record, positions, rank, fields, stamp)
            self.version += 1
            return
        first = record.lines[positions[0]]
        node = node_of(first.file)
        if node is not None:
            fields.setdefault("node", node.name)  # what a remedy names to exclude: --exclude={node}
        evidence = [mask(record.lines[p].text) for p in positions[:MAX_EVIDENCE]]
        if rule is not None:
            category, severity, role, title = rule.category, rule.severity, rule.role, rule.title
            sure, sure_note = rule.confidence, rule.confidence_note
        else:
            bare = record.kind == "line"
            sure = "weak" if bare else "likely"
            sure_note = self._exception_texts[6 if bare else 5].format(type=exception.short_type)
            category = pyexc.CATEGORY
            cascade = exception.is_cascade
            role = "cascade" if cascade else "root"
            severity = "warning" if exception.short_type in pyexc.WARNING_TYPES else "error"
            title = self._exception_texts[1 if cascade else 0]
            frame_line = next((i for i, b in enumerate(record.bodies)
                               if exception.frame_file and f'"{exception.frame_file}", line {exception.frame_line}' in b), None)
            if frame_line is not None and frame_line not in positions:
                evidence.insert(0, mask(record.lines[frame_line].text))
        finding = Finding(
            rule=rule.id if rule else pyexc.RULE_ID, category=category, severity=severity, role=role,
            title=title, rank=rank, ranks=[rank] if rank is not None else [], file=first.file,
            line=first.line, count=1, evidence=evidence, fields=fields, remedy="",
            seq=next(self._seq), arrival=record.arrival, first_seen=_record_time(record, positions),
            node=node.name if node is not None else None, confidence=sure, confidence_note=sure_note,
            rank_source=rank_source if rank is not None else "",
        )
        self._by_key[key] = finding
        if finding.first_seen is None:
            finding.before = record.time_after
            if finding.before is None:
                self._untimed.setdefault(first.file, []).append(finding)
        self._occurrences[id(finding)] = [(rank, fields)]
        if rank is None:
            self._first_text[id(finding)] = record.bodies[positions[0]]  # to know it again with a prefix
        self._finding_rule[id(finding)] = rule
        if rule is not None:
            self._record_skip[id(finding)] = self._advice_skipped_by_record(rule, record)
        self._render(finding)
        self.findings.append(finding)
        self._apply_confirmation(finding)
        self.version += 1
        new.append(finding)

    def _take_earlier(self, finding: Finding, record: Record, positions: list[int], rank: int | None,
                      fields: dict[str, str], stamp: float) -> None:
        """An occurrence written earlier than the one a finding was made from (another rank's
        file, read later): the finding tells of the first, so it takes this one's place, rank,
        numbers and evidence."""
        first = record.lines[positions[0]]
        node = node_of(first.file)
        if node is not None:
            fields.setdefault("node", node.name)
            finding.node = node.name
        finding.file, finding.line, finding.first_seen = first.file, first.line, stamp
        finding.evidence = [mask(record.lines[p].text) for p in positions[:MAX_EVIDENCE]]
        # What confirmed the finding still does.
        finding.fields = fields | {k: v for k, v in finding.fields.items() if k == CONFIRMED_BY or k.startswith(CONFIRM_PREFIX)}
        if rank is not None:
            finding.rank, finding.rank_source = rank, _record_rank_source(record) or "message"
        self._render(finding)

    # ---- findings from outside the logs ----------------------------------------------------

    def add_external(self, finding: Finding) -> None:
        """A finding that no log line made (a stall, a metric signal): it is reported, counted in
        ``version`` and weighed for the root cause like the others, ordered after the lines
        fed so far."""
        finding.seq = next(self._seq)
        finding.arrival = self.lines_fed
        self.findings.append(finding)
        self.version += 1

    def withdraw(self, finding: Finding) -> bool:
        """Remove a finding added with ``add_external`` whose condition has ended (output resumed)."""
        for index, candidate in enumerate(self.findings):
            if candidate is finding:
                del self.findings[index]
                self.version += 1
                return True
        return False

    # ---- remedies, advice, confirmation ----------------------------------------------------

    def _values(self, finding: Finding) -> dict[str, str]:
        values = dict(finding.fields)
        values.update(
            rank=str(finding.rank) if finding.rank is not None else "", file=finding.file,
            line=str(finding.line), count=str(finding.count), ranks=",".join(map(str, finding.ranks)),
        )
        if finding.rank is not None or len(self.known_ranks) > 1:
            values["other_ranks"] = self._exception_texts[4]
        return values

    def _render(self, finding: Finding) -> None:
        rule = self._finding_rule.get(id(finding))
        values = self._values(finding)
        if rule is None:
            cascade = finding.role == "cascade"
            title, cascade_title, remedy, cascade_remedy, *_ = self._exception_texts
            finding.title = render(cascade_title if cascade else title, values, missing="?")
            finding.remedy = render(cascade_remedy if cascade else remedy, values)
            return
        confirmed = rule.confirmed_title and CONFIRMED_BY in finding.fields
        finding.title = render(rule.confirmed_title if confirmed else rule.title, values, missing="?")
        lines = [render(rule.remedy, values)]
        index = self.prefilter.log_pattern_index
        skipped = self._record_skip.get(id(finding), set())
        for number, advice in enumerate(rule.advice):
            if number in skipped:
                continue
            if advice.when is not None and not advice.when.holds(finding.fields):
                continue
            if advice.unless_log is not None and index[advice.unless_log.pattern] in self._log_seen:
                continue
            if advice.if_log is not None and index[advice.if_log.pattern] not in self._log_seen:
                continue
            lines.append(render(advice.text, values))
        finding.remedy = "\n".join(line for line in lines if line)

    def _advice_skipped_by_record(self, rule: Rule, record: Record) -> set[int]:
        """The advice (by index) whose ``if_record``/``unless_record`` rules it out for this record."""
        def found(pattern: regex.Pattern) -> bool:
            try:
                return any(pattern.search(body, timeout=self.regex_timeout) for body in record.bodies)
            except TimeoutError:
                self.problems.append(f"{rule.where}: rule {rule.id}: advice record pattern {pattern.pattern!r} "
                                     f"took over {self.regex_timeout:g}s (catastrophic backtracking); taken as not found")
                return False

        skipped = set()
        for number, advice in enumerate(rule.advice):
            if advice.if_record is not None and not found(advice.if_record):
                skipped.add(number)
            elif advice.unless_record is not None and found(advice.unless_record):
                skipped.add(number)
        return skipped

    def _note_log_patterns(self, line: LogLine, hits: set[int]) -> None:
        changed = False
        for index in hits - self._log_seen - self._log_disabled:
            pattern = self.prefilter.log_patterns[index]
            try:
                found = pattern.search(line.text, timeout=self.regex_timeout)
            except TimeoutError:
                self._log_disabled.add(index)
                self.problems.append(
                    f"advice log pattern {pattern.pattern!r} took over {self.regex_timeout:g}s on "
                    f"{line.file}:{line.line} (catastrophic backtracking); pattern disabled"
                )
                continue
            if found:
                self._log_seen.add(index)
                changed = True
        if changed:
            for finding in self.findings:
                rule = self._finding_rule.get(id(finding))
                if rule is not None and any(a.unless_log is not None or a.if_log is not None for a in rule.advice):
                    self._render(finding)
            self.version += 1

    def _apply_confirmation(self, finding: Finding) -> None:
        """A confirm finding confirms the other findings of its category (e.g. a kernel OOM-kill
        line, a bare SIGKILL): their fields get ``confirmed_by`` and ``confirm_<name>`` for each
        of the confirming finding's fields, a cascade becomes a root, the severity rises to the
        confirm finding's, and title (``confirmed_title``) and remedy are rendered again."""
        if finding.role == "confirm":
            if finding.category in self._confirmed:
                return
            self._confirmed[finding.category] = finding
            targets = [f for f in self.findings if f.category == finding.category and f.role != "confirm"]
        elif finding.category in self._confirmed:
            targets = [finding]
        else:
            return
        confirm = self._confirmed[finding.category]
        for target in targets:
            if id(target) not in self._finding_rule:
                continue  # added from outside (a live stall finding): not the engine's to rewrite
            if target.role == "cascade":
                target.role = "root"
            if SEVERITY_ORDER[confirm.severity] < SEVERITY_ORDER[target.severity]:
                target.severity = confirm.severity
            target.fields[CONFIRMED_BY] = confirm.rule
            target.confidence, target.confidence_note = "certain", ""  # what it lacked is here
            for name, value in confirm.fields.items():
                target.fields.setdefault(CONFIRM_PREFIX + name, value)
            self._render(target)

    # ---- results -------------------------------------------------------------------------

    def root_cause(self) -> Finding | None:
        """The root cause of the log findings (``root_cause.choose``), with the launcher's rank
        for it where its own lines named none (``root_cause.with_rank``)."""
        return with_rank(choose(self.findings, self.hang_suspect), self.findings)

    def hang_suspect(self, timeouts: list[Finding]) -> Finding:
        """With only timeouts, the suspect is the rank that never reached (or never finished)
        the collective the others waited in: ``timeouts[0]`` retitled to name it, or itself."""
        first = timeouts[0]
        reporting: set[int] = set()
        completed: dict[int, float] = {}
        for finding in timeouts:
            for rank, fields in self._occurrences[id(finding)]:
                if rank is None:
                    continue
                reporting.add(rank)
                for name in LAST_COMPLETED_FIELDS:
                    value = fields.get(name, "").lstrip("-")
                    if value.isdigit():
                        number = float(fields[name])
                        completed[rank] = min(number, completed.get(rank, number))
        suspect, reason = None, ""
        if len(completed) >= 2:
            low = min(completed.values())
            laggards = [r for r, v in completed.items() if v == low]
            if len(laggards) == 1 and any(v > low for v in completed.values()):
                suspect = laggards[0]
                reason = f"rank {suspect} completed the fewest collectives (last completed work {low:g})"
        if suspect is None and reporting:
            # A number misread as a rank prefix must not become the suspect: stay in the world.
            missing = sorted(r for r in self.known_ranks - reporting if self.world_size is None or r < self.world_size)
            if missing:
                suspect = missing[0]
                others = ", ".join(map(str, missing))
                reason = f"rank{'s' if len(missing) > 1 else ''} {others} never reported the timeout the others hit: it never reached the collective"
        if suspect is None:
            return first
        fields = dict(first.fields, suspect_rank=str(suspect), suspect_reason=reason)
        remedy = (
            f"Hang: {reason}. Look at what rank {suspect} was doing last (its final lines, a slow "
            f"checkpoint or eval, a data-loader stall, a code path the other ranks did not take).\n" + first.remedy
        )
        title = f"Rank {suspect} stalled; the others timed out waiting ({first.title})"
        return replace(first, title=title, rank=suspect, fields=fields, remedy=remedy, ranks=list(first.ranks),
                       evidence=list(first.evidence), rank_source="hang")

    def diagnosis(self, files) -> Diagnosis:
        """The diagnosis so far (call ``flush()`` first to include records still in progress)."""
        root = self.root_cause()
        level, note = confidence(root)
        return Diagnosis(
            root_cause=root, findings=sorted(self.findings, key=lambda f: f.seq),
            files=list(files), problems=list(self.problems), confidence=level, confidence_note=note,
        )


def _record_rank_source(record: Record) -> str:
    """What gave a record its rank: a prefix on its line, or (no prefix) its file's name."""
    if record.rank is None:
        return ""
    if record.rank_from:
        return record.rank_from
    return "prefix" if parse_prefix(record.lines[0].text).rank is not None else "file"


def _record_time(record: Record, positions: list[int]) -> float | None:
    """When a record's occurrence was written: its first line's time, else its matched line's."""
    return parse_timestamp(record.bodies[0]) or parse_timestamp(record.bodies[positions[0]])


def _glued_traceback(body: str) -> int | None:
    """Where a traceback header starts in ``body`` when other text comes before it, else None."""
    at = body.find(records.TRACEBACK_HEADER)
    return at if at > 0 and body[:at].strip() else None


def _is_summary(record: Record) -> bool:
    """A torchelastic ChildFailedError summary, alone or ending torchrun's traceback."""
    return record.kind == "summary" or record.state in ("summary", "done")
