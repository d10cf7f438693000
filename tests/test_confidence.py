"""Every finding and the root cause say how sure they are (`confidence`: certain, likely, weak) and,
when not certain, the evidence that is missing: in `diagnose`'s text and JSON. Real recorded jobs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from diagnosis_helpers import diagnose_run

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def _diagnose(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return diagnose_run(str(path), *extra)


def _root(path: Path) -> dict:
    return json.loads(_diagnose(path, "--json").stdout)["root_cause"]


@pytest.mark.parametrize(("sample", "rule", "level", "note_has"), [
    # A library's own message, matched by a rule.
    ("documented/cuda-oom-srun-torch113.out", "cuda-oom", "certain", ""),
    # An exception no rule names: the category comes from the traceback's form alone.
    ("demo/crash-2ranks.log", "python-exception", "likely", "no rule names ValueError"),
    # A SIGKILL with no OOM-kill line beside it: the rule itself says it is not certain.
    ("demo/sigkill-2ranks.log", "sigkill", "likely", "no OOM-kill line confirms it"),
    # Only timeouts: the rank that hung is inferred.
    ("demo/hang-gloo-2ranks.log", "gloo-timeout", "likely", "only timeouts"),
])
def test_the_root_cause_says_how_sure_it_is(sample: str, rule: str, level: str, note_has: str) -> None:
    root = _root(SAMPLES / sample)
    assert (root["rule"], root["confidence"]) == (rule, level)
    assert note_has in root["confidence_note"]
    assert bool(root["confidence_note"]) == (level != "certain")


def test_a_launchers_report_alone_is_weak(tmp_path: Path) -> None:
    """torchrun's summary without the worker's own traceback (the worker's output went elsewhere)."""
    lines = (SAMPLES / "demo/crash-2ranks.log").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "failed (exitcode: -6)" in line)
    log = tmp_path / "launcher-only.log"
    log.write_text("".join(lines[start:]))
    root = _root(log)
    assert root["category"] == "launcher" and root["confidence"] == "weak"
    assert "only a launcher's report" in root["confidence_note"]
    text = _diagnose(log).stdout
    assert "confidence: weak (only a launcher's report" in text


def test_every_finding_carries_its_own_confidence_and_the_text_marks_the_unsure_ones() -> None:
    out = _diagnose(SAMPLES / "demo/crash-4ranks.log", "--json")
    findings = json.loads(out.stdout)["findings"]
    assert all(f["confidence"] in ("certain", "likely", "weak") for f in findings)
    by_rule = {f["rule"]: f for f in findings}
    assert by_rule["python-exception"]["confidence"] == "likely"
    assert by_rule["torchrun-child-failed"]["confidence"] == "certain"
    text = _diagnose(SAMPLES / "demo/crash-4ranks.log").stdout
    assert "confidence: likely (no rule names" in text


def test_an_oom_kill_line_makes_a_sigkill_certain(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "E1121 10:10:35.677000 11486 api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 11498) of binary: python\n"
        "[Thu Nov 21 10:10:35 2026] Out of memory: Killed process 11498 (python) total-vm:91234567kB, "
        "anon-rss:81234567kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:160000kB oom_score_adj:0\n")
    root = _root(log)
    assert root["category"] == "host_oom" and root["confidence"] == "certain" and root["confidence_note"] == ""


def test_the_screens_detail_pane_says_how_sure_a_finding_is() -> None:
    from monitor.model import Finding
    from monitor.tui.findings_panel import describe

    unsure = Finding(rule="python-exception", category="python_exception", severity="error", role="root",
                     title="ValueError on rank 1", confidence="likely",
                     confidence_note="no rule names ValueError: the category is read from its uncaught traceback alone")
    assert "confidence: likely (no rule names ValueError" in describe(unsure, True, "+00:03").plain
    sure = Finding(rule="cuda-oom", category="cuda_oom", severity="error", role="root", title="CUDA out of memory")
    assert "confidence" not in describe(sure, True, "+00:03").plain


def test_a_ranks_own_setup_error_in_a_timeout_category_is_certain_and_beats_later_errors(tmp_path: Path) -> None:
    # gloo/transport/tcp/device.cc: GLOO_ENFORCE(ifa != nullptr, "Unable to find address for: ", iface)
    # on rank 1; rank 0 then fails to connect and raises; rank 0's later ValueError is a consequence.
    log = tmp_path / "job.log"
    log.write_text(
        "[rank1]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/device.cc:83] ifa != nullptr. "
        "Unable to find address for: eth1\n"
        "[rank0]: RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/work/train.py", line 40, in <module>\n'
        "[rank0]:     raise ValueError('no peers')\n"
        "[rank0]: ValueError: no peers\n")
    root = _root(log)
    assert (root["rule"], root["rank"], root["confidence"]) == ("gloo-device-address", 1, "certain")


def test_the_hang_suspect_and_what_is_missing_are_said_in_chinese() -> None:
    out = _diagnose(SAMPLES / "demo/hang-gloo-2ranks.log", "--lang", "zh", "--json")
    root = json.loads(out.stdout)["root_cause"]
    assert root["title"].startswith("rank 1 卡住了；其他 rank 等它等到了超时")
    assert root["confidence_note"].startswith("只有超时")
    assert root["remedy"].startswith("卡住：rank 1 没有报告其他 rank 遇到的超时") and "Hang:" not in root["remedy"]
    english = json.loads(_diagnose(SAMPLES / "demo/hang-gloo-2ranks.log", "--json").stdout)["root_cause"]
    assert english["title"].startswith("Rank 1 stalled; the others timed out waiting")
    assert english["remedy"].startswith("Hang: rank 1 never reported the timeout the others hit")
