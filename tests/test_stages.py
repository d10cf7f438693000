"""The diagnosis as stages (issue #26): a classifier registered from outside speaks in every
mode, findings handed out never change, and the book keeps no tables keyed by ``id()``."""

from __future__ import annotations

import copy
import io
import dataclasses
import json
import re
import sys
import threading
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.diagnosis import classify
from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.classify import Match
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.diagnosis.engine import Engine
from monitor.model import Finding, LogLine
from monitor.session.headless import watch_headless
from tests.clock_helpers import FakeClock

DIAGNOSIS = Path(__file__).resolve().parents[1] / "monitor" / "diagnosis"


class ToyClassifier:
    """Not shipped: names a made-up library's message, which no rule and no exception reader
    knows, the way a new source of evidence would."""

    fallback = False
    literals = ("TOYLIB quota exceeded",)

    def __init__(self, catalogue) -> None:
        self.catalogue = catalogue

    def classify(self, record) -> list[Match]:
        for index, body in enumerate(record.bodies):
            if "TOYLIB quota exceeded" in body:
                used = body.rsplit(" ", 1)[-1]
                return [Match(
                    key=("toy-quota",), rule="toy-quota", category="disk_full", severity="error", role="root",
                    title="TOYLIB quota exceeded on rank {rank}", remedy="Raise the TOYLIB quota (used {used}).",
                    record=record, positions=(index,), rank=record.rank, rank_source="prefix",
                    fields={"used": used}, evidence=(index,),
                )]
        return []


@pytest.fixture
def toy():
    classify.register(ToyClassifier)
    yield
    classify.unregister(ToyClassifier)


# Far from the start of the file (past the lines every reader reads), so the fast path must
# find the literal itself.
LOG = "".join(f"[rank0]: step {i} loss 1.{i % 10}\n" for i in range(5000)) + "[rank2]: TOYLIB quota exceeded 93%\n"


def test_a_registered_classifier_speaks_in_diagnose(toy, tmp_path):
    log = tmp_path / "train.log"
    log.write_text(LOG)
    root = diagnose_paths([log], load_catalogue(include_user=False)).root_cause
    assert root is not None and root.rule == "toy-quota" and root.rank == 2
    assert root.title == "TOYLIB quota exceeded on rank 2" and "93%" in root.remedy
    assert root.line == 5001


def test_a_registered_classifier_speaks_in_watch_headless(toy, tmp_path):
    (tmp_path / "train.log").write_text(LOG)
    out = io.StringIO()
    stop = threading.Event()
    threading.Timer(2.0, stop.set).start()
    code = watch_headless([str(tmp_path)], load_catalogue(include_user=False), out=out, stop=stop)
    assert code == 1 and "TOYLIB quota exceeded on rank 2" in out.getvalue()


def test_a_registered_classifier_speaks_in_run(toy, tmp_path, capsys):
    script = "import sys; print('[rank1]: TOYLIB quota exceeded 97%', flush=True); sys.exit(3)"
    assert main(["run", "--log-dir", str(tmp_path), "--", sys.executable, "-c", script]) == 3
    (report,) = tmp_path.glob("run-*.diagnosis.json")
    root = json.loads(report.read_text())["root_cause"]
    assert root["rule"] == "toy-quota" and root["rank"] == 1 and "97%" in root["remedy"]
    assert "TOYLIB quota exceeded on rank 1" in capsys.readouterr().err  # the end report


