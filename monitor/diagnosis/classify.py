"""The classify stage: each completed record to ``Match`` values (docs/architecture.md, "Stages").

A classifier is anything with ``classify(record) -> list[Match]`` and a ``fallback`` flag (a
fallback speaks only about records no classifier before it named). The rule catalogue is one,
the reader of uncaught Python exceptions another; a new source of evidence is one more
classifier, registered with ``register``, never an edit of the engine. A ``Match`` carries all
a finding needs from its classifier (category, title and remedy templates, advice, how sure it
is), so the stages after it know nothing of rules or exceptions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import regex

from monitor.diagnosis import pyexc, records
from monitor.diagnosis.catalogue import RuleAdvice, Catalogue, Rule
from monitor.diagnosis.records import Record
from monitor.logs.ranks import parse_prefix, rank_in_text
from monitor.model import Confidence, Role, Severity

# A pattern that takes longer than this on one line is backtracking catastrophically.
REGEX_TIMEOUT_S = 0.5
MAX_EVIDENCE = 8
# The lines of an exception's message after its first shown with it: torch's load_state_dict names
# the missing and unexpected keys there, Hugging Face its hints.
MESSAGE_EVIDENCE = 4
# Lines after an exception in which a retry announcement says the process caught it.
RETRY_WITHIN = 3
# Shortest terminal width whose wrapped lines are joined again inside a record.
WRAP_WIDTH = 80


@dataclass(frozen=True, slots=True)
class Match:
    """One classifier's reading of one record: the evidence for a finding. Matches with the same
    ``key`` are occurrences of one finding (the same rule on several ranks)."""

    key: tuple
    rule: str  # Finding.rule
    category: str
    severity: Severity
    role: Role
    title: str  # templates (``templates.render``) over the finding's fields
    remedy: str
    record: Record
    positions: tuple[int, ...]  # the record's lines the match rests on, first is the finding's line
    rank: int | None
    rank_source: str  # ``model.RANK_SOURCES``; "" with no rank
    fields: Mapping[str, str]
    evidence: tuple[int, ...]  # the record's lines shown as evidence
    confidence: Confidence = "certain"
    confidence_note: str = ""
    confirmed_title: str = ""  # the title once a confirm finding of its category confirmed it
    advice: tuple[RuleAdvice, ...] = ()
    skipped_advice: frozenset[int] = frozenset()  # advice this record rules out (if/unless_record)
    own_error: bool = False  # ``Rule.own_error``
    about_others: bool = False  # ``Rule.about_others``
    retryable: bool = True  # ``Rule.retryable``
    # The node's local rank a prefix gave, where a summary made ``rank`` the global one ("summary-local").
    local_rank: int | None = None


class Classifier(Protocol):
    # Speaks only about records no classifier before it named.
    fallback: bool
    # Text one of which is in every line it can name on its own (outside a multi-line record):
    # the prefilter makes such lines records, and the fast path skips lines holding none. The
    # built-in classifiers' literals are the rules' prefilters and the record starters.
    literals: tuple[str, ...]

    def classify(self, record: Record) -> list[Match]: ...


# Classifiers added to every engine after the built-in ones: classes made with the catalogue.
_REGISTERED: list[Callable[[Catalogue], Classifier]] = []


def register(kind: type) -> None:
    """Adds a classifier (a class made with the catalogue, with ``fallback``, ``literals`` and
    ``classify``) to every engine whose catalogue is loaded from now on (``diagnose``,
    ``watch``, ``run``)."""
    _REGISTERED.append(kind)


def unregister(kind: type) -> None:
    _REGISTERED.remove(kind)


def registered_literals() -> tuple[str, ...]:
    """The literals of the registered classifiers, for the prefilter."""
    # A registered kind is a class: its literals are a class attribute, which the factory type does not show.
    return tuple(literal for kind in _REGISTERED for literal in kind.literals)  # type: ignore[attr-defined]


def rule_holds(rule, text: str) -> bool:
    """Whether one of ``rule``'s patterns is in ``text``, within the time the classifier gives a
    pattern: a line that takes longer is not that rule's (a log's line is any length)."""
    try:
        return any(pattern.search(text, timeout=REGEX_TIMEOUT_S) for pattern in rule.patterns)
    except TimeoutError:
        return False


def classifiers(catalogue: Catalogue, problems: list[str], regex_timeout: float = REGEX_TIMEOUT_S) -> list[Classifier]:
    """The classifiers of one engine, in the order they are asked."""
    return [RuleClassifier(catalogue, problems, regex_timeout), ExceptionClassifier(catalogue.lang),
            *(factory(catalogue) for factory in _REGISTERED)]


def record_rank_source(record: Record) -> str:
    """What gave a record its rank: a prefix on its line, or (no prefix) its file's name."""
    if record.rank is None:
        return ""
    if record.rank_from:
        return record.rank_from
    prefix = parse_prefix(record.lines[0].text)
    if prefix.rank is None:
        return "file"
    # A node's local rank (torchrun --tee's "[default1]:") that no node map made global.
    return "local-prefix" if prefix.local and prefix.rank == record.rank else "prefix"


