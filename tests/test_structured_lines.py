"""Structured logging: a line that is a JSON object is read as the lines of its message and its
exception (monitor/logs/structured.py), with its rank and time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.conclude import conclude
from monitor.diagnosis.engine import Engine
from monitor.logs.structured import MAX_PIECES, expanded, may_be_object
from monitor.model import LogLine
from tests.diagnosis_helpers import diagnose_json, diagnosed_root

TRACEBACK = ('Traceback (most recent call last):\n  File "/home/u/train.py", line 9, in main\n    x = rows[i]\n'
             "KeyError: 'label'\n")


def line(obj, number: int = 3) -> LogLine:
    return LogLine("job.log", number, json.dumps(obj), None)


def test_a_json_loggers_line_is_its_message_then_its_exception_behind_its_time_and_rank():
    # "[rank 3] " as a logger writes it: not torch's excepthook's "[rank3]: ", which says uncaught.
    out = expanded(line({"ts": "2024-05-01T10:00:00.123", "level": "ERROR", "rank": 3, "msg": "training failed",
                       "exc_info": TRACEBACK}))
    assert out is not None
    assert [p.text for p in out] == [
        "2024-05-01T10:00:00.123 [rank 3] training failed",
        "2024-05-01T10:00:00.123 [rank 3] Traceback (most recent call last):",
        '2024-05-01T10:00:00.123 [rank 3]   File "/home/u/train.py", line 9, in main',
        "2024-05-01T10:00:00.123 [rank 3]     x = rows[i]",
        "2024-05-01T10:00:00.123 [rank 3] KeyError: 'label'",
    ]
    assert {(p.file, p.line, p.rank) for p in out} == {("job.log", 3, 3)}


def test_dockers_json_file_lines_are_their_log_text():
    out = expanded(line({"log": "RuntimeError: boom\n", "stream": "stderr", "time": "2024-05-01T10:00:00.123456789Z"}))
    assert out is not None and [p.text for p in out] == ["2024-05-01T10:00:00.123456789Z RuntimeError: boom"]


@pytest.mark.parametrize("text", [
    '{"loss": 1.25, "step": 3, "level": "INFO"}',  # a metrics record: no text field
    '{"msg": 3, "level": "INFO"}',                 # a text field that is no text
    '{"text": "Traceback (most recent call last):\\nValueError: x", "label": 1}',  # a dataset sample, no log record
    "[1, 2, 3]",                                   # not an object
    '{"msg": "unterminated, "level": "INFO"}',     # not JSON
    '{"a":' * 50_000 + "1" + "}" * 50_000,         # nested past what json parses
])
def test_what_is_no_json_log_record_stays_the_line_it_is(text):
    assert expanded(LogLine("job.log", 1, text, None)) is None


def test_one_object_stands_for_at_most_max_pieces_lines():
    out = expanded(line({"level": "ERROR", "msg": "\n".join(f"frame {i}" for i in range(MAX_PIECES * 2))}))
    assert out is not None and len(out) == MAX_PIECES


@pytest.mark.parametrize(("value", "rank"), [("12", 12), (3.0, 3), (True, None), (-1, None), (10 ** 9, None), (2.5, None)])
def test_a_rank_field_is_a_whole_number_of_a_job_and_not_a_bool(value, rank):
    assert expanded(line({"level": "INFO", "msg": "x", "rank": value}))[0].rank == rank


def test_only_a_braced_line_is_parsed():
    assert not may_be_object("step 3 {loss: 1}") and may_be_object('{"msg": "x"}  ')


def test_diagnose_reads_an_uncaught_exception_a_json_logger_wrote(tmp_path):
    lines = [json.dumps({"ts": "2024-05-01T10:00:0%d" % i, "rank": i % 2, "msg": f"step {i} loss 1.{i}"}) for i in range(4)]
    lines.append(json.dumps({"ts": "2024-05-01T10:00:05", "rank": 1, "level": "ERROR", "msg": "training failed",
                             "exc_info": TRACEBACK}))
    lines.append("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:2345")
    root = diagnosed_root(tmp_path, "\n".join(lines) + "\n")
    assert root is not None and (root["rank"], root["fields"]["exc_type"]) == (1, "KeyError")


def test_a_json_loggers_exception_of_a_job_that_exited_zero_was_caught(tmp_path):
    # logger.exception() in a retry loop that then succeeded: a logger's record, not torch's
    # excepthook's report of an uncaught exception, so the job's exit 0 makes it a warning.
    log = tmp_path / "run-20240501-100000.log"
    records = [{"ts": "2024-05-01T10:00:01", "level": "ERROR", "rank": 1, "msg": "fetch failed, retrying",
                "exc_info": 'Traceback (most recent call last):\n  File "/home/u/train.py", line 9, in fetch\n'
                            "    return get(url)\nConnectionResetError: [Errno 104] Connection reset by peer"}]
    records += [{"ts": f"2024-05-01T10:00:0{i}", "level": "INFO", "rank": 1, "msg": f"step {i} loss 0.{i}"} for i in range(2, 6)]
    log.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "run-20240501-100000.job.json").write_text(json.dumps({"exit_code": 0}))
    (tmp_path / "run-20240501-100000.meta.json").write_text(json.dumps({"world_size": 2}))
    assert diagnose_json("--no-user-rules", str(log))["root_cause"] is None


def test_the_fast_scan_and_the_line_by_line_reading_know_the_same_ranks_of_a_json_log(tmp_path):
    # Ranks 0-2 in JSON fields only; rank 0 timed out waiting: the rank that never reported is
    # told the same both ways (the fast scan reads the first lines' ranks in bulk).
    records = [{"ts": "2024-05-01T10:00:01", "level": "INFO", "rank": r, "msg": f"rank {r} ready"} for r in range(3)]
    records += [{"ts": "2024-05-01T10:00:30", "level": "ERROR", "rank": r, "msg": "step failed",
                 "exc_info": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
                             "Timed out waiting 30000ms for recv operation to complete"} for r in (0, 1)]
    text = "".join(json.dumps(r) + "\n" for r in records)
    fast = diagnosed_root(tmp_path, text)
    catalogue = load_catalogue(include_user=False)
    engine = Engine(catalogue)
    for number, raw in enumerate(text.splitlines(), start=1):
        engine.feed(LogLine("job.log", number, raw))
    engine.flush()
    slow = conclude(engine.diagnosis(["job.log"]), catalogue, ranks=engine.rank_evidence()).root_cause
    assert fast is not None and slow is not None and (fast["rank"], fast["title"]) == (slow.rank, slow.title) == (2, fast["title"])


KEYERROR = {"ts": "2024-05-01T10:00:06", "level": "ERROR", "msg": "training failed", "exc_info": TRACEBACK}


@pytest.mark.parametrize(("wrap", "rank_field"), [
    (lambda record, rank: f"{rank}: {json.dumps(record)}", False),          # srun --label
    (lambda record, rank: f"[default{rank}]:{json.dumps(record)}", False),  # torchrun --tee
    (lambda record, rank: json.dumps({"log": json.dumps(record) + "\n", "stream": "stderr",
                                      "time": "2024-05-01T10:00:07.000000000Z"}), True),  # Docker's json-file
])
def test_a_json_record_behind_a_rank_prefix_or_inside_dockers_record_is_read(tmp_path, wrap, rank_field):
    # The prefix's rank is the record's where it has none of its own.
    def record(fields, rank):
        return wrap({**fields, "rank": rank} if rank_field else fields, rank)

    lines = [record({"ts": f"2024-05-01T10:00:0{i}", "level": "INFO", "msg": f"step {i}"}, i % 2) for i in range(4)]
    lines.append(record(KEYERROR, 1))
    root = diagnosed_root(tmp_path, "\n".join(lines) + "\n")
    assert root is not None and root["fields"]["exc_type"] == "KeyError" and root["rank"] == 1


def test_training_on_after_a_json_loggers_exception_shows_it_was_caught(tmp_path):
    # No exit code recorded: the log's end, read as the engine reads it, shows steps past it.
    lines = [json.dumps({"ts": f"2024-05-01T10:00:0{i}", "level": "INFO", "rank": 1, "msg": f"step {i} loss 0.{i}"})
             for i in range(1, 4)]
    lines.append(json.dumps({**KEYERROR, "rank": 1, "msg": "batch skipped"}))
    lines += [json.dumps({"ts": f"2024-05-01T10:00:1{i}", "level": "INFO", "rank": 1, "msg": f"step {i} loss 0.{i}"})
              for i in range(4, 9)]
    assert diagnosed_root(tmp_path, "\n".join(lines) + "\n") is None


JSON_LOGS = Path(__file__).parent / "data" / "json_logs"


def test_a_json_record_behind_torchrun_tee_keeps_its_local_rank_for_the_summary_to_map():
    # Written behind "[default1]:" with no rank field; torchrun's summary says rank 9 is local rank 1.
    root = diagnose_json("--no-user-rules", str(JSON_LOGS / "tee-local-rank.log"))["root_cause"]
    assert (root["rank"], root["fields"]["exc_type"]) == (9, "KeyError")


def test_a_loggers_record_inside_dockers_is_read_the_same_fast_and_line_by_line():
    # Docker's json-file records, each holding a JSON logger's record with its rank: ranks 0-2
    # exist, ranks 0 and 1 timed out; both readings (and a file's end) see the inner records.
    log = JSON_LOGS / "docker-nested-timeout.log"
    fast = diagnose_json("--no-user-rules", str(log))["root_cause"]
    catalogue = load_catalogue(include_user=False)
    engine = Engine(catalogue)
    for number, raw in enumerate(log.read_text().splitlines(), start=1):
        engine.feed(LogLine(str(log), number, raw))
    engine.flush()
    slow = conclude(engine.diagnosis([str(log)]), catalogue, ranks=engine.rank_evidence()).root_cause
    assert slow is not None and (fast["rank"], fast["title"]) == (slow.rank, slow.title) == (2, fast["title"])
    # A logger's exception the job trained on after, inside Docker's records: caught.
    assert diagnose_json("--no-user-rules", str(JSON_LOGS / "docker-nested-handled.log"))["root_cause"] is None


def test_a_dataset_sample_with_a_timestamp_is_no_log_record():
    # A C4-style sample ({"text": ..., "timestamp": ..., "url": ...}) printed last, its text a traceback.
    assert diagnose_json("--no-user-rules", str(JSON_LOGS / "dataset-sample-with-timestamp.log"))["root_cause"] is None
