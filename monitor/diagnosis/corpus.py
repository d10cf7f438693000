"""A labelled corpus of real logs (``sample_logs/real/``, or a user's own beside their rule pack):
each case is ``NAME.log``, an excerpt as it was pasted, and ``NAME.toml``, its label from the
thread it came from (the format is in sample_logs/real/README.md). ``load_corpus`` reads and
checks every label, so a typo is one line naming its file and line, never a wrong score.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from monitor.files import read_at_most
from monitor.model import Category

CLEAN = "clean"
# The label of a case nothing failed in, besides the categories a finding can have.
LABELS = (*(c.value for c in Category), CLEAN)
# The corpus's own floor (``rules eval`` fails below it), not a case.
FLOOR_FILE = "floor.toml"
FLOOR_KEYS = {"category_all", "category_check", "rank_all", "rank_check", "clean_flagged"}
STRING_KEYS = ("source", "url", "category", "framework", "format", "confirmed_by")
RANK_KEYS = ("root_rank", "launcher_rank")
REQUIRED_KEYS = ("source", "category")
# Bounds: no corpus decides how much is read (a label is a few lines; an excerpt from a thread
# is at most a few hundred KiB).
MAX_LABEL_BYTES = 64 * 1024
MAX_CASES = 20_000
# The check third: a case is in it when the first byte of the SHA-256 of its source is below
# this (86/256, one in three), decided by the source alone before any rule was written from the
# corpus; adding cases never moves another.
CHECK_BELOW = 86


class CorpusError(Exception):
    """A corpus that cannot be scored as it is; ``str()`` is one line: ``file:line: message``."""


@dataclass(frozen=True, slots=True)
class Case:
    name: str  # the path below the corpus, without its suffix
    log: Path
    label: Path
    source: str
    category: str
    url: str = ""
    root_rank: int | None = None
    launcher_rank: int | None = None
    framework: str = ""
    format: str = ""
    confirmed_by: str = ""

    @property
    def check(self) -> bool:
        """Whether the case is in the check third (no rule is ever written from it)."""
        return in_check_third(self.source)


def in_check_third(source: str) -> bool:
    return hashlib.sha256(source.encode()).digest()[0] < CHECK_BELOW


def load_corpus(folder: Path) -> list[Case]:
    """Every case below ``folder``, by name. Raises CorpusError on the first bad one."""
    if not folder.is_dir():
        raise CorpusError(f"{folder}: not a directory")
    labels: dict[Path, Path] = {}
    logs: dict[Path, Path] = {}
    for path in _files(folder):
        if path.suffix == ".toml" and not (path.name == FLOOR_FILE and path.parent == folder):
            labels[path.with_suffix("")] = path
        elif path.suffix == ".log":
            logs[path.with_suffix("")] = path
    for stem in sorted(logs.keys() - labels.keys()):
        raise CorpusError(f"{logs[stem]}:0: no label {stem.name}.toml beside this case's log")
    for stem in sorted(labels.keys() - logs.keys()):
        raise CorpusError(f"{labels[stem]}:0: no log {stem.name}.log beside this label")
    cases: list[Case] = []
    seen: dict[str, Path] = {}
    for stem in sorted(labels):
        case = _case(folder, labels[stem], logs[stem])
        if case.source in seen:
            raise CorpusError(f"{labels[stem]}:{_key_line(labels[stem], 'source')}: source {case.source!r} "
                              f"is already the case {seen[case.source]} (one case a thread)")
        seen[case.source] = labels[stem]
        cases.append(case)
    return cases


def _files(folder: Path):
    """The regular files below ``folder``, not following links (a link to a parent would loop)."""
    count = 0
    for top, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            path = Path(top, name)
            if path.is_symlink() or not path.is_file():
                continue
            count += 1
            if count > MAX_CASES * 2:
                raise CorpusError(f"{folder}:0: more than {MAX_CASES} cases")
            yield path


def _case(folder: Path, label: Path, log: Path) -> Case:
    raw = read_at_most(label, MAX_LABEL_BYTES)
    if len(raw) > MAX_LABEL_BYTES:
        raise CorpusError(f"{label}:0: a label over {MAX_LABEL_BYTES // 1024} KiB")
    try:
        table = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{label}:0: not UTF-8 ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        line = _toml_error_line(str(exc))
        raise CorpusError(f"{label}:{line}: {str(exc).split(' (at ')[0]}") from None
    known = set(STRING_KEYS) | set(RANK_KEYS)
    for key in sorted(set(table) - known):
        raise CorpusError(f"{label}:{_key_line(label, key)}: unknown key {key!r} (allowed: {', '.join(sorted(known))})")
    for key in REQUIRED_KEYS:
        if key not in table:
            raise CorpusError(f"{label}:0: missing required key {key!r}")
    for key in STRING_KEYS:
        if key in table and not isinstance(table[key], str):
            raise CorpusError(f"{label}:{_key_line(label, key)}: {key!r} must be a string")
    for key in RANK_KEYS:
        if key in table and (type(table[key]) is not int or table[key] < 0):
            raise CorpusError(f"{label}:{_key_line(label, key)}: {key!r} must be a whole number, 0 or more")
    if table["category"] not in LABELS:
        import difflib

        close = difflib.get_close_matches(table["category"], LABELS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f" (allowed: {', '.join(LABELS)})"
        raise CorpusError(f"{label}:{_key_line(label, 'category')}: unknown category {table['category']!r}{hint}")
    if not table["source"].strip():
        raise CorpusError(f"{label}:{_key_line(label, 'source')}: 'source' is empty")
    name = label.relative_to(folder).with_suffix("").as_posix()
    return Case(name=name, log=log, label=label, **table)


def _toml_error_line(message: str) -> int:
    marker = "(at line "
    if marker in message:
        number = message.split(marker, 1)[1].split(",", 1)[0].rstrip(")")
        if number.isdigit():
            return int(number)
    return 0


def _key_line(path: Path, key: str) -> int:
    """The line a top-level ``key = ...`` stands on (0 when not found)."""
    with open(path, "rb") as stream:
        text = stream.read(MAX_LABEL_BYTES).decode("utf-8", "replace")
    for number, line in enumerate(text.splitlines(), 1):
        if line.split("=", 1)[0].strip() == key:
            return number
    return 0


def load_floor(folder: Path) -> dict[str, float]:
    """The corpus's floor (``floor.toml``: the scores CI must not fall below), {} when none."""
    path = folder / FLOOR_FILE
    if not path.is_file():
        return {}
    with open(path, "rb") as stream:
        raw = stream.read(MAX_LABEL_BYTES)
    try:
        table = tomllib.loads(raw.decode("utf-8", "replace"))
    except tomllib.TOMLDecodeError as exc:
        raise CorpusError(f"{path}:{_toml_error_line(str(exc))}: {str(exc).split(' (at ')[0]}") from None
    for key, value in table.items():
        if key not in FLOOR_KEYS:
            raise CorpusError(f"{path}:{_key_line(path, key)}: unknown key {key!r} (allowed: {', '.join(sorted(FLOOR_KEYS))})")
        if type(value) not in (int, float) or not 0 <= value <= (MAX_CASES if key == "clean_flagged" else 1):
            raise CorpusError(f"{path}:{_key_line(path, key)}: {key!r} must be a number from 0 to 1"
                              + (" (a count for clean_flagged)" if key == "clean_flagged" else ""))
    return {key: float(value) for key, value in table.items()}
