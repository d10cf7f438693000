"""A user's second hour (issue 31), what was left: a line cut for its length is said once, with
where and how much (diagnose's text and --json, the screen); at 80x24 the remedy's "start there"
path breaks between folders, the other findings' titles read, and the answers to y, Y, x and s
cover neither the header nor the job's rows nor the root cause."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.text import Text

from monitor.diagnosis.catalogue import load_catalogue
from monitor.model import Finding
from monitor.session.feeds import LogBatch
from monitor.tui.app import MonitorApp
from monitor.tui.findings_panel import FindingsPanel
from monitor.tui.text_format import break_long_paths, fit_words
from tests.tui_helpers import FixedMetricsFeed, ScriptedLogFeed, crash_findings, crash_lines, host_sample, settle
from tests.zone_helpers import in_time_zone

SIZE = (80, 24)
RAISE_SITE = "/home/alice/projects/llm-pretrain/src/llm/training/train.py"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    yield from in_time_zone(monkeypatch, "UTC")


def screen_rows(app) -> list[str]:
    """The screen as the terminal shows it (a toast hides what lies under it)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def long_line_log(tmp_path: Path) -> Path:
    """A rank dumps a 5 MB tensor on one line, later an OOM: the line is cut, the OOM found."""
    log = tmp_path / "train.log"
    with log.open("wb") as out:
        out.write(b"[rank0]: step 1 loss 2.0\n[rank1]: tensor([" + b"0.1234, " * 655_360 + b"])\n")
        out.write(b"[rank0]: step 2 loss 1.9\n[rank0]: torch.OutOfMemoryError: CUDA out of memory. "
                  b"Tried to allocate 2.00 GiB\n")
    return log


# ----- a line cut for its length
LEFT_OUT = 17 + 8 * 655_360 + 2 - 64 * 1024  # "[rank1]: tensor([" + values + "])", less what is kept


def test_diagnose_says_once_which_line_was_cut_and_how_much_was_left_out(tmp_path):
    log = long_line_log(tmp_path)
    text = subprocess.run([sys.executable, "-m", "monitor", "diagnose", str(log)],
                          capture_output=True, text=True, timeout=60).stdout
    assert "CUDA out of memory" in text.split("Other findings")[0]  # still the root cause
    said = [line for line in text.splitlines() if "was cut" in line and "not read" in line]
    assert said and all("train.log" in line for line in said), text
    assert f"Line 2 of train.log was cut: {LEFT_OUT:,} bytes of its middle not read" in said[0]
    data = json.loads(subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--json", str(log)],
                                     capture_output=True, text=True, timeout=60).stdout)
    (note,) = [f for f in data["findings"] if f["rule"] == "line-cut"]
    assert (note["file"], note["line"], note["severity"]) == (str(log), 2, "info")
    assert note["evidence"] == [f"{log}:2: {LEFT_OUT:,} bytes left out"]
    assert data["root_cause"]["rule"] != "line-cut"


@pytest.mark.parametrize("fast", [True, False])
def test_every_line_cut_is_counted_in_one_note_whichever_way_the_file_is_read(tmp_path, fast):
    """The fast scan skips lines no literal marks: a cut one is read all the same."""
    from monitor.diagnosis.diagnose import diagnose_paths

    log = tmp_path / "dump.log"
    with log.open("wb") as out:
        for n in range(3000):
            out.write(f"step {n} loss 1.0\n".encode())
            if n in (10, 2500):
                out.write(b"x" * (70_000 + n) + b"\n")
    diagnosis = diagnose_paths([log], load_catalogue(include_user=False), fast=fast)
    (note,) = [f for f in diagnosis.findings if f.rule == "line-cut"]
    assert note.count == 2 and (note.line, note.title) == (12, f"2 lines were cut: {(70_010 + 72_500 - 2 * 65_536):,} "
                                                                 "bytes of their middles not read")
    assert note.evidence == [f"{log}:12: {70_010 - 65_536:,} bytes left out", f"{log}:2503: {72_500 - 65_536:,} bytes left out"]


async def test_the_screen_names_the_cut_line_and_what_was_left_out(tmp_path):
    """watch of the log at 80x24: the note is among the findings and its detail says where."""
    from monitor.tui import watch_app

    log = long_line_log(tmp_path)
    app = watch_app([str(log)], catalogue=load_catalogue(include_user=False))
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(100):
            await pilot.pause(0.1)
            if any(f.rule == "line-cut" for f in app.query_one(FindingsPanel).findings):
                break
        panel = app.query_one(FindingsPanel)
        note = next(f for f in panel.findings if f.rule == "line-cut")
        for _ in range(50):  # the table is drawn on the next refresh (later under load)
            if "Line 2 of train.log was cut" in "\n".join(screen_rows(app)):
                break
            await pilot.pause(0.1)
        assert "Line 2 of train.log was cut" in "\n".join(screen_rows(app))  # its title, in the table
        panel.select(note)
        for _ in range(50):
            await pilot.pause(0.1)
            detail = str(panel.query_one("#finding-text").render())
            if f"first at {log}:2" in detail.replace("\n", ""):
                break
        assert f"Line 2 of train.log was cut: {LEFT_OUT:,} bytes" in detail
        assert f"first at {log}:2" in detail.replace("\n", "")


