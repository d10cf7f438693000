"""What is new since the last good run: the lines of a failed run whose *template* (the line with
its numbers, hex, paths, addresses and durations masked) no run that ended well printed.

L4 (FSE 2025, 428 LLM-training failures) found such lines to be the failure-indicating ones; an
engineer finds them by hand by diffing the failed log against the last one that worked. Here:

- ``templates_of(paths)``: a run's template set, bounded (``MAX_TEMPLATES``). A first pass works
  on bytes at C speed: every digit becomes ``0`` and the distinct lines are kept in a set, so a
  100 MB log of step lines collapses to a few thousand; only those are masked further in Python.
- ``new_lines(paths, good)``: the failed run's lines whose template is not in ``good``, in the
  order they were printed, each with its rank, level and how often it came.
- A run's set is saved beside its log (``run-X.templates``: one template a line, under 1 MB) by
  ``monitor run``, and read back instead of the log when it is there.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import regex

from monitor.formats import line_level
from monitor.logs.ranks import parse_prefix
from monitor.model import Category, Diagnosis, Finding

MAX_TEMPLATES = 20_000
MAX_TEMPLATE_CHARS = 300
CHUNK = 4 * 1024 * 1024
# What is read of one run: its first bytes of each file and no more than this in all.
MAX_RUN_BYTES = 2 * 1024 * 1024 * 1024
MAX_NEW = 200
RULE_ID = "new-since-good-run"
TEMPLATES_SUFFIX = ".templates"
_DIGITS = bytes.maketrans(b"123456789", b"000000000")
# In the order they are masked: a longer, more specific shape before the numbers inside it.
_MASKS = (
    (regex.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", regex.I), "<uuid>"),
    (regex.compile(r"\b0x[0-9a-f]+\b", regex.I), "<hex>"),
    (regex.compile(r"\b[0-9a-f]{12,}\b", regex.I), "<hex>"),
    (regex.compile(r"(?:[\w.-]*/)+[\w.-]+"), "<path>"),
    (regex.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<addr>"),
    (regex.compile(r"\b\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (regex.compile(r"\b[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+"), "<time>"),
    (regex.compile(r"\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b"), "<time>"),
    (regex.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?:\s?(?:[KMGT]i?B|ms|us|s|%))?", regex.I), "<n>"),
)
_SPACE = regex.compile(r"\s+")
_WORD = regex.compile(r"[A-Za-z]{2}")


@dataclass(frozen=True, slots=True)
class NewLine:
    template: str
    text: str
    file: str
    line: int
    rank: int | None
    count: int
    level: str  # error | warning | info

    def to_json(self) -> dict:
        return {"template": self.template, "text": self.text, "file": self.file, "line": self.line,
                "rank": self.rank, "count": self.count, "level": self.level}


def line_template(text: str) -> str:
    """One line's template: without its rank prefix, numbers and names of things masked."""
    body = parse_prefix(text).body.strip()[:MAX_TEMPLATE_CHARS * 2]
    for pattern, token in _MASKS:
        body = pattern.sub(token, body)
    return _SPACE.sub(" ", body)[:MAX_TEMPLATE_CHARS]


def level(text: str) -> str:
    """``error``, ``warning`` or ``info``, as the screen colours the line (``formats.toml``)."""
    return line_level(text)


def _distinct_lines(paths) -> dict[bytes, None]:
    """Each distinct line of ``paths`` with its digits zeroed, in first-printed order (C speed)."""
    seen: dict[bytes, None] = {}
    budget = MAX_RUN_BYTES
    for path in paths:
        try:
            with open(path, "rb") as stream:
                rest = b""
                while budget > 0 and (chunk := stream.read(min(CHUNK, budget))):
                    budget -= len(chunk)
                    lines = (rest + chunk).translate(_DIGITS).replace(b"\r", b"\n").split(b"\n")
                    rest = lines.pop()
                    seen.update(dict.fromkeys(lines))
                seen[rest] = None
        except OSError:
            continue
    seen.pop(b"", None)
    return seen


def templates_of(paths) -> set[str]:
    """A run's template set (at most ``MAX_TEMPLATES``)."""
    templates: set[str] = set()
    for raw in _distinct_lines(paths):
        templates.add(line_template(raw.decode("utf-8", "replace")))
        if len(templates) >= MAX_TEMPLATES:
            break
    return templates


def new_lines(paths, good: set[str]) -> list[NewLine]:
    """The lines of ``paths`` whose template ``good`` does not hold, first printed first."""
    fresh: dict[str, list] = {}  # template -> [first text, file, line, rank, count, file's place]
    for place, path in enumerate(paths):
        for number, text in _lines(path):
            template = line_template(text)
            if not template or template in good:
                continue
            if (known := fresh.get(template)) is not None:
                known[4] += 1
            elif len(fresh) < MAX_NEW:
                fresh[template] = [text, str(path), number, parse_prefix(text).rank, 1, place]
    ordered = sorted(fresh.items(), key=lambda item: (item[1][5], item[1][2]))
    return [NewLine(template, text, file, line, rank, count, level(text))
            for template, (text, file, line, rank, count, _) in ordered]


