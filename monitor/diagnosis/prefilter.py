"""One Aho-Corasick automaton over every literal the engine cares about.

The literals are the rules' prefilters, the literal text of the advice ``unless_log`` regexes
and the record starters. Used two ways with the same automaton, so both give the same answer:
per line (which rules and unless patterns a line can match) and over big byte chunks (where
the candidate lines are, for the fast path in ``scan.py``).

Rules whose patterns ignore case are prefiltered by a few spellings of their literals: as
written, with the first letter up or down, lower, UPPER, Capitalised and Title Case (an exact
case-insensitive search would need a lowered copy of every chunk, which costs more than the
search itself). Write such literals in their usual spelling; ``rules test`` shows misses.
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

RULE, UNLESS, STARTER, CONTROL = range(4)


def spellings(literal: str, ignore_case: bool) -> set[str]:
    if not ignore_case:
        return {literal}
    first_up = literal[:1].upper() + literal[1:]
    first_low = literal[:1].lower() + literal[1:]
    return {literal, first_up, first_low, literal.lower(), literal.upper(), literal.capitalize(), literal.title()}


class Prefilter:
    def __init__(self, catalogue: Catalogue) -> None:
        self.unless_patterns = []  # regex.Pattern of every distinct unless_log
        self.unless_index: dict[str, int] = {}  # its source text -> its index
        unless_index = self.unless_index
        owners: dict[bytes, set[tuple[int, int]]] = {}

        def add(text: str, owner: tuple[int, int]) -> None:
            owners.setdefault(text.encode("utf-8"), set()).add(owner)

        for index, rule in enumerate(catalogue.rules):
            for literal in rule.prefilter:
                for spelling in spellings(literal, rule.prefilter_ignore_case):
                    add(spelling, (RULE, index))
            for advice in rule.advice:
                pattern = advice.unless_log
                if pattern is None or pattern.pattern in unless_index:
                    continue
                unless_index[pattern.pattern] = len(self.unless_patterns)
                self.unless_patterns.append(pattern)
                ignore_case = bool(pattern.flags & regex.IGNORECASE)
                for literal in required_literals(pattern.pattern) or ():
                    for spelling in spellings(literal, ignore_case):
                        add(spelling, (UNLESS, unless_index[pattern.pattern]))
        for literal in STARTER_LITERALS:
            add(literal, (STARTER, 0))
        self.rule_count = len(catalogue.rules)
        line_literals = list(owners)
        self._owners = [owners[key] for key in line_literals]
        self._line_ac = ahocorasick_rs.BytesAhoCorasick(line_literals)
        # The chunk automaton also finds control bytes; leftmost-first, non-overlapping is
        # enough there: it only has to report some hit inside every candidate line.
        self._chunk_ac = ahocorasick_rs.BytesAhoCorasick(
            line_literals + [b for b in CONTROL_BYTES if b not in owners],
            matchkind=ahocorasick_rs.MatchKind.LeftmostFirst,
        )

    def line_hits(self, text: str) -> tuple[set[int], set[int], bool]:
        """(rule indexes, unless-pattern indexes, whether a starter literal occurs) for a clean line."""
        matches = self._line_ac.find_matches_as_indexes(text.encode("utf-8", "surrogatepass"), overlapping=True)
        rules: set[int] = set()
        unless: set[int] = set()
        starter = False
        for literal, _, _ in matches:
            for kind, index in self._owners[literal]:
                if kind == RULE:
                    rules.add(index)
                elif kind == UNLESS:
                    unless.add(index)
                else:
                    starter = True
        return rules, unless, starter

    def chunk_hits(self, chunk: bytes) -> list[int]:
        """Start offsets, ascending, of literal and control-byte hits in a chunk of raw bytes."""
        return [start for _, start, _ in self._chunk_ac.find_matches_as_indexes(chunk)]