# ----- the remedy's "start there" at 80x24
def test_a_long_path_breaks_after_a_folder_and_keeps_its_file_and_line_whole():
    remedy = Text(f"what to do\nRaised from {RAISE_SITE}:125 in fail_now: start there.\n· not ascii · {RAISE_SITE}")
    rows = break_long_paths(remedy, 36).plain.split("\n")
    assert rows[1] == "Raised from /home/alice/projects/"
    assert rows[2].startswith("llm-pretrain/src/llm/training/")
    assert rows[3].startswith("train.py:125 in fail_now: start there.")
    assert rows[4] == f"· not ascii · {RAISE_SITE}"  # (cells and characters differ: wrapped as before)
    assert break_long_paths(remedy, 200).plain == remedy.plain


def crash_with_a_long_raise_site() -> tuple[list[Finding], Finding]:
    findings, root = crash_findings()
    root = root.__class__(**{**{f: getattr(root, f) for f in root.__dataclass_fields__},
                             "remedy": f"Raised from {RAISE_SITE}:125 in fail_now: start there.\nFix it."})
    others = [Finding(rule="gloo-peer-lost", category="gloo_timeout", severity="error", role="cascade",
                      title="Gloo lost its connection to a peer on rank 1", rank=1, ranks=[1, 3],
                      file="logs/rank1.log", line=7, count=2, seq=5, first_seen=root.first_seen + 1),
              Finding(rule="torchrun-worker-failed", category="launcher", severity="error", role="cascade",
                      title="torchrun: local rank 2 exited with code 1", rank=2, ranks=[2],
                      file="logs/rank0.log", line=8, seq=6, first_seen=root.first_seen + 2)]
    return [root, *findings[1:], *others], root


def make_app(findings: list[Finding], root: Finding) -> MonitorApp:
    feed = ScriptedLogFeed([LogBatch(lines=crash_lines(), findings=findings, root_cause=root)])
    return MonitorApp(feed, FixedMetricsFeed(host_sample()), clock=lambda: 0.0)


async def test_at_80x24_start_there_shows_the_file_and_line_whole_and_titles_read():
    findings, root = crash_with_a_long_raise_site()
    app = make_app(findings, root)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, len(crash_lines()))
        await pilot.pause(0.2)
        rows = screen_rows(app)
        detail = [row.split("│", 1)[1] for row in rows[-7:-1]]
        (at,) = [n for n, part in enumerate(detail) if part.strip().startswith("train.py:125 in fail_now")]
        assert detail[at - 1].rstrip().endswith("/src/llm/training/"), rows  # broken after a folder
        titles = [row.split("│", 1)[0] for row in rows[-7:-1]]
        shown = "\n".join(titles)
        # Every finding's title in full or cut at a word's end, past its first 30 characters.
        assert "Gloo lost its connection to a peer…" in shown, shown
        assert "torchrun: local rank 2 exited with…" in shown, shown
        assert "torchrun sent SIGTERM to the other…" in shown, shown
        assert "ValueError on rank 2" in shown and "gloo connection closed by peer" in shown


def test_a_title_is_cut_at_a_word_end():
    assert fit_words("Gloo lost its connection to a peer on rank 1", 30) == "Gloo lost its connection to a…"
    assert fit_words("torchrun: local rank 2 exited with code 1", 35) == "torchrun: local rank 2 exited with…"
    assert fit_words("ValueError on rank 2", 20) == "ValueError on rank 2"
    assert fit_words("a" * 40, 10) == "a" * 9 + "…"


# ----- y, Y, x and s answer on the bottom line
@pytest.mark.parametrize("key, said", [
    ("y", "copied the last line in view (logs/rank0.log:7,"),
    ("Y", "copied the finding: ValueError on rank 2"),
    ("x", "5 findings saved to monitor-findings-"),
    ("s", "stacks need the job's processes"),
])
async def test_the_answer_to_a_key_covers_nothing_but_the_footer(tmp_path, monkeypatch, key, said):
    monkeypatch.chdir(tmp_path)  # x writes its file in the current folder
    findings, root = crash_with_a_long_raise_site()
    app = make_app(findings, root)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app, len(crash_lines()))
        await pilot.pause(0.3)
        before = screen_rows(app)
        await pilot.press(key)
        await pilot.pause(0.3)
        after = screen_rows(app)
        assert not app._notifications
        # The header, the job's rows, the log and the findings with the root cause: as they were.
        assert after[:-1] == before[:-1], "\n".join(after)
        assert "ROOT CAUSE  ValueError on rank 2" in after[-7]
        assert after[-1].strip().startswith(said) and "c Cause" in before[-1], after[-1]
        # The footer's keys come back.
        app._message_done()
        await pilot.pause(0.1)
        assert screen_rows(app)[-1] == before[-1]