def test_without_registration_the_line_is_nobody_s(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(LOG)
    assert diagnose_paths([log], load_catalogue(include_user=False)).root_cause is None


def test_a_finding_handed_out_never_changes_afterwards():
    """Each later line changes what the book holds (another rank, the launcher's pid for a
    SIGKILL, a confirmation, a time written later, an advice condition met): the findings
    handed out before stay as they were, and a change is a new value with the same id."""
    engine = Engine(load_catalogue(include_user=False))
    lines = [
        "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.12 GiB is free.",
        "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.15 GiB of which 1.10 GiB is free.",
        "W1121 10:40:02.118 torch/distributed/elastic/multiprocessing/api.py:890] Sending process 4242 closing signal SIGTERM",
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 3, in <module>',
        "ValueError: bad batch",
        "2024-11-21 10:40:05 step 9",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.",
    ]
    handed: list[tuple] = []
    for number, text in enumerate(lines, 1):
        for finding in engine.feed(LogLine("job.log", number, text)):
            handed.append((finding, copy.deepcopy(finding)))
        for finding in engine.findings:
            handed.append((finding, copy.deepcopy(finding)))
    for finding in engine.flush():
        handed.append((finding, copy.deepcopy(finding)))
    assert len({f.id for f, _ in handed}) >= 3
    for finding, then in handed:
        assert finding == then, finding.id
    oom = next(f for f in engine.findings if f.rule == "cuda-oom")
    assert oom.ranks == [1, 3, 5] and oom.count == 3  # the book holds the newest value
    first = next(f for f, _ in handed if f.rule == "cuda-oom")
    assert first.count == 1 and first.id == oom.id
    with pytest.raises(dataclasses.FrozenInstanceError):
        oom.rank = 9


def test_no_table_of_the_diagnosis_is_keyed_by_id():
    """Per-finding state lives in the book's entries, keyed by the match's key."""
    for path in DIAGNOSIS.glob("*.py"):
        assert not re.search(r"(?<![\w.])id\(", path.read_text()), path.name



def test_a_session_reports_findings_new_changed_and_cleared(tmp_path):
    """A real file growing: rank 3's OOM is new; rank 5's is the same finding, changed (count
    2), posted once; a metric signal posted again replaces its value instead of adding one; the
    stall that output ended is cleared."""
    from dataclasses import replace

    session, step = _session(tmp_path)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    for index in range(5):
        step(f"[rank3]: step {index}", f"[rank5]: step {index}")
    first = step(f"[rank3]: {oom}", "[rank3]: step 6")
    (new,) = [f for f in first.new_findings if f.rule == "cuda-oom"]
    assert new.ranks == [3] and first.changed == []
    second = step(f"[rank5]: {oom}", "[rank5]: step 6")
    assert not [f for f in second.new_findings if f.rule == "cuda-oom"]
    (changed,) = second.changed
    assert changed.id == new.id and changed.ranks == [3, 5] and changed.count == 2
    assert new.count == 1  # the value handed out before is unchanged

    signal = Finding(rule="metrics-host-memory-near-full", category="host_oom", severity="warning", role="root",
                     title="host memory 91% used", origin="metrics", source_key="signal:('host_memory',)")
    session.post([signal])
    (held,) = [f for f in step().new_findings if f.origin == "metrics"]
    session.post([replace(signal, title="host memory 97% used", count=2)])
    update = step()
    assert not update.new_findings and [f.title for f in update.changed] == ["host memory 97% used"]
    assert [f.id for f in session.findings if f.origin == "metrics"] == [held.id]



def test_a_session_reports_a_stall_that_output_ended_as_cleared(tmp_path):
    session, step = _session(tmp_path)

    for index in range(5):
        step(f"[rank0]: step {index}", f"[rank1]: step {index}")
    (stall,) = [f for f in step(advance=5.0).new_findings if f.rule == "possible-hang"]
    resumed = step("[rank0]: step 5", "[rank1]: step 5")
    assert resumed.cleared == [stall.id]
    assert stall.id not in {f.id for f in session.findings}
    # What stays is a note of it (a new finding), not the stall.
    assert [f.rule for f in resumed.new_findings] == ["possible-hang-passed"]


def _session(tmp_path):
    """A job session on a real file, its clock moved by the test: (session, step), where
    ``step(*lines, advance=0.1)`` appends the lines, moves the clock and steps the session."""
    from monitor.session.job_session import JobSession

    log = tmp_path / "job.log"
    log.touch()
    clock = FakeClock(wall=5000.0)
    session = JobSession([str(log)], load_catalogue(include_user=False), stall_after=0.5, clock=clock)

    def step(*lines: str, advance: float = 0.1):
        if lines:
            with open(log, "a") as handle:
                handle.write("".join(line + "\n" for line in lines))
        clock.advance(advance)
        return session.step(timeout=0)

    return session, step
