"""A log line that is a JSON object (structured logging), read as the lines it stands for.

Loggers that write one JSON object a line keep a record's text, its traceback too, in string
fields, their line ends escaped: python-json-logger's ``{"message": ..., "exc_info": "Traceback
(most recent call last):\\n  File ..."}``, structlog's ``event``/``exception``, Docker's json-file
driver's ``{"log": "...\\n", "stream": "stderr", "time": ...}``. Such a line is read as the lines of
its message and then of its exception, each behind the object's time where it is an ISO date and
time and its rank (a ``rank`` field) as a logger writes it, ``[rank <N>] ``: a lead and a prefix
the line's reader takes off again, as for any timed line of a rank (not torch's excepthook's
``[rank<N>]: ``, which says the exception was uncaught: a logger's was caught). Only an object
shaped like a log record is read so: a level or a time beside its text (a dataset sample printed
as JSON, with a "text" field, is no record). Bounded: the line is as long as the reader keeps
lines, its nesting as deep as json allows, and at most ``MAX_PIECES`` lines come out of one.
"""

from __future__ import annotations

import json

from monitor.logs.ranks import parse_prefix
from monitor.model import LogLine

# The fields of the line's text, in the order they are read: the message, then the exception.
MESSAGE_KEYS = ("msg", "message", "event", "log", "text")
EXCEPTION_KEYS = ("exc_info", "exception", "exc_text", "stack_trace", "stack", "traceback")
RANK_KEYS = ("rank", "global_rank", "RANK")
TIME_KEYS = ("ts", "time", "timestamp", "asctime", "@timestamp")
LEVEL_KEYS = ("level", "levelname", "severity", "log_level", "stream")  # Docker's json-file: "stream"
# A rank is a process's number in a job: never this many.
MAX_RANK = 1_000_000
# The most lines one object stands for (a traceback of a deep recursion is cut, as the reader cuts lines).
MAX_PIECES = 4096
# How deep records inside records are read (a JSON logger's record as the "log" of Docker's).
MAX_NESTING = 3


def expanded(line: LogLine, depth: int = 0) -> list[LogLine] | None:
    """The lines ``line`` stands for where it is a JSON log record, whole or after a rank's
    prefix or a time (torchrun --tee's ``[default1]:``, srun --label's ``1: ``), a record inside
    a record read in turn (a logger's record as the "log" of Docker's): each piece behind the
    prefix it came with where the record names no rank of its own (a local rank stays local);
    None where it is no such record."""
    if "{" not in line.text:
        return None
    if may_be_object(line.text):
        outer, body = "", line.text
    else:
        prefix = parse_prefix(line.text)
        if prefix.body is line.text or not may_be_object(prefix.body):
            return None
        # The rank's prefix as written (not a time before it: each piece gets the record's own).
        lead = prefix.lead if line.text.startswith(prefix.lead) else ""
        outer, body = line.text[len(lead):len(line.text) - len(prefix.body)], prefix.body
    record = _record(body)
    if record is None:
        return None
    out: list[LogLine] = []
    for piece in _pieces(record, LogLine(line.file, line.line, body, line.rank), outer):
        inner = expanded(piece, depth + 1) if depth < MAX_NESTING else None
        out += inner if inner is not None else [piece]
    return out[:MAX_PIECES] or None  # a record with no text: the line as it is


def rank_of(text: str, depth: int = 0) -> int | None:
    """The rank field of the JSON log record ``text`` is (whole), or of the record its message
    holds (Docker's around a logger's), without making its lines."""
    record = _record(text) if may_be_object(text) else None
    if record is None:
        return None
    rank = _rank(record)
    if rank is None and depth < MAX_NESTING:
        inner = next((value.strip() for key in MESSAGE_KEYS
                      if isinstance(value := record.get(key), str) and may_be_object(value.strip())), None)
        if inner is not None:
            return rank_of(inner, depth + 1)
    return rank


def may_be_object(text: str) -> bool:
    """The cheap test before a parse: the line is braced."""
    return text[:1] == "{" and text.rstrip()[-1:] == "}"


def _record(text: str) -> dict | None:
    """The JSON object ``text`` holds where it is shaped like a log record: a level beside its text,
    or a time beside a message (a dataset sample printed as JSON, its "text" beside a
    "timestamp", is no record)."""
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    if any(key in record for key in LEVEL_KEYS):
        return record
    if any(key in record for key in TIME_KEYS) and any(isinstance(record.get(key), str) for key in MESSAGE_KEYS[:4]):
        return record
    return None


def _pieces(record: dict, line: LogLine, outer: str = "") -> list[LogLine]:
    """The lines of ``record`` (``line``'s), each behind its time (where the reader takes it for
    one: the leads of ``formats.toml``) and rank: ``[rank <N>] `` where it names one, else
    ``outer`` (the prefix the record was written behind)."""
    texts = [value for key in MESSAGE_KEYS + EXCEPTION_KEYS if isinstance(value := record.get(key), str) and value]
    rank = _rank(record)
    stamp = next((value + " " for key in TIME_KEYS if isinstance(value := record.get(key), str) and _is_lead(value + " ")), "")
    stamp += f"[rank {rank}] " if rank is not None else outer
    out: list[LogLine] = []
    for text in texts:
        for part in text.rstrip("\n").split("\n"):
            if len(out) == MAX_PIECES:
                return out
            out.append(LogLine(line.file, line.line, stamp + part.rstrip("\r"), rank if rank is not None else line.rank))
    return out


def _is_lead(text: str) -> bool:
    """Whether the line's reader takes ``text`` before a line's own text for a lead (a time)."""
    return parse_prefix(text + "x").body == "x"


def _rank(record: dict) -> int | None:
    for key in RANK_KEYS:
        value = record.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str) and value.isdigit() and len(value) < 7:
            value = int(value)
        if isinstance(value, int) and 0 <= value < MAX_RANK:
            return value
    return None
