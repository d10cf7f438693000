"""A log pasted as an indented block (Markdown's four spaces, a list item's two) is read at its
own margin: its rank prefixes, tracebacks and exceptions are what they were unindented."""

from __future__ import annotations

from pathlib import Path

from monitor.logs.margin import at_margin, margin_of
from monitor.model import LogLine
from tests.diagnosis_helpers import diagnose_json

RECORDED = Path(__file__).parent / "data" / "recorded_runs"


def test_a_margin_on_every_line_is_found():
    block = b"    [rank0]: Traceback (most recent call last):\n    [rank0]:   File \"t.py\", line 3\n\n" \
            b"    [rank0]: KeyError: 'x'\n    step 3 loss 2.1\n"
    assert margin_of(block) == "    "
    assert margin_of(block.replace(b"\n", b"\r\n")) == "    "
    assert margin_of(b"\tstep 1\n\tstep 2\n\tstep 3\n\tstep 4\n") == "\t"


def test_a_log_s_own_indentation_is_no_margin():
    # A traceback's header and exception are unindented; three lines say nothing of a margin; a
    # traceback's frames alone keep their two spaces (and a code block of them keeps them too).
    assert margin_of(b"Traceback (most recent call last):\n  File \"t.py\", line 3\n    f()\nKeyError: 1\n") == ""
    assert margin_of(b"    a\n    b\n    c\n") == ""
    frames = b"  File \"t.py\", line 3, in f\n    g()\n  File \"t.py\", line 9, in g\n    h()\n"
    assert margin_of(frames) == ""
    assert margin_of(b"".join(b"    " + line + b"\n" for line in frames.splitlines())) == "    "


def test_lines_are_taken_to_their_margin_and_no_further():
    lines = [LogLine("f", 1, "    [rank1]: KeyError: 'x'"), LogLine("f", 2, ""), LogLine("f", 3, "  short")]
    assert [line.text for line in at_margin(lines, "    ")] == ["[rank1]: KeyError: 'x'", "", "  short"]
    # The block ends at its first line without the margin: a traceback after it keeps its frames'.
    after = [LogLine("f", 1, "    step 1"), LogLine("f", 2, "Traceback (most recent call last):"),
             LogLine("f", 3, "    f()")]
    assert [line.text for line in at_margin(after, "    ")] == ["step 1", "Traceback (most recent call last):", "    f()"]


def test_a_real_run_s_log_pasted_as_a_code_block_is_diagnosed_as_the_log(tmp_path):
    log = next((RECORDED / "every-rank-raised").glob("run-*.log"))
    pasted = tmp_path / "issue.log"
    pasted.write_text("".join(f"    {line}" if line.strip() else line
                              for line in log.read_text().splitlines(keepends=True)))
    root, as_pasted = (diagnose_json("--no-user-rules", str(path))["root_cause"] for path in (log, pasted))
    assert as_pasted["title"] == root["title"] and as_pasted["rank"] == root["rank"]
    assert as_pasted["category"] == "python_exception" and as_pasted["fields"]["exc_type"] == "ValueError"