def went_on_from(record: Record) -> str:
    """How the process went on from what ``record`` holds ("" where it did not say so): the intro
    before a traceback (``records.HANDLED_INTROS``; tenacity's only for an attempt caught inside its
    call, not the program's own traceback after its last "Retrying" line nor RetryError: the
    attempts ran out: tenacity logs no traceback by default, so one after its last "Retrying" line
    is the program's own, and an attempt's is logged inside tenacity's call, exc_info=True, its
    whole chain), or a one-line record that is such an intro itself (tenacity's "Retrying ... as it
    raised <exception>." names the exception it retries)."""
    if record.kind == "line":
        said = records.intro_of(record.bodies[0])
        how = records.HANDLED_INTROS[said] if said is not None else ""
        return how if how in records.WENT_ON_FROM else ""
    how = records.HANDLED_INTROS[record.handled_by] if record.handled_by else ""
    if how == "retried" and not (_last_traceback_starts_in(record, "tenacity")
                                 and not any("RetryError" in body for body in record.bodies)):
        return ""
    return how


def _last_traceback_starts_in(record: Record, package: str) -> bool:
    """Whether the outermost frame of the record's last traceback (of a chain, the one raised
    last) is in ``package``'s own files."""
    start = max((i for i, body in enumerate(record.bodies) if records.is_traceback_header(body.strip())), default=0)
    frame = next((body for body in record.bodies[start + 1:start + 4] if body.lstrip().startswith('File "')), "")
    return f"{package}/" in frame or f"{package}\\" in frame


def _message_lines(record: Record, index: int) -> tuple[int, ...]:
    """The lines that go on with the exception's message at ``index``, at most ``MESSAGE_EVIDENCE``:
    each indented with a tab, or after a line that ends in ":" (load_state_dict's "Error(s) in
    loading state_dict for Net:" and its tab-indented keys). Not any line after it: a record's
    message runs on into the program's next lines ("step 11 loss 2.39", tqdm's "  4%|...") where no
    prefix tells them apart."""
    more: list[int] = []
    previous = record.bodies[index].rstrip()
    for position in range(index + 1, min(len(record.bodies), index + 1 + MESSAGE_EVIDENCE)):
        body = record.bodies[position]
        stripped = body.strip()
        if not stripped or stripped.startswith(records.CHAIN_LINES) or records.is_traceback_header(stripped) \
                or not (body.startswith("\t") or previous.endswith(":")):
            break
        more.append(position)
        previous = body.rstrip()
    return tuple(more)


def is_summary(record: Record) -> bool:
    """A torchelastic ChildFailedError summary, alone or ending torchrun's traceback."""
    return record.kind == "summary" or record.state in ("summary", "done")


