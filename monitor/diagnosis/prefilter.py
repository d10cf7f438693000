"""Aho-Corasick automata over every literal the engine cares about.

Literals: the rules' prefilters (a rule is *triggered* by a line holding one), the literals
each pattern's matches must hold (its *conditions*, checked once triggered: ``loss`` and one of
``nan``/``inf``), the literal text of the advice ``unless_log`` regexes, and the record
starters. Used two ways with the same tables, so both give the same answer: per line (which
rules and unless patterns a line can match) and over big byte chunks (where candidate lines
are, for the fast path in ``scan.py``; the chunk automaton holds only the trigger literals).

Literals derived from patterns that ignore case are searched in a few spellings: as written,
with the first letter up or down, lower, UPPER, Capitalised and Title Case (an exact
case-insensitive search would need a lowered copy of every chunk, which costs more than the
search itself). A rule's explicit ``prefilter`` strings are searched exactly as written.
"""

from __future__ import annotations

import ahocorasick_rs
import regex

from monitor.diagnosis.catalogue import Catalogue
from monitor.diagnosis.literals import required_literals
from monitor.diagnosis.records import STARTER_LITERALS

# Terminal escapes and control bytes: cleaning a line removes them, which can join the text
# around them into a literal, so lines holding any are always candidates in the fast path.
CONTROL_BYTES = [bytes([b]) for b in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)] + [b"\xc2\x9b"]


def spellings(literal: str, ignore_case: bool) -> set[str]:
    if not ignore_case:
        return {literal}
    first_up = literal[:1].upper() + literal[1:]
    first_low = literal[:1].lower() + literal[1:]
    return {literal, first_up, first_low, literal.lower(), literal.upper(), literal.capitalize(), literal.title()}


class Prefilter:
    def __init__(self, catalogue: Catalogue) -> None:
        self.unless_patterns: list[regex.Pattern] = []
        self.unless_index: dict[str, int] = {}  # an unless_log's source text -> its index
        self._ids: dict[bytes, int] = {}
        self._triggers: dict[int, set[int]] = {}  # literal id -> rules it triggers
        self._unless_of: dict[int, set[int]] = {}  # literal id -> unless patterns
        self._starters: set[int] = set()
        # Per rule, per pattern: (literal-id sets each needing one present id, whether the ids
        # are of lowercased literals, looked for in the lowercased line: the pattern ignores case).
        self._conditions: list[list[tuple[tuple[frozenset[int], ...], bool]]] = []
        self._lower_ids: dict[bytes, int] = {}
        chunk_ids: set[int] = set()

        for index, rule in enumerate(catalogue.rules):
            for literal in rule.prefilter:
                for spelling in spellings(literal, rule.prefilter_ignore_case):
                    chunk_ids.add(self._add(spelling, self._triggers, index))
            per_pattern = []
            for pattern, sets in zip(rule.patterns, rule.conditions):
                if pattern.flags & regex.IGNORECASE:
                    ids = tuple(frozenset(self._lower_id(lit) for lit in options) for options in sets)
                    per_pattern.append((ids, True))
                else:
                    per_pattern.append((tuple(frozenset(self._id(lit) for lit in options) for options in sets), False))
            self._conditions.append(per_pattern)
            for advice in rule.advice:
                pattern = advice.unless_log
                if pattern is None or pattern.pattern in self.unless_index:
                    continue
                number = self.unless_index[pattern.pattern] = len(self.unless_patterns)
                self.unless_patterns.append(pattern)
                ignore_case = bool(pattern.flags & regex.IGNORECASE)
                for literal in required_literals(pattern.pattern) or ():
                    for spelling in spellings(literal, ignore_case):
                        chunk_ids.add(self._add(spelling, self._unless_of, number))
        for literal in STARTER_LITERALS:
            ident = self._id(literal)
            self._starters.add(ident)
            chunk_ids.add(ident)

        literals = sorted(self._ids, key=self._ids.get)
        self._line_ac = ahocorasick_rs.BytesAhoCorasick(literals)
        # Leftmost-first, non-overlapping is enough over chunks: it only has to report some
        # hit inside every candidate line.
        self._chunk_ac = ahocorasick_rs.BytesAhoCorasick(
            [literals[i] for i in sorted(chunk_ids)] + CONTROL_BYTES,
            matchkind=ahocorasick_rs.MatchKind.LeftmostFirst,
        )
        self._control = ahocorasick_rs.BytesAhoCorasick(CONTROL_BYTES)
        lower_literals = sorted(self._lower_ids, key=self._lower_ids.get)
        self._lower_ac = ahocorasick_rs.BytesAhoCorasick(lower_literals) if lower_literals else None

    def _lower_id(self, literal: str) -> int:
        return self._lower_ids.setdefault(literal.lower().encode("utf-8"), len(self._lower_ids))

    def _id(self, literal: str) -> int:
        return self._ids.setdefault(literal.encode("utf-8"), len(self._ids))

    def _add(self, literal: str, table: dict[int, set[int]], owner: int) -> int:
        ident = self._id(literal)
        table.setdefault(ident, set()).add(owner)
        return ident

    def hits(self, data: bytes) -> tuple[set[int], set[int], bool]:
        """(rule indexes, unless-pattern indexes, whether a starter literal occurs) for one
        line's bytes: a rule counts when triggered and one of its patterns' conditions hold."""
        present = {ident for ident, _, _ in self._line_ac.find_matches_as_indexes(data, overlapping=True)}
        if not present:
            return set(), set(), False
        triggered: set[int] = set()
        unless: set[int] = set()
        for ident in present:
            if ident in self._triggers:
                triggered |= self._triggers[ident]
            if ident in self._unless_of:
                unless |= self._unless_of[ident]
        rules = set()
        present_lower = None
        for index in triggered:
            for sets, lower in self._conditions[index]:
                if lower and sets and present_lower is None:
                    present_lower = {i for i, _, _ in self._lower_ac.find_matches_as_indexes(data.lower(), overlapping=True)}
                if all(options & (present_lower if lower else present) for options in sets):
                    rules.add(index)
                    break
        return rules, unless, not self._starters.isdisjoint(present)

    def line_hits(self, text: str) -> tuple[set[int], set[int], bool]:
        """``hits`` for a clean line of text."""
        return self.hits(text.encode("utf-8", "surrogatepass"))

    def raw_line_matters(self, raw: bytes) -> bool:
        """Whether a raw line may matter once cleaned: it holds what ``hits`` looks for, or
        control bytes whose removal could join text into a literal."""
        if self._control.find_matches_as_indexes(raw):
            return True
        rules, unless, starter = self.hits(raw)
        return bool(rules or unless or starter)

    def chunk_hits(self, chunk: bytes) -> list[int]:
        """Start offsets, ascending, of trigger, unless, starter and control-byte hits."""
        return [start for _, start, _ in self._chunk_ac.find_matches_as_indexes(chunk)]
