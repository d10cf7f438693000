"""The table of log formats (``formats.toml`` beside this module), compiled once.

Prefixes (``logs/ranks.py``), times (``diagnosis/timestamps.py``), levels (the screen, new
lines), rank tags inside a line, the lines that start a new message (``diagnosis/records.py``)
and how progress is printed (``progress/parse.py``) all read their patterns from here; ``monitor rules test`` (``diagnosis/ruletest.check_formats``)
runs every entry's samples through the functions that use it, so a format and its examples
cannot drift apart.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import regex

FORMATS_FILE = Path(__file__).with_name("formats.toml")
NUMBER_KINDS = ("rank", "local", "pid")


@dataclass(frozen=True, slots=True)
class Prefix:
    name: str
    number: str  # what its group ``n`` holds: NUMBER_KINDS
    pattern: str


@dataclass(frozen=True, slots=True)
class Lead:
    name: str
    # "text": it stays in the line's text; "stream": its host names the stream; "nothing"; "header":
    # a logger's head on every line of a message, taken with or without a prefix before or after it.
    keeps: str
    first: str  # "stamp" (a digit or "[") | "alpha" | "quote" (">") | "table" ("|" or a space) | "backtick": what its first character is (a cheap test before the regex)
    pattern: regex.Pattern


@dataclass(frozen=True, slots=True)
class Timestamp:
    name: str
    pattern: regex.Pattern
    anchored: bool


def _load() -> dict:
    with open(FORMATS_FILE, "rb") as stream:
        return tomllib.load(stream)


TABLE = _load()

@dataclass(frozen=True, slots=True)
class PrefixTable:
    """Every prefix as one alternation, each entry's group ``n`` renamed ``n<i>`` (so a match's
    ``lastgroup`` says which entry matched), and what each such group's number is."""
    pattern: regex.Pattern
    kinds: dict[str, str]


def prefix_table(prefixes: tuple[Prefix, ...]) -> PrefixTable:
    return PrefixTable(
        regex.compile("^(?:" + "|".join(p.pattern.replace("(?P<n>", f"(?P<n{i}>") for i, p in enumerate(prefixes)) + ")"),
        {f"n{i}": p.number for i, p in enumerate(prefixes)},
    )


PREFIXES = tuple(Prefix(e["name"], e["number"], e["pattern"]) for e in TABLE["prefix"])
PREFIX_TABLE = prefix_table(PREFIXES)
LEADS = tuple(Lead(e["name"], e["keeps"], e["first"], regex.compile(e["pattern"])) for e in TABLE["lead"])
HEADERS = tuple(lead for lead in LEADS if lead.keeps == "header")
# Every prefix, and every lead, as one alternation without their groups: for finding where lines
# start (a region's prefixes in bulk, a wrapped line's continuation), not for reading them.
PREFIX_ALTERNATION = "|".join(p.pattern.replace("(?P<n>", "(?:") for p in PREFIXES)
LEAD_ALTERNATION = "|".join(lead.pattern.pattern.replace("(?P<host>", "(?:") for lead in LEADS)
STREAMS = tuple((e["literal"], regex.compile(e["pattern"])) for e in TABLE["stream"])
RANK_TAG = regex.compile("|".join(f"(?:{e['pattern']})" for e in TABLE["rank_tag"]))
TIMESTAMPS = tuple(Timestamp(e["name"], regex.compile(e["pattern"]), e.get("anchored", False)) for e in TABLE["timestamp"])
LEVELS = tuple((e["name"], regex.compile(e["pattern"])) for e in TABLE["level"])
MESSAGE_START = regex.compile("^(?:" + "|".join(f"(?:{e['pattern']})" for e in TABLE["message_start"]) + ")")
# IPython's traceback header (IPython/core/ultratb.py): the exception's type, then "Traceback (most
# recent call last)" padded to its 75 columns, no colon. The records read it (diagnosis/records.py),
# and the unwrapper must not take the padded line for a terminal's cut (logs/unwrap.py).
NOTEBOOK_HEADER = r"(?P<type>[A-Za-z_][\w.]*)\s+Traceback \(most recent call last\)"


def progress_patterns() -> dict[str, regex.Pattern]:
    """How progress is printed, by name (``progress/parse.py`` compiles them when it is first
    imported: ``diagnose`` reads no progress and does not pay for the compile)."""
    number = TABLE["progress_number"]["pattern"]
    return {e["name"]: regex.compile(e["pattern"].replace("{number}", number),
                                     regex.IGNORECASE if e.get("ignore_case", True) else 0)
            for e in TABLE["progress"]}


def line_level(text: str) -> str:
    """``error``, ``warning`` or ``info``: the first level whose pattern the line holds."""
    for name, pattern in LEVELS:
        if pattern.search(text):
            return name
    return "info"


KINDS = ("prefix", "lead", "stream", "rank_tag", "timestamp", "level", "message_start", "progress")


def entry_count() -> int:
    return sum(len(TABLE[kind]) for kind in KINDS)


def sample_count() -> int:
    return sum(len(entry.get("samples", [])) for kind in KINDS for entry in TABLE[kind]) + len(TABLE["progress_sample"])