class RuleClassifier:
    """The rule catalogue (``rules/*.toml``): a rule matches where one of its patterns does, on a
    line of the record or on two lines a terminal wrapped."""

    fallback = False
    literals: tuple[str, ...] = ()  # the prefilter holds the rules' own

    def __init__(self, catalogue: Catalogue, problems: list[str], regex_timeout: float = REGEX_TIMEOUT_S) -> None:
        self.catalogue = catalogue
        self.prefilter = catalogue.prefilter
        self.problems = problems
        self.regex_timeout = regex_timeout
        self._disabled: set[int] = set()

    def classify(self, record: Record) -> list[Match]:
        views = self._views(record)
        candidates = sorted(set().union(*(hits for _, _, hits in views)) - self._disabled)
        found = []
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
            if index in self._disabled or not matched or not self._record_allows(rule, record):
                continue
            matched.sort()
            # In a traceback the process printed and went on from (a logging handler's error, a retried
            # attempt), what the rule names happened and stopped nothing: a warning at most.
            went_on = went_on_from(record) in records.WENT_ON_FROM
            severity: Severity = "warning" if went_on and rule.severity == "error" else rule.severity
            role = "cascade" if went_on else rule.role
            rank, source = record.rank, record_rank_source(record)
            if not rule.ranked:
                rank, source = None, ""
            elif "rank" in fields and fields["rank"].isdigit():
                rank, source = int(fields.pop("rank")), rule.rank_source or "message"
            elif rule.about_others:
                rank, source = None, ""
            elif rank is None and (rank := rank_in_text(record.bodies[matched[0]])) is not None:
                source = "message"
            found.append(Match(
                # Its own key: a later uncaught match of the rule is a finding of its own, not merged into this warning.
                key=(rule.id, "went-on" if went_on else "", *(fields.get(name, "") for name in rule.distinct)),
                rule=rule.id, category=rule.category, severity=severity, role=role,
                title=rule.title, remedy=rule.remedy, record=record, positions=tuple(matched), rank=rank,
                rank_source=source, fields=fields, evidence=tuple(matched[:MAX_EVIDENCE]),
                confidence=rule.confidence, confidence_note=rule.confidence_note,
                confirmed_title=rule.confirmed_title, advice=rule.advice,
                skipped_advice=self._advice_skipped_by_record(rule, record), own_error=rule.own_error,
                about_others=rule.about_others,
                retryable=rule.retryable,
            ))
        return found

    def _views(self, record: Record) -> list[tuple[tuple[int, ...], str, set[int]]]:
        """What patterns are tried on: each line of the record, then each pair of lines that a
        terminal wrapped (the first as long as the record's longest line, 80+ characters)."""
        views: list[tuple[tuple[int, ...], str, set[int]]]
        views = [((i,), body, hits) for i, (body, hits) in enumerate(zip(record.bodies, record.rule_hits))]
        if is_summary(record):
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

    def _record_holds(self, rule: Rule, pattern: regex.Pattern, record: Record, what: str) -> bool:
        try:
            return any(pattern.search(body, timeout=self.regex_timeout) for body in record.bodies)
        except TimeoutError:
            self.problems.append(f"{rule.where}: rule {rule.id}: {what} pattern {pattern.pattern!r} "
                                 f"took over {self.regex_timeout:g}s (catastrophic backtracking); taken as not found")
            return False

    def _record_allows(self, rule: Rule, record: Record) -> bool:
        """The rule's own ``if_record``/``unless_record``: whether its match stands in this record."""
        if rule.if_record is not None and not self._record_holds(rule, rule.if_record, record, "if_record"):
            return False
        return rule.unless_record is None or not self._record_holds(rule, rule.unless_record, record, "unless_record")

    def _advice_skipped_by_record(self, rule: Rule, record: Record) -> frozenset[int]:
        """The advice (by index) whose ``if_record``/``unless_record`` rules it out for this record."""
        skipped = set()
        for number, advice in enumerate(rule.advice):
            if advice.if_record is not None and not self._record_holds(rule, advice.if_record, record, "advice record"):
                skipped.add(number)
            elif advice.unless_record is not None and self._record_holds(rule, advice.unless_record, record, "advice record"):
                skipped.add(number)
        return frozenset(skipped)