def _lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of the lines of ``path`` whose zeroed form is new to this pass: the
    repeated step lines of a big log are skipped at C speed before any Python looks at them."""
    seen: set[bytes] = set()
    number = 0  # lines before this chunk
    budget = MAX_RUN_BYTES
    try:
        with open(path, "rb") as stream:
            rest = b""
            while budget > 0 and (chunk := stream.read(min(CHUNK, budget))) or rest:
                budget -= len(chunk)
                data = rest + chunk
                end = data.rfind(b"\n") + 1 if chunk else len(data)
                data, rest = data[:end], data[end:] if chunk else b""
                keys = data.translate(_DIGITS).split(b"\n")  # one key a line: digits are no newlines
                fresh = set(keys)
                fresh -= seen
                if fresh:
                    seen |= fresh
                    lines = data.split(b"\n")
                    for index in sorted(keys.index(key) for key in fresh):
                        for part in lines[index].decode("utf-8", "replace").split("\r"):
                            if part.strip():
                                yield number + index + 1, part
                number += len(keys) - (1 if data.endswith(b"\n") else 0)
    except OSError:
        return


def save_templates(log_path: Path, templates: set[str]) -> str | None:
    """``run-X.templates`` beside ``run-X.log`` (one template a line); None, or why not."""
    from monitor.files import replace_file

    return replace_file(templates_path(log_path), ("\n".join(sorted(templates)) + "\n").encode())


def templates_path(log_path: Path) -> Path:
    return log_path.with_name(log_path.stem + TEMPLATES_SUFFIX)


def saved_templates(log_path: Path) -> set[str] | None:
    """The saved template set of a run, or None when there is none (or it is not a file)."""
    path = templates_path(log_path)
    try:
        if not path.is_file() or path.stat().st_size > MAX_TEMPLATES * (MAX_TEMPLATE_CHARS + 1):
            return None
        return set(path.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return None


def run_templates(logs: list[Path]) -> set[str]:
    """A good run's templates: its saved set when ``monitor run`` left one, else from its logs."""
    for log in logs:
        if (saved := saved_templates(log)) is not None:
            return saved
    return templates_of(logs)


def compare(diagnosis: Diagnosis, paths, good: set[str], good_name: str, changed: list[str]) -> Diagnosis:
    """``diagnosis`` with what is new since the good run: its new lines (the first lines of
    multi-line messages; their indented continuations are the same news), what changed, and
    where no rule named anything (or only weakly: an exit status, a launcher's report), the first
    new error line (else warning) as the likely cause, never above what a rule is surer of."""
    # Rulers and indented continuations (frames, a summary's fields) are parts of a message already listed.
    fresh = [n for n in new_lines(paths, good)
             if not parse_prefix(n.text).body[:1].isspace() and _WORD.search(n.template)]
    diagnosis = replace(diagnosis, against=good_name, new_lines=[n.to_json() for n in fresh], changes=list(changed))
    if diagnosis.root_cause is not None and diagnosis.confidence != "weak":
        return diagnosis  # what a line the rules know says comes first
    first = next((n for n in fresh if n.level == "error"), None) or next((n for n in fresh if n.level == "warning"), None)
    if first is None:
        return diagnosis
    if diagnosis.root_cause is not None and first.level != "error":
        return diagnosis  # a new warning does not displace an error, however weak
    finding = _finding(first, good_name, changed)
    # The live watch told this line already (``NoveltyWatch``): it is now the root cause instead.
    told = [f for f in diagnosis.findings if not (f.rule == LIVE_RULE and (f.file, f.line) == (first.file, first.line))]
    return replace(diagnosis, root_cause=finding, findings=[*told, finding],
                   confidence=finding.confidence, confidence_note=finding.confidence_note)


def _finding(first: NewLine, good_name: str, changed: list[str]) -> Finding:
    error = first.level == "error"
    remedy = [f"No rule names this failure, but {good_name}, which ended well, never printed a line like it: "
              f"start at {first.file}:{first.line}."]
    if changed:
        remedy.append("Changed since then: " + "; ".join(changed[:6]) + ".")
    return Finding(
        rule=RULE_ID, category=Category.NEW_LINES, severity="error" if error else "warning", role="root",
        title=f"A line the last good run never printed: {first.text.strip()[:120]}",
        rank=first.rank, ranks=[first.rank] if first.rank is not None else [], file=first.file, line=first.line,
        count=first.count, evidence=[first.text], fields={"against": good_name, "template": first.template},
        remedy="\n".join(remedy), confidence="likely" if error else "weak",
        confidence_note=(f"no rule matched: the first {first.level}-level line that {good_name} (which ended well) "
                         "never printed is taken as the cause"),
    )


LIVE_RULE = "new-line"
# A live watch names this many new lines at most: the first ones are the news.
MAX_LIVE = 10
_LEVEL_WORDS = ("rror", "RROR", "xception", "arn", "ARN", "ailed", "FAIL", "atal", "bort", "illed", "raceback")


@dataclass(frozen=True, slots=True)
class Against:
    """The good run a job is compared with: its name, its templates, and what changed since it."""

    name: str
    templates: frozenset[str]
    changes: tuple[str, ...] = ()


class NoveltyWatch:
    """Live: the warning- and error-level lines whose template the good run never printed, each
    once, as an info finding while the job runs (before it dies of what they announce)."""

    def __init__(self, against: Against) -> None:
        self.against = against
        self._told: set[str] = set()

    def observe(self, line) -> Finding | None:
        text = line.text
        if len(self._told) >= MAX_LIVE or not any(word in text for word in _LEVEL_WORDS):
            return None
        body = parse_prefix(text).body
        if body[:1].isspace() or (kind := level(body)) == "info":
            return None
        template = line_template(text)
        if template in self.against.templates or template in self._told:
            return None
        self._told.add(template)
        return Finding(
            rule=LIVE_RULE, category=Category.NEW_LINES, severity="info", role="confirm",
            title=f"New since the last good run ({self.against.name}): {body.strip()[:120]}",
            rank=line.rank, ranks=[line.rank] if line.rank is not None else [], file=line.file, line=line.line,
            evidence=[text], fields={"against": self.against.name, "level": kind},
            remedy=f"{self.against.name} ended well and never printed a {kind} like this one: if the job fails, start here.",
        )
