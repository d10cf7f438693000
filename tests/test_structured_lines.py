"""Structured logging: a line that is a JSON object is read as the lines of its message and its
exception (monitor/logs/structured.py), with its rank and time."""

from __future__ import annotations

import json

import pytest

from monitor.logs.structured import MAX_PIECES, may_be_object, pieces
from monitor.model import LogLine
from tests.diagnosis_helpers import diagnosed_root

TRACEBACK = ('Traceback (most recent call last):\n  File "/home/u/train.py", line 9, in main\n    x = rows[i]\n'
             "KeyError: 'label'\n")


def line(obj, number: int = 3) -> LogLine:
    return LogLine("job.log", number, json.dumps(obj), None)


def test_a_json_loggers_line_is_its_message_then_its_exception_behind_its_time_and_rank():
    out = pieces(line({"ts": "2024-05-01T10:00:00.123", "level": "ERROR", "rank": 3, "msg": "training failed",
                       "exc_info": TRACEBACK}))
    assert out is not None
    assert [p.text for p in out] == [
        "2024-05-01T10:00:00.123 [rank3]: training failed",
        "2024-05-01T10:00:00.123 [rank3]: Traceback (most recent call last):",
        '2024-05-01T10:00:00.123 [rank3]:   File "/home/u/train.py", line 9, in main',
        "2024-05-01T10:00:00.123 [rank3]:     x = rows[i]",
        "2024-05-01T10:00:00.123 [rank3]: KeyError: 'label'",
    ]
    assert {(p.file, p.line, p.rank) for p in out} == {("job.log", 3, 3)}


def test_dockers_json_file_lines_are_their_log_text():
    out = pieces(line({"log": "RuntimeError: boom\n", "stream": "stderr", "time": "2024-05-01T10:00:00.123456789Z"}))
    assert out is not None and [p.text for p in out] == ["2024-05-01T10:00:00.123456789Z RuntimeError: boom"]


@pytest.mark.parametrize("text", [
    '{"loss": 1.25, "step": 3}',      # a metrics dict: no text field
    '{"msg": 3}',                     # a text field that is no text
    "[1, 2, 3]",                      # not an object
    '{"msg": "unterminated}',          # not JSON
    "{" * 50_000 + "}" * 50_000,      # nested past what json parses
])
def test_what_is_no_json_log_record_stays_the_line_it_is(text):
    assert pieces(LogLine("job.log", 1, text, None)) is None


def test_one_object_stands_for_at_most_max_pieces_lines():
    out = pieces(line({"msg": "\n".join(f"frame {i}" for i in range(MAX_PIECES * 2))}))
    assert out is not None and len(out) == MAX_PIECES


def test_a_rank_field_is_a_whole_number_and_not_a_bool():
    assert pieces(line({"msg": "x", "rank": "12"}))[0].rank == 12
    assert pieces(line({"msg": "x", "rank": True}))[0].rank is None
    assert pieces(line({"msg": "x", "rank": -1}))[0].rank is None
    assert not may_be_object("step 3 {loss: 1}") and may_be_object('{"msg": "x"}  ')


def test_diagnose_reads_an_uncaught_exception_a_json_logger_wrote(tmp_path):
    lines = [json.dumps({"ts": "2024-05-01T10:00:0%d" % i, "rank": i % 2, "msg": f"step {i} loss 1.{i}"}) for i in range(4)]
    lines.append(json.dumps({"ts": "2024-05-01T10:00:05", "rank": 1, "level": "ERROR", "msg": "training failed",
                             "exc_info": TRACEBACK}))
    lines.append("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:2345")
    root = diagnosed_root(tmp_path, "\n".join(lines) + "\n")
    assert root is not None and (root["rank"], root["fields"]["exc_type"]) == (1, "KeyError")
