"""Loading and validating rule files (docs/rules-format.md) into a ``Catalogue``.

Sources, later ones replacing rules of the same id: the shipped catalogue (``rules/`` in a
checkout, ``monitor/rules/`` in the wheel), the user's ``$XDG_CONFIG_HOME/monitor/rules``, then
each ``--rules DIR`` in order. Any problem in a rule file raises ``RuleError`` with a one-line
``file:line: rule <id>: message``: rules that silently never match are worse than no rules.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import regex

from monitor.model import RANK_SOURCES, TIMEOUT_CATEGORIES, Category, Confidence, Role, Severity
from monitor.diagnosis.conditions import Condition, ConditionError
from monitor.diagnosis.advice import ADVICE_FILE, language
from monitor.diagnosis.knobs import KNOBS_FILE, Knob, KnobError, load_registry
from monitor.diagnosis.literals import required_literals, required_sets
from monitor.diagnosis.templates import field_names
from monitor.diagnosis.textfile import read_toml_file

SEVERITIES = ("error", "warning", "info")
# A rule directory's second-opinion model (``monitor rules learn``).
MODEL_FILE = "model.json"
CONFIDENCES = ("certain", "likely", "weak")
ROLES = ("root", "cascade", "confirm")
# Texts a rule may also give in another language (``<key>_<lang>``), shown with ``--lang``.
LANGUAGES = ("en", "zh")
TRANSLATED_KEYS = ("title", "confirmed_title", "remedy")
RULE_KEYS = {
    "id", "category", "severity", "role", "title", "confirmed_title", "patterns", "prefilter", "remedy",
    "advice", "examples", "confidence", "confidence_note", "rank_source", "ranked", "about_others", "if_record", "unless_record", "own_error", "retryable", "waits", "recovers", "distinct", *(f"{key}_{lang}" for key in TRANSLATED_KEYS for lang in LANGUAGES[1:]),
}
REQUIRED_KEYS = ("id", "category", "severity", "role", "title", "patterns")
ADVICE_KEYS = {"text", "when", "unless_log", "if_log", "unless_record", "if_record", "unless_field",
               *(f"text_{lang}" for lang in LANGUAGES[1:])}
EXAMPLE_KEYS = {"match", "no_match"}
# Fields every template may use without a pattern capturing them.
BUILTIN_FIELDS = {"rank", "file", "line", "count", "ranks"}
# Fields a finding gets when a confirm finding of its category confirms it: ``confirmed_by``
# (the confirming rule's id) and ``confirm_<name>`` for each of the confirming finding's fields.
CONFIRMED_BY = "confirmed_by"
CONFIRM_PREFIX = "confirm_"
_ID = regex.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# A named group in a pattern's text (``(?P<name>`` or ``(?<name>``): the fields a rule captures.
_GROUP_NAME = regex.compile(r"\(\?P?<([A-Za-z_]\w*)>")
_LEADING_FLAGS = regex.compile(r"^\(\?([a-zA-Z]+)\)")
# The categories a finding may have (``model.Category``): a typo in a rule's category is an error
# naming the rule file and line.
CATEGORIES = tuple(category.value for category in Category)


class RuleError(Exception):
    """A rule file that cannot be used; ``str()`` is one line: ``file:line: rule <id>: message``."""


@dataclass(frozen=True, slots=True)
class RuleAdvice:
    text: str
    when: Condition | None = None
    # The text in other languages, by language ("zh").
    translations: dict[str, str] = field(default_factory=dict)
    # Shown only when this regex was not / was found in the job's logs read so far.
    unless_log: regex.Pattern | None = None
    if_log: regex.Pattern | None = None
    # Shown only when this regex is not / is in one of the lines of the finding's own record
    # (its traceback): where in the program the error happened.
    unless_record: regex.Pattern | None = None
    if_record: regex.Pattern | None = None
    # Shown only where the finding has a value for none of these fields: advice for the rule's
    # other patterns than those that capture them (PyTorch's advice, not where another framework failed).
    unless_field: tuple[str, ...] = ()


@dataclass(slots=True)
class Rule:
    id: str
    category: str
    severity: Severity
    role: Role
    title: str
    # The patterns' text; compiled on first use (``patterns``): a diagnosis compiles only the rules
    # whose literals a log holds. A user's rules are compiled as they load (their errors located).
    pattern_sources: tuple[str, ...]
    # Literal strings, at least one of which is in any line a pattern can match.
    prefilter: tuple[str, ...]
    # Whether the prefilter literals are compared ignoring case (the patterns use (?i)).
    prefilter_ignore_case: bool
    # Per pattern, the sets of literals its matches must each hold one of (derived; may be
    # empty): checked after the prefilter, so a common prefilter word ("loss") stays cheap.
    conditions: tuple[tuple[frozenset[str], ...], ...] = ()
    remedy: str = ""
    # The title once a confirm finding of the same category confirmed the finding ("": title).
    confirmed_title: str = ""
    advice: tuple[RuleAdvice, ...] = ()
    examples_match: tuple[str, ...] = ()
    examples_no_match: tuple[str, ...] = ()
    source: str = ""
    line: int = 0
    # Title, confirmed title and remedy in other languages: {"zh": {"title": ..., ...}}.
    translations: dict[str, dict[str, str]] = field(default_factory=dict)
    # How sure a match is of its category (``model.Confidence``): a message that other causes
    # print too (a bare SIGKILL) is not ``certain``; ``confidence_note`` says what is missing.
    confidence: Confidence = "certain"
    confidence_note: str = ""
    # What a rank its pattern captures is (``model.RANK_SOURCES``; default "message"): a launcher's
    # summary names the rank it saw fail first, which is not always the first to fail.
    rank_source: str = ""
    # False for a message about the whole job, step or node that a launcher relays under one
    # task's label (srun --label puts the node's first task number on slurmstepd's "*** STEP ...
    # CANCELLED ... ***"): a rank prefix on its line, or a rank in its text, names no rank of it.
    ranked: bool = True
    # True for one process's report about other ranks (XLA's coordinator listing the tasks that
    # stopped sending heartbeats): the prefix on its line, or a rank tag in it, is the reporter's; only
    # a rank its pattern captures is the finding's.
    about_others: bool = False
    # The rule matches only in a record that holds / does not hold this regex in one of its lines:
    # the same words mean another cause in another library's traceback (ENOSPC raised making one of
    # multiprocessing's semaphores is /dev/shm full, not a disk).
    if_record: regex.Pattern | None = None
    unless_record: regex.Pattern | None = None
    # In a timeout category: the rank's own error (a setup failure), not a wait on its peers.
    own_error: bool = False
    # False: `monitor run --max-restarts` does not retry a job this rule explains, whatever its
    # category's policy (a retry meets the same cause: SLURM refusing the step, a rank's CUDA setup).
    retryable: bool = True
    # A message a process prints while it waits for others (a worker for its chief, a host for the
    # rest of its slice): a warning while the job runs; the log of a finished job that ends with it
    # ended waiting there (``conclude.ended_waiting``).
    waits: bool = False
    # The metric whose finite value at its log's end says the run went on past this message (apex's
    # loss scale below 1 followed by finite losses): post-mortem a warning (``conclude.came_back_finite``).
    recovers: str = ""
    # Captured fields whose values tell findings apart: matches that differ in them are separate
    # findings, not occurrences of one (each rank's call site of the collective that timed out).
    distinct: tuple[str, ...] = ()
    compiled: tuple[regex.Pattern, ...] | None = None

    @property
    def patterns(self) -> tuple[regex.Pattern, ...]:
        if self.compiled is None:
            self.compiled = tuple(regex.compile(source) for source in self.pattern_sources)
        return self.compiled

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    def in_language(self, lang: str) -> Rule:
        """This rule with its texts in ``lang`` where it has them (English where not): names,
        variables and commands are the same in both."""
        texts = self.translations.get(lang)
        advice = tuple(replace(a, text=a.translations.get(lang, a.text)) for a in self.advice)
        if not texts and advice == self.advice:
            return self
        # A translation holds only text fields (title, confirmed_title, remedy); mypy checks its
        # str values against every field of Rule.
        return replace(self, **(texts or {}), advice=advice)  # type: ignore[arg-type]


@dataclass
class Catalogue:
    rules: list[Rule]
    # Directories read, in order.
    sources: list[str] = field(default_factory=list)
    # The knobs remedies may name (knobs.toml of every directory read), by name.
    knobs: dict[str, Knob] = field(default_factory=dict)
    # The language of the rules' texts (``LANGUAGES``).
    lang: str = "en"
    # The second opinion's model (``second_opinion.py``): the last rule directory's model.json,
    # or ``--model``; None: the rules alone.
    model_path: str | None = None

    def __post_init__(self) -> None:
        self.by_id = {rule.id: rule for rule in self.rules}
        self._prefilter = None
        self._model: tuple | None = None  # (Model or None, the problem loading it or None), once

    def model(self):
        """(the second opinion's model or None, one line on why it could not be loaded or None),
        loaded on first use: a run that never needs a second opinion never reads it."""
        if self._model is None:
            if self.model_path is None:
                self._model = (None, None)
            else:
                from monitor.diagnosis.second_opinion import ModelError, load_model

                try:
                    self._model = (load_model(self.model_path), None)
                except ModelError as exc:
                    self._model = (None, f"{exc}; the rules alone decide")
        return self._model

    def category_remedies(self) -> dict[str, str]:
        """Each category's remedy in general: its first rule's, without the lines that need a
        log's numbers."""
        from monitor.diagnosis.templates import render

        remedies: dict[str, str] = {}
        for rule in self.rules:
            if rule.severity == "error" and rule.category not in remedies and (text := render(rule.remedy, {})):
                remedies[rule.category] = text
        return remedies

    @property
    def prefilter(self):
        """The Aho-Corasick automaton over this catalogue's literals, built on first use."""
        if self._prefilter is None:
            from monitor.diagnosis.prefilter import Prefilter  # imports this module

            self._prefilter = Prefilter(self)
        return self._prefilter

    def __len__(self) -> int:
        return len(self.rules)


def shipped_rules_dir() -> Path | None:
    """``monitor/rules`` inside an installed wheel, else the checkout's top-level ``rules/``."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "rules", package.parent / "rules"):
        if candidate.is_dir():
            return candidate
    return None


def user_rules_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "monitor" / "rules"


def load_catalogue(extra_dirs=(), include_user: bool = True, include_shipped: bool = True) -> Catalogue:
    """All rules from the shipped catalogue, the user's directory and ``extra_dirs``, their
    texts in the process's language (``advice.language``) where they have them."""
    lang = language()
    dirs: list[Path] = []
    if include_shipped and (shipped := shipped_rules_dir()) is not None:
        dirs.append(shipped)
    if include_user and user_rules_dir().is_dir():
        dirs.append(user_rules_dir())
    for extra in extra_dirs:
        path = Path(extra)
        if not path.exists():
            raise RuleError(f"{path}: no such rules directory")
        if not path.is_dir():
            raise RuleError(f"{path}: not a directory of rule files")
        if not any(path.glob("*.toml")):
            raise RuleError(f"{path}: rules directory holds no *.toml rule file")
        dirs.append(path)
    merged: dict[str, Rule] = {}
    for directory in dirs:
        for rule in load_dir(directory, trusted=directory == shipped_rules_dir()):
            merged.pop(rule.id, None)  # a replacement takes the later place in the order
            merged[rule.id] = rule
    _check_confirmation_fields(list(merged.values()))
    try:
        knobs = load_registry(dirs)
    except KnobError as exc:
        raise RuleError(str(exc)) from None
    rules = [rule.in_language(lang) for rule in merged.values()] if lang != "en" else list(merged.values())
    models = [d / MODEL_FILE for d in dirs if (d / MODEL_FILE).is_file()]
    return Catalogue(rules, [str(d) for d in dirs], knobs, lang, model_path=str(models[-1]) if models else None)


def load_dir(directory: Path, trusted: bool = False) -> list[Rule]:
    """Rules of every ``*.toml`` in ``directory`` (sorted by name) but the knob registry
    (``knobs.toml``); ids must be unique in it. ``trusted``: the shipped catalogue (``_build_rule``)."""
    rules: list[Rule] = []
    seen: dict[str, Rule] = {}
    for path in sorted(p for p in Path(directory).glob("*.toml") if p.name not in (KNOBS_FILE, ADVICE_FILE)):
        for rule in load_file(path, trusted):
            if rule.id in seen:
                raise RuleError(
                    f"{rule.where}: rule {rule.id}: duplicate id (first defined at {seen[rule.id].where})"
                )
            seen[rule.id] = rule
            rules.append(rule)
    return rules


def load_file(path: Path, trusted: bool = False) -> list[Rule]:
    path = Path(path)
    text, data = read_toml_file(path, "rule file", RuleError)
    locator = _Locator(path, text)
    unknown = set(data) - {"rule"}
    if unknown:
        key = sorted(unknown)[0]
        raise RuleError(f"{path}:{locator.key_line(key, 1, len(locator.lines))}: unknown top-level key {key!r} (expected [[rule]] tables)")
    tables = data.get("rule", [])
    if not isinstance(tables, list):
        raise RuleError(f"{path}:1: 'rule' must be an array of tables: write [[rule]]")
    return [_build_rule(table, index, locator, trusted) for index, table in enumerate(tables)]


_RULE_TABLE = regex.compile(r"\s*\[\[\s*rule\s*\]\]")


class _Locator:
    """Finds the line of the n-th ``[[rule]]`` table, and of keys and strings inside it."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.starts = [i + 1 for i, line in enumerate(self.lines) if _RULE_TABLE.match(line)]

    def span(self, index: int) -> tuple[int, int]:
        start = self.starts[index] if index < len(self.starts) else 1
        end = self.starts[index + 1] - 1 if index + 1 < len(self.starts) else len(self.lines)
        return start, end

    def key_line(self, key: str, start: int, end: int) -> int:
        pattern = regex.compile(rf"^\s*(?:\[+\s*(?:rule\.)?)?{regex.escape(key)}\s*(?:=|\]|\.)")
        for number in range(start, end + 1):
            if pattern.search(self.lines[number - 1]):
                return number
        return start

    def text_line(self, needle: str, start: int, end: int, fallback: int) -> int:
        first = needle.strip().splitlines()[0] if needle.strip() else ""
        for number in range(start, end + 1):
            if first and first in self.lines[number - 1]:
                return number
        return fallback


def ignores_case(pattern: str) -> bool:
    """Whether a pattern's leading inline flags ignore case (``(?i)``, ``(?si)``): what its
    compiled flags say, read without compiling it."""
    flags = _LEADING_FLAGS.match(pattern)
    return flags is not None and "i" in flags[1]


def _build_rule(table: dict, index: int, loc: _Locator, trusted: bool = False) -> Rule:
    """``trusted``: the shipped catalogue, whose patterns CI compiles and tests (``monitor rules
    test``): compiled on first use instead of here."""
    start, end = loc.span(index)
    rule_id = table.get("id") if isinstance(table.get("id"), str) else f"#{index + 1}"

    def fail(message: str, line: int | None = None) -> RuleError:
        return RuleError(f"{loc.path}:{line or start}: rule {rule_id}: {message}")

    if not isinstance(table, dict):
        raise fail("each [[rule]] must be a table")
    for key in sorted(set(table) - RULE_KEYS):
        raise fail(f"unknown key {key!r} (allowed: {', '.join(sorted(RULE_KEYS))})", loc.key_line(key, start, end))
    for key in REQUIRED_KEYS:
        if key not in table:
            raise fail(f"missing required key {key!r}")
    for key in ("id", "category", "severity", "role", "title", "confirmed_title", "remedy", "confidence",
                "confidence_note", "rank_source", *(k for k in RULE_KEYS if k.rsplit("_", 1)[-1] in LANGUAGES[1:])):
        if key in table and not isinstance(table[key], str):
            raise fail(f"{key!r} must be a string", loc.key_line(key, start, end))
    if not _ID.match(table["id"]):
        raise fail("id must be lower-case words joined by dashes", loc.key_line("id", start, end))
    if table["category"] not in CATEGORIES:
        close = difflib.get_close_matches(table["category"], CATEGORIES, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(CATEGORIES)})"
        raise fail(f"unknown category {table['category']!r}{hint}", loc.key_line("category", start, end))
    if table["severity"] not in SEVERITIES:
        raise fail(f"severity must be one of {', '.join(SEVERITIES)}", loc.key_line("severity", start, end))
    if table["role"] not in ROLES:
        raise fail(f"role must be one of {', '.join(ROLES)}", loc.key_line("role", start, end))
    for key, default in (("ranked", True), ("about_others", False), ("own_error", False), ("retryable", True),
                         ("waits", False)):
        if not isinstance(table.get(key, default), bool):
            raise fail(f"{key!r} must be true or false", loc.key_line(key, start, end))
    if table.get("waits") and table["severity"] == "error":
        # A warning, or information where every healthy run prints the wait (Lightning's "Initializing
        # distributed" on each rank).
        raise fail("a rule that waits is a warning or information: waiting is no failure until the log ends there",
                   loc.key_line("waits", start, end))
    recovers = table.get("recovers", "")
    if not isinstance(recovers, str) or (recovers and not regex.fullmatch(r"\w+", recovers)):
        raise fail("'recovers' must name one metric as the log writes it (recovers = \"loss\")",
                   loc.key_line("recovers", start, end))
    if recovers and table["category"] != "nan_loss":
        raise fail("'recovers' is for nan_loss rules: a metric finite again says the run went on",
                   loc.key_line("recovers", start, end))
    if table.get("own_error") and table["category"] not in TIMEOUT_CATEGORIES and not table.get("waits"):
        raise fail("own_error marks a rank's own error in a timeout category "
                   f"({', '.join(TIMEOUT_CATEGORIES)}) or a wait of the rank's own making (a prompt): every other "
                   "category's error is its own", loc.key_line("own_error", start, end))
    if "rank_source" in table and table["rank_source"] not in RANK_SOURCES:
        raise fail(f"rank_source must be one of {', '.join(RANK_SOURCES)}", loc.key_line("rank_source", start, end))
    if table.get("confidence", "certain") not in CONFIDENCES:
        raise fail(f"confidence must be one of {', '.join(CONFIDENCES)}", loc.key_line("confidence", start, end))
    if table.get("confidence", "certain") != "certain" and not table.get("confidence_note"):
        raise fail("a rule that is not certain says why in confidence_note", loc.key_line("confidence", start, end))

    raw_patterns = table["patterns"]
    if isinstance(raw_patterns, str):
        raw_patterns = [raw_patterns]
    if not isinstance(raw_patterns, list) or not raw_patterns or not all(isinstance(p, str) for p in raw_patterns):
        raise fail("patterns must be a non-empty list of strings", loc.key_line("patterns", start, end))
    patterns = []
    for raw in raw_patterns if not trusted else ():
        try:
            patterns.append(regex.compile(raw))
        except regex.error as exc:
            raise fail(f"bad pattern {raw!r}: {exc}", loc.text_line(raw, start, end, loc.key_line("patterns", start, end))) from None
    ignore_case = any(ignores_case(raw) for raw in raw_patterns)

    prefilter = table.get("prefilter")
    if prefilter is not None:
        if isinstance(prefilter, str):
            prefilter = [prefilter]
        if not isinstance(prefilter, list) or not prefilter or not all(isinstance(s, str) and s for s in prefilter):
            raise fail("prefilter must be a non-empty list of non-empty strings", loc.key_line("prefilter", start, end))
        if any("\n" in s for s in prefilter):
            raise fail("prefilter strings are matched within one line: no newlines", loc.key_line("prefilter", start, end))
        literals = tuple(dict.fromkeys(prefilter))
    else:
        derived: list[str] = []
        for raw in raw_patterns:
            found = required_literals(raw)
            if not found:
                raise fail(
                    f"cannot derive a literal prefilter from pattern {raw!r}: add prefilter = [...] "
                    "with text that every matching line contains",
                    loc.text_line(raw, start, end, loc.key_line("patterns", start, end)),
                )
            derived.extend(found)
        literals = tuple(dict.fromkeys(derived))

    groups = {name for raw in raw_patterns for name in _GROUP_NAME.findall(raw)}
    known = groups | BUILTIN_FIELDS
    for key in ("title", "confirmed_title", "remedy"):
        unknown = _unknown_fields(field_names(table.get(key, "")), known)
        if unknown:
            raise fail(f"{key} names {{{sorted(unknown)[0]}}} but no pattern captures it", loc.key_line(key, start, end))
    translations: dict[str, dict[str, str]] = {}
    for lang in LANGUAGES[1:]:
        for key in TRANSLATED_KEYS:
            if (text := table.get(f"{key}_{lang}")) is not None:
                _check_translation(table.get(key, ""), text, f"{key}_{lang}", fail, loc.key_line(f"{key}_{lang}", start, end))
                translations.setdefault(lang, {})[key] = text.strip() if key == "remedy" else text

    distinct = table.get("distinct", [])
    if not isinstance(distinct, list) or not all(isinstance(name, str) and name in groups for name in distinct):
        raise fail("'distinct' must list fields the patterns capture (distinct = [\"site\"])", loc.key_line("distinct", start, end))
    advice = tuple(_build_advice(item, n, known, fail, loc, start, end) for n, item in enumerate(_table_list(table.get("advice", []), "advice", fail)))
    if_record = _record_condition(table, "if_record", fail, loc, start, end, what="")
    unless_record = _record_condition(table, "unless_record", fail, loc, start, end, what="")
    match, no_match = _build_examples(table.get("examples", {}), fail, loc, start, end)
    return Rule(
        id=table["id"], category=table["category"], severity=table["severity"], role=table["role"],
        title=table["title"], pattern_sources=tuple(raw_patterns), compiled=tuple(patterns) if not trusted else None,
        prefilter=literals,
        # Explicit prefilter strings are matched as written: their author lists each spelling.
        prefilter_ignore_case=ignore_case and prefilter is None,
        conditions=tuple(tuple(frozenset(s) for s in required_sets(raw)) for raw in raw_patterns),
        remedy=table.get("remedy", "").strip(), confirmed_title=table.get("confirmed_title", ""), advice=advice, examples_match=match,
        examples_no_match=no_match, source=str(loc.path), line=start, translations=translations,
        confidence=table.get("confidence", "certain"), confidence_note=table.get("confidence_note", ""),
        rank_source=table.get("rank_source", ""), ranked=table.get("ranked", True),
        about_others=table.get("about_others", False),
        if_record=if_record, unless_record=unless_record, own_error=table.get("own_error", False),
        retryable=table.get("retryable", True), waits=table.get("waits", False), recovers=recovers,
        distinct=tuple(distinct),
    )


def _check_translation(english: str, text: str, key: str, fail, line: int) -> None:
    """A translated text says the same things: the same fields (a remedy's lines are chosen by
    the fields the log gave, in every language)."""
    if not english:
        raise fail(f"{key} translates a text the rule does not have", line)
    if field_names(text) != field_names(english):
        differ = sorted(field_names(text) ^ field_names(english))
        raise fail(f"{key} must name the same fields as the English text; they differ in {{{differ[0]}}}", line)


def _table_list(value, key: str, fail) -> list:
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise fail(f"{key} must be written as [[rule.{key}]] tables")
    return value


def _build_advice(item: dict, n: int, known: set[str], fail, loc: _Locator, start: int, end: int) -> RuleAdvice:
    line = _nth_line(loc, "[[rule.advice]]", n, start, end)
    for key in sorted(set(item) - ADVICE_KEYS):
        raise fail(f"advice: unknown key {key!r} (allowed: {', '.join(sorted(ADVICE_KEYS))})", loc.key_line(key, line, end))
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        raise fail("advice needs a text", line)
    unknown = _unknown_fields(field_names(text), known)
    if unknown:
        raise fail(f"advice text names {{{sorted(unknown)[0]}}} but no pattern captures it", loc.key_line("text", line, end))
    when = None
    if "when" in item:
        if not isinstance(item["when"], str):
            raise fail("advice when must be a string", loc.key_line("when", line, end))
        try:
            when = Condition(item["when"])
        except ConditionError as exc:
            raise fail(str(exc), loc.key_line("when", line, end)) from None
        unknown = _unknown_fields(when.names, known)
        if unknown:
            raise fail(f"advice when uses {sorted(unknown)[0]!r} but no pattern captures it", loc.key_line("when", line, end))
    unless = _log_condition(item, "unless_log", fail, loc, line, end)
    only_if = _log_condition(item, "if_log", fail, loc, line, end)
    unless_record = _record_condition(item, "unless_record", fail, loc, line, end)
    if_record = _record_condition(item, "if_record", fail, loc, line, end)
    unless_field = item.get("unless_field", [])
    unless_field = [unless_field] if isinstance(unless_field, str) else unless_field
    if not isinstance(unless_field, list) or not all(isinstance(name, str) for name in unless_field) \
            or _unknown_fields(set(unless_field), known):
        raise fail(f"advice unless_field must name fields the rule's patterns capture, not {item['unless_field']!r}",
                   loc.key_line("unless_field", line, end))
    translations = {}
    for lang in LANGUAGES[1:]:
        if (translated := item.get(f"text_{lang}")) is not None:
            if not isinstance(translated, str):
                raise fail(f"advice text_{lang} must be a string", loc.key_line(f"text_{lang}", line, end))
            _check_translation(text, translated, f"advice text_{lang}", fail, loc.key_line(f"text_{lang}", line, end))
            translations[lang] = translated.strip()
    return RuleAdvice(text=text.strip(), when=when, unless_log=unless, if_log=only_if,
                  unless_record=unless_record, if_record=if_record, unless_field=tuple(unless_field),
                  translations=translations)


def _record_condition(item: dict, key: str, fail, loc: _Locator, line: int, end: int, what: str = "advice ") -> regex.Pattern | None:
    """A rule's or an advice's ``unless_record``/``if_record`` regex (searched only in the
    finding's record), or any other advice condition's regex, compiled with its errors located."""
    if key not in item:
        return None
    raw = item[key]
    if not isinstance(raw, str):
        raise fail(f"{what}{key} must be a string", loc.key_line(key, line, end))
    try:
        return regex.compile(raw)
    except regex.error as exc:
        raise fail(f"bad {key} pattern {raw!r}: {exc}", loc.key_line(key, line, end)) from None


def _log_condition(item: dict, key: str, fail, loc: _Locator, line: int, end: int) -> regex.Pattern | None:
    """An advice's ``unless_log``/``if_log`` regex; it needs literal text for the prefilter."""
    pattern = _record_condition(item, key, fail, loc, line, end)
    if pattern is not None and not required_literals(pattern.pattern):
        raise fail(f"{key} pattern {pattern.pattern!r} needs literal text (at least 3 characters)",
                   loc.key_line(key, line, end))
    return pattern


def _unknown_fields(names: set[str], known: set[str]) -> set[str]:
    """Names no pattern captures; confirmation fields are checked once the catalogue is whole."""
    return {n for n in names - known if n != CONFIRMED_BY and not n.startswith(CONFIRM_PREFIX)}


def _confirmation_fields(rule: Rule) -> set[str]:
    texts = [rule.title, rule.confirmed_title, rule.remedy, *(a.text for a in rule.advice)]
    names = set().union(*(field_names(t) for t in texts), *(a.when.names for a in rule.advice if a.when))
    return {n for n in names if n.startswith(CONFIRM_PREFIX)}


def _check_confirmation_fields(rules: list[Rule]) -> None:
    """A ``{confirm_<name>}`` must be captured by a confirm rule of the same category."""
    captured: dict[str, set[str]] = {}
    for rule in rules:
        if rule.role == "confirm":
            names = captured.setdefault(rule.category, set())
            names.update(CONFIRM_PREFIX + name for source in rule.pattern_sources for name in _GROUP_NAME.findall(source))
    for rule in rules:
        unknown = _confirmation_fields(rule) - captured.get(rule.category, set())
        if unknown:
            raise RuleError(
                f"{rule.where}: rule {rule.id}: {{{sorted(unknown)[0]}}} names a field that no confirm rule "
                f"of category {rule.category} captures"
            )


def _nth_line(loc: _Locator, header: str, n: int, start: int, end: int) -> int:
    seen = -1
    compact = header.replace(" ", "")
    for number in range(start, end + 1):
        if loc.lines[number - 1].replace(" ", "").startswith(compact):
            seen += 1
            if seen == n:
                return number
    return start


def _build_examples(value, fail, loc: _Locator, start: int, end: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not isinstance(value, dict):
        raise fail("examples must be a [rule.examples] table")
    line = loc.key_line("examples", start, end)
    for key in sorted(set(value) - EXAMPLE_KEYS):
        raise fail(f"examples: unknown key {key!r} (allowed: match, no_match)", loc.key_line(key, line, end))
    out = []
    for key in ("match", "no_match"):
        items = value.get(key, [])
        if isinstance(items, str):
            items = [items]
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            raise fail(f"examples.{key} must be a list of strings", loc.key_line(key, line, end))
        out.append(tuple(items))
    return out[0], out[1]
