"""Aho-Corasick automata over every literal the engine cares about.

Literals: the rules' prefilters (a rule is *triggered* by a line holding one), the literal
text of the advice's log conditions (``unless_log``/``if_log`` regexes), the record
starters, and the literals of registered classifiers (``classify.register``). Once triggered, a rule
also needs the literals one of its patterns' matches must hold (its *conditions*: ``loss``
and one of ``nan``/``inf``; plain substring tests, exact for ``(?i)`` on the lowered line). Used two ways with the same tables, so both give the same answer: per line (which
rules and log-condition patterns a line can match) and over big byte chunks (where candidate lines
are, for the fast path in ``scan.py``; the chunk automaton holds only the trigger literals).

Literals derived from patterns that ignore case are searched in a few spellings: as written,
with the first letter up or down, lower, UPPER, Capitalised and Title Case (an exact
case-insensitive search would need a lowered copy of every chunk, which costs more than the
search itself). A rule's explicit ``prefilter`` strings are searched exactly as written.
"""

from __future__ import annotations

import threading
from collections.abc import Set as AbstractSet

import ahocorasick_rs
import regex

from monitor.diagnosis.catalogue import Catalogue, ignores_case
from monitor.diagnosis.classify import registered_literals
from monitor.diagnosis.literals import required_literals
from monitor.diagnosis.records import STARTER_LITERALS

# Terminal escapes and control bytes: cleaning a line removes them, which can join the text
# around them into a literal, so lines holding any are always candidates in the fast path.
CONTROL_BYTES = [bytes([b]) for b in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)] + [b"\xc2\x9b"]
_SINGLE_CONTROLS = b"".join(b for b in CONTROL_BYTES if len(b) == 1)


# What ``hits`` returns for a line holding none of the literals (shared: never mutated).
_NO_HITS: tuple[frozenset[int], frozenset[int], bool] = (frozenset(), frozenset(), False)


def has_control(data: bytes) -> bool:
    """Whether ``data`` holds a byte that cleaning removes (one C pass, no regex)."""
    return len(data.translate(None, _SINGLE_CONTROLS)) != len(data) or b"\xc2\x9b" in data


def spellings(literal: str, ignore_case: bool) -> set[str]:
    if not ignore_case:
        return {literal}
    first_up = literal[:1].upper() + literal[1:]
    first_low = literal[:1].lower() + literal[1:]
    return {literal, first_up, first_low, literal.lower(), literal.upper(), literal.capitalize(), literal.title()}


