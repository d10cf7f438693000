"""The text report: where a finding is, and the timeline's order for findings no log line made."""

from __future__ import annotations

from monitor.model import Diagnosis, Finding
from monitor.diagnosis.report import render_text


def finding(rule: str, title: str, file: str, line: int, seq: int, origin: str = "log", **fields: str) -> Finding:
    return Finding(rule=rule, category="launcher", severity="error", role="root", title=title, rank=None,
                   ranks=[], file=file, line=line, count=1, evidence=[], fields=dict(fields), remedy="", seq=seq,
                   origin=origin)


def test_findings_without_a_log_line_show_when_they_happened_and_sort_preflight_first_exit_last():
    # Where a finding came from is its origin (as the runner sets it), not its rule's name.
    exit_ = finding("job-exit", "The job exited with code 1", "run.log", 0, 0, origin="exit", exit_code="1")
    crash = finding("torchrun-worker-failed", "local rank 1 exited", "run.log", 40, 1, exit_code="1")
    preflight = finding("preflight-port", "Port 29500 is taken", "", 0, 2, origin="preflight")
    ckpt = finding("ckpt-watch-bad", "Checkpoint bad", "ckpt/step-10.pt", 0, 3, origin="checkpoint")
    text = render_text(Diagnosis(root_cause=crash, findings=[exit_, crash, preflight, ckpt], files=["run.log"]), width=200)
    timeline = text.split("Timeline", 1)[1].strip().splitlines()
    assert timeline[0].strip() == "before the job started  preflight-port  Port 29500 is taken"
    assert timeline[-1].strip() == "at exit  job-exit  The job exited with code 1"
    assert "run.log:40  torchrun-worker-failed" in text
    assert "ckpt/step-10.pt  ckpt-watch-bad" in text
    assert ":0" not in text and "rank ?" not in text