class ExceptionClassifier:
    """An uncaught Python exception no rule names (``pyexc.py``): a traceback's final exception,
    or an exception's last line standing alone (weaker: it may have been caught)."""

    fallback = True
    literals: tuple[str, ...] = ()  # the record starters (``records.STARTER_LITERALS``)

    def __init__(self, lang: str) -> None:
        self._texts = pyexc.TEXTS.get(lang, pyexc.TEXTS["en"])
        self._ignored = pyexc.IGNORED_TEXTS.get(lang, pyexc.IGNORED_TEXTS["en"])
        self._hook = pyexc.HOOK_TEXTS.get(lang, pyexc.HOOK_TEXTS["en"])
        self._retried = pyexc.RETRIED_TEXTS.get(lang, pyexc.RETRIED_TEXTS["en"])
        self._handled = pyexc.HANDLED_TEXTS.get(lang, pyexc.HANDLED_TEXTS["en"])
        self._logged = pyexc.LOGGED_TEXTS.get(lang, pyexc.LOGGED_TEXTS["en"])
        self._cut = pyexc.CUT_TEXTS.get(lang, pyexc.CUT_TEXTS["en"])
        self._cut_service = pyexc.CUT_SERVICE_TEXTS.get(lang, pyexc.CUT_SERVICE_TEXTS["en"])
        self._launcher = pyexc.LAUNCHER_TEXTS.get(lang, pyexc.LAUNCHER_TEXTS["en"])
        self._launcher_hints = pyexc.LAUNCHER_HINTS.get(lang, pyexc.LAUNCHER_HINTS["en"])
        self._service = pyexc.SERVICE_TEXTS.get(lang, pyexc.SERVICE_TEXTS["en"])
        self._service_advice = pyexc.SERVICE_ADVICE.get(lang, pyexc.SERVICE_ADVICE["en"])

    def classify(self, record: Record) -> list[Match]:
        if record.kind not in ("traceback", "line"):
            return []
        bare = record.kind == "line"
        exception = pyexc.parse_exception_line(record.bodies[0]) if bare else pyexc.parse_traceback(record.bodies)
        if exception is None:
            cut = None if bare or records.is_ignored(record) else pyexc.cut_traceback(record.bodies, not record.followed_by)
            return [] if cut is None else [self._cut_match(record, cut)]
        positions = (exception.index,)
        evidence: tuple[int, ...] = positions
        frame_line = next((i for i, b in enumerate(record.bodies)
                           if exception.frame_file and f'"{exception.frame_file}", line {exception.frame_line}' in b), None)
        if frame_line is not None and frame_line not in positions:
            evidence = (frame_line, *positions)  # where the user's code raised it, first
        evidence += _message_lines(record, exception.index)
        if records.is_ignored(record):
            # Printed by Python on its way on: information, never a cause.
            return [self._went_on(record, exception, "ignored", "info", self._ignored, (0, *evidence))]
        how = "" if bare else went_on_from(record)
        thread = how == "thread"
        if thread:
            how = ""  # uncaught, in a thread: weighed as any uncaught exception, marked so
        if how:
            # The library said, just before, that it handled this and went on; or the program's
            # excepthook failed with it, and the exception it was reporting comes next (the cause).
            if how == "in-excepthook":
                return [self._went_on(record, exception, how, "warning", self._hook, evidence)]
            if how == "ignored":
                return [self._went_on(record, exception, how, "info", self._ignored, evidence)]
            if how == "retried":
                return [self._went_on(record, exception, how, "warning", self._retried, evidence)]
            if how == "logged":
                return [self._went_on(record, exception, how, "warning", self._logged, evidence)]
            return [self._went_on(record, exception, how, "info", self._handled, evidence)]
        # What the process printed next (another rank's lines may come between, unprefixed).
        after = ([record.followed_by] if exception.chained_cut  # past the chain's cut end
                 else [*record.bodies[exception.index + 1:exception.index + 1 + RETRY_WITHIN], record.followed_by][:RETRY_WITHIN])
        if not bare and any(pyexc.announces_retry(line) for line in after):
            # The process went on to retry what raised: a logged, handled exception.
            return [self._went_on(record, exception, "retried", "warning", self._retried, evidence)]
        cascade = exception.is_cascade
        rank, rank_source = record.rank, record_rank_source(record)
        if rank is None and (spawned := exception.spawned_rank(record.followed_by)) is not None:
            rank, rank_source = spawned, "launcher"  # the child the parent's join names
        title, cascade_title, remedy, cascade_remedy, *_ = self._texts
        category: str = pyexc.CATEGORY
        fields = exception.fields()
        if thread:
            named = records.THREAD_INTRO.match(record.intro.strip())
            fields["python_thread"] = named["thread"] if named else "?"
        elif not bare and records.TORCH_EXCEPTHOOK_HEADER.search(record.lines[0].text):
            fields["excepthook"] = "torch"  # surely uncaught: torch's hook printed it
        if exception.launcher and not cascade:
            category, (title, remedy) = "launcher", self._launcher
            fields["launcher"] = exception.launcher
            fields["hint"] = self._launcher_hints[exception.launcher]
        elif exception.service and not cascade:
            shows = pyexc.service_shows(exception.frame_file)
            category, title, remedy = exception.service, self._service["title"], self._service[shows]
            fields["service_advice"] = self._service_advice[
                "code" if exception.short_type in pyexc.SERVICE_CODE_TYPES
                else "usage" if exception.short_type in pyexc.SERVICE_USAGE_TYPES else "service"]
        elif exception.chained_cut:
            remedy = self._texts[7]
        return [Match(
            key=(pyexc.RULE_ID, exception.exc_type, exception.frame_file, exception.frame_line),
            rule=pyexc.RULE_ID, category=category,
            severity="warning" if exception.short_type in pyexc.WARNING_TYPES else "error",
            role="cascade" if cascade else "root",
            title=cascade_title if cascade else title, remedy=cascade_remedy if cascade else remedy,
            record=record, positions=positions, rank=rank, rank_source=rank_source,
            fields=fields, evidence=evidence,
            confidence="weak" if bare or exception.chained_cut else "likely",
            confidence_note=self._texts[8 if exception.chained_cut else 6 if bare else 5].format(type=exception.short_type),
        )]

    def _went_on(self, record: Record, exception: pyexc.PythonException, how: str, severity: Severity,
                 texts: tuple[str, str], evidence: tuple[int, ...]) -> Match:
        """An exception the process went on from (``how``: ignored, handled, retried): no cause."""
        rule = f"{pyexc.RULE_ID}-{how}"
        return Match(
            key=(rule, exception.exc_type, exception.frame_file, exception.frame_line), rule=rule,
            category=pyexc.CATEGORY, severity=severity, role="cascade", title=texts[0], remedy=texts[1],
            record=record, positions=(exception.index,), rank=record.rank, rank_source=record_rank_source(record),
            fields=exception.fields(), evidence=evidence,
        )

    def _cut_match(self, record: Record, cut: pyexc.PythonException) -> Match:
        """A traceback cut before its exception line: something failed there, what the log no
        longer says. Weighed as a report (role cascade): any error a line names comes first."""
        title, remedy = self._cut_service if cut.service else self._cut
        fields = {k: v for k, v in cut.fields().items() if v}
        if cut.service:
            fields["service_advice"] = self._service_advice["service"]  # what it raised is cut
        return Match(
            key=(pyexc.RULE_ID + "-cut", cut.frame_file, cut.frame_line), rule=pyexc.RULE_ID + "-cut",
            category=cut.service or pyexc.CATEGORY, severity="error", role="cascade", title=title, remedy=remedy,
            record=record, positions=(cut.index,), rank=record.rank, rank_source=record_rank_source(record),
            fields=fields, evidence=(cut.index,), confidence="weak",
        )
