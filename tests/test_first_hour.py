"""A user's first hour (issue #14, point 5 and the footer): each small thing seen, tested."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from monitor.diagnosis.catalogue import load_catalogue

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def monitor(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_footer_keeps_cause_next_and_help_at_80_columns():
    from textual.widgets import Footer

    from monitor.tui import watch_app

    app = watch_app([str(SAMPLES)], catalogue=load_catalogue())

    async def drive():
        async with app.run_test(size=(80, 24)) as pilot:
            footer = app.query_one(Footer)
            # Laid out once the palette's key reaches the right edge (a loaded machine takes its time).
            for _ in range(100):
                await pilot.pause(0.1)
                if any(w.region.right >= 80 for w in footer.children):
                    break
            palette = min(w.region.x for w in footer.children if w.region.right >= 80)
            shown = {w.key_display or w.key for w in footer.children if w.region.right <= palette}
            assert {"c", "n", "?"} <= shown, shown

    asyncio.run(drive())


def test_rules_list_piped_is_not_padded():
    result = monitor("rules", "list", "--no-user-rules")
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["id", "category", "severity", "role", "title"]
    assert not any(line != line.rstrip() for line in lines)
    # Each column as wide as its widest cell, and one gap of the same few spaces before the next.
    rows = [line.split(None, 4) for line in lines[:-1]]
    starts = [0] + [lines[0].index(name) for name in ("category", "severity", "role", "title")]
    gaps = {starts[i + 1] - starts[i] - max(len(row[i]) for row in rows) for i in range(4)}
    assert len(gaps) == 1 and 1 <= gaps.pop() <= 3


def test_rules_list_into_a_closed_pipe_is_quiet():
    result = subprocess.run(f"{sys.executable} -m monitor rules list --no-user-rules | head -1",
                            shell=True, capture_output=True, text=True, timeout=60)
    assert result.stdout.startswith("id") and "Traceback" not in result.stderr and result.stderr == ""


def test_an_empty_log_is_said_to_be_empty(tmp_path):
    (tmp_path / "train.log").write_text("")
    result = monitor("diagnose", str(tmp_path / "train.log"))
    assert result.returncode == 0
    assert "No failure found in 1 file(s)." in result.stdout and "it is empty" in result.stdout
    report = json.loads(monitor("diagnose", "--json", str(tmp_path / "train.log")).stdout)
    assert report["empty"] == [str(tmp_path / "train.log")]
    (tmp_path / "rank1.log").write_text("step 1 loss 2.0\n")
    assert "1 of them are empty" in monitor("diagnose", str(tmp_path)).stdout


def test_watching_a_folder_that_does_not_exist_is_an_error(tmp_path):
    for args in (["watch", "--headless", "nothere/"], ["watch", "nothere/"]):
        result = monitor(*args, cwd=tmp_path)
        assert result.returncode == 2 and result.stderr.strip() == "monitor: nothere/: no such directory"


def test_a_single_process_is_not_told_about_other_ranks(tmp_path):
    single = tmp_path / "train.log"
    single.write_text('Traceback (most recent call last):\n  File "train.py", line 9, in <module>\nValueError: boom\n')
    remedy = json.loads(monitor("diagnose", "--json", str(single)).stdout)["root_cause"]["remedy"]
    assert "\nUncaught ValueError: boom" in remedy and "other ranks" not in remedy
    several = json.loads(monitor("diagnose", "--json", str(SAMPLES / "demo/crash-2ranks.log")).stdout)["root_cause"]
    assert "Errors on the other ranks after this one are usually its consequences" in several["remedy"]