class Prefilter:
    def __init__(self, catalogue: Catalogue) -> None:
        self.log_patterns: list[regex.Pattern] = []
        self.log_pattern_index: dict[str, int] = {}  # an unless_log/if_log source text -> its index
        self._ids: dict[bytes, int] = {}
        self._triggers: dict[int, set[int]] = {}  # literal id -> rules it triggers
        self._log_pattern_of: dict[int, set[int]] = {}  # literal id -> log-condition patterns
        self._starters: set[int] = set()
        # Per rule, per pattern: (groups of literals, each group needing one in the line; whether
        # they are lowercased and looked for in the lowercased line: the pattern ignores case).
        self._conditions: list[list[tuple[tuple[tuple[bytes, ...], ...], bool]]] = []

        for index, rule in enumerate(catalogue.rules):
            for literal in rule.prefilter:
                for spelling in spellings(literal, rule.prefilter_ignore_case):
                    self._add(spelling, self._triggers, index)
            per_pattern = []
            for source, sets in zip(rule.pattern_sources, rule.conditions):
                lower = ignores_case(source)
                groups = tuple(
                    tuple(sorted((lit.lower() if lower else lit).encode("utf-8") for lit in options))
                    for options in sets
                )
                per_pattern.append((groups, lower))
            self._conditions.append(per_pattern)
            for pattern in (p for advice in rule.advice for p in (advice.unless_log, advice.if_log)):
                if pattern is None or pattern.pattern in self.log_pattern_index:
                    continue
                number = self.log_pattern_index[pattern.pattern] = len(self.log_patterns)
                self.log_patterns.append(pattern)
                ignore_case = bool(pattern.flags & regex.IGNORECASE)
                for literal in required_literals(pattern.pattern) or ():
                    for spelling in spellings(literal, ignore_case):
                        self._add(spelling, self._log_pattern_of, number)
        # A registered classifier's literal makes a line a record of its own, as a starter does.
        self.noted = registered_literals()
        for literal in (*STARTER_LITERALS, *self.noted):
            ident = self._id(literal)
            self._starters.add(ident)

        self._literals = sorted(self._ids, key=self._ids.__getitem__)
        self._line_ac = ahocorasick_rs.BytesAhoCorasick(self._literals, implementation=ahocorasick_rs.Implementation.DFA)
        self._chunk_acs: dict[frozenset[int], tuple[ahocorasick_rs.BytesAhoCorasick, int]] = {}


    def _id(self, literal: str) -> int:
        return self._ids.setdefault(literal.encode("utf-8"), len(self._ids))

    def _add(self, literal: str, table: dict[int, set[int]], owner: int) -> int:
        ident = self._id(literal)
        table.setdefault(ident, set()).add(owner)
        return ident

    def hits(self, data: bytes) -> tuple[AbstractSet[int], AbstractSet[int], bool]:
        """(rule indexes, log-condition pattern indexes, whether a starter literal occurs) for one
        line's bytes: a rule counts when triggered and one of its patterns' conditions hold."""
        matches = self._line_ac.find_matches_as_indexes(data, overlapping=True)
        if not matches:
            return _NO_HITS  # most lines: nothing to allocate
        present = {ident for ident, _, _ in matches}
        triggered: set[int] = set()
        logged: set[int] = set()
        triggers, log_pattern_of = self._triggers, self._log_pattern_of
        for ident in present:
            if ident in triggers:
                triggered |= triggers[ident]
            if ident in log_pattern_of:
                logged |= log_pattern_of[ident]
        rules = set()
        lowered = None
        for index in triggered:
            for groups, lower in self._conditions[index]:
                haystack = data
                if lower:
                    if lowered is None:
                        lowered = data.lower()
                    haystack = lowered
                if all(any(literal in haystack for literal in group) for group in groups):
                    rules.add(index)
                    break
        return rules, logged, not self._starters.isdisjoint(present)

    def triggers(self, data: bytes, rule_index: int) -> bool:
        """Whether one of the rule's prefilter literals occurs in ``data`` (before conditions)."""
        return any(rule_index in self._triggers.get(ident, ())
                   for ident, _, _ in self._line_ac.find_matches_as_indexes(data, overlapping=True))

    def line_hits(self, text: str) -> tuple[AbstractSet[int], AbstractSet[int], bool]:
        """``hits`` for a clean line of text."""
        return self.hits(text.encode("utf-8", "surrogatepass"))

    def raw_line_matters(self, raw: bytes, seen_patterns: frozenset[int] = frozenset(), check_control: bool = True) -> bool:
        """Whether a raw line may matter once cleaned: it holds what ``hits`` looks for (an
        log-condition pattern not seen yet counts), or control bytes whose removal could join text
        into a literal (``check_control=False`` when the caller knows there are none)."""
        if check_control and has_control(raw):
            return True
        rules, logged, starter = self.hits(raw)
        return bool(rules or starter or logged - seen_patterns)

    def chunk_hits(self, chunk, seen_patterns: frozenset[int] = frozenset(),
                   halves: bool = False) -> tuple[list[int], set[int]]:
        """(start offsets, ascending, of trigger, starter and control-byte hits and of log-condition
        literals whose patterns were not seen yet (once seen, the engine no longer looks);
        the offsets of the control-byte hits among them). ``chunk``: bytes or a memoryview.
        ``halves``: search a big chunk's two halves (cut at a line's end) on two threads, for a
        finished file read post-mortem; never while a job runs beside it."""
        if seen_patterns not in self._chunk_acs:
            wanted = [
                literal for ident, literal in enumerate(self._literals)
                if ident in self._triggers or ident in self._starters
                or (self._log_pattern_of.get(ident, set()) - seen_patterns)
            ]
            # Leftmost-first, non-overlapping is enough over chunks: it only has to report
            # some hit inside every candidate line. Control bytes come last: ids >= len(wanted).
            automaton = ahocorasick_rs.BytesAhoCorasick(
                wanted + CONTROL_BYTES, matchkind=ahocorasick_rs.MatchKind.LeftmostFirst,
                implementation=ahocorasick_rs.Implementation.DFA)
            self._chunk_acs[seen_patterns] = (automaton, len(wanted))
        automaton, first_control = self._chunk_acs[seen_patterns]
        cut = _line_end_near_middle(chunk) if halves and len(chunk) >= HALVES_BYTES else None
        if cut is None:
            matches = automaton.find_matches_as_indexes(chunk)
        else:
            # No literal holds a newline, so no match spans the cut. The search lets go of the GIL.
            outcome: list = []  # the first half's matches, or what it raised

            def search_first_half() -> None:
                try:
                    outcome.append(automaton.find_matches_as_indexes(chunk[:cut]))
                except BaseException as exc:  # raised here, in the caller's thread, below
                    outcome.append(exc)

            thread = threading.Thread(target=search_first_half, name="monitor-prefilter", daemon=True)
            thread.start()
            second = automaton.find_matches_as_indexes(chunk[cut:])
            thread.join()
            if isinstance(outcome[0], BaseException):
                raise outcome[0]
            matches = outcome[0] + [(ident, start + cut, end + cut) for ident, start, end in second]
        return [start for _, start, _ in matches], {start for ident, start, _ in matches if ident >= first_control}


# A chunk searched in two halves at least this big (below, a thread's hand-off costs more).
HALVES_BYTES = 1 << 20


def _line_end_near_middle(chunk) -> int | None:
    """The offset just after the first newline within 64 KiB past the chunk's middle, or None."""
    middle = len(chunk) // 2
    newline = bytes(chunk[middle:middle + (64 << 10)]).find(b"\n")
    return None if newline < 0 else middle + newline + 1

