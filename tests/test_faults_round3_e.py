"""Faults round 3 (shared/reviews/faults-round3-2026-11-25.md), the engine's and the masker's:
F5 a traceback header glued after a progress bar or a prompt, F13 the same failure on several ranks
named by the first file read instead of the earliest time, F6 credentials in common argv forms."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from diagnosis_helpers import diagnose_json

from monitor.diagnosis.secrets import mask_args


def _diagnose(*paths: Path) -> dict:
    return diagnose_json(*map(str, paths))


TRACEBACK = ('Traceback (most recent call last):\n  File "train.py", line 10, in <module>\n    loss = step()\n'
             '  File "train.py", line 5, in step\n    raise Failure("bad shape (3, 4) vs (4, 3)")\n'
             'mylib.Failure: bad shape (3, 4) vs (4, 3)\n')


@pytest.mark.parametrize("before", [
    "".join(f"\r{p:3d}%|{'#' * (p // 10):10s}| {p}/100 [00:01<00:02]" for p in range(0, 51, 10)),  # tqdm, never ended
    "name? ",  # input()'s prompt
])
def test_f5_a_traceback_header_after_a_bar_or_a_prompt_on_its_line(tmp_path: Path, before: str) -> None:
    log = tmp_path / "job.log"
    log.write_text(before + TRACEBACK)
    root = _diagnose(log)["root_cause"]
    assert root is not None and root["fields"]["exc_type"] == "mylib.Failure"
    assert (root["fields"]["frame_file"], root["fields"]["frame_line"]) == ("train.py", "5")


def test_f13_the_same_failure_on_several_ranks_is_told_by_its_earliest_occurrence(tmp_path: Path) -> None:
    """Rank 1 ran out of memory 2 s before rank 0 (other time zone); rank 0's file is read first."""
    folder = tmp_path / "e"
    folder.mkdir()
    (folder / "rank0.log").write_text(
        "2026-01-01T10:00:00Z [rank0] step 1\n"
        "2026-01-01T10:00:05Z [rank0] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.15 GiB of which 1.12 GiB is free.\n")
    (folder / "rank1.log").write_text(
        "2026-01-01T19:00:00+09:00 [rank1] step 1\n"
        "2026-01-01T19:00:03+09:00 [rank1] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. "
        "GPU 1 has a total capacity of 79.15 GiB of which 1.12 GiB is free.\n")
    root = _diagnose(folder)["root_cause"]
    assert (root["rank"], root["ranks"], root["count"]) == (1, [0, 1], 2)
    assert root["fields"]["tried"] == "4.00 GiB" and root["file"].endswith("rank1.log")
    assert "4.00 GiB" in root["evidence"][0] and root["first_seen"] == 1767261603


@pytest.mark.parametrize(("args", "masked"), [
    (["job.py", "--passwd", "hunter2"], ["job.py", "--passwd", "****"]),
    (["job.py", "--pw", "hunter2", "--db-pass", "x9", "--auth", "u:p", "--credentials", "c"],
     ["job.py", "--pw", "****", "--db-pass", "****", "--auth", "****", "--credentials", "****"]),
    (["mysql", "-phunter2"], ["mysql", "-p****"]),
    (["sshpass", "-p", "hunter2", "ssh", "-p", "22", "host"], ["sshpass", "-p", "****", "ssh", "-p", "22", "host"]),
    (["curl", "-u", "user:hunter4", "-H", "Authorization: Basic dXNlcjpodW50ZXIy"],
     ["curl", "-u", "user:****", "-H", "Authorization: Basic ****"]),
    (["env", "DB_PASS=hunter2", "MY_PASSWD=x1234", "PWD=/home/u"], ["env", "DB_PASS=****", "MY_PASSWD=****", "PWD=/home/u"]),
    (["job.py", "--openai", "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789", "--gh", "ghp_abcdefghijklmnopqrstuvwxyz0123456789"],
     ["job.py", "--openai", "****", "--gh", "****"]),
    (["job.py", "--slack", "xoxb-1234567890-abcdefghij", "--gitlab", "glpat-abcdefghijklmnopqrstu"],
     ["job.py", "--slack", "****", "--gitlab", "****"]),
    (["job.py", "--hf-token", "-abcdefghij", "--token", "--verbose"], ["job.py", "--hf-token", "****", "--token", "--verbose"]),
    (["docker", "run", "-p8080:80", "--lr", "0.1", "--author", "Bob"], ["docker", "run", "-p8080:80", "--lr", "0.1", "--author", "Bob"]),
])
def test_f6_credentials_in_common_argv_forms_are_masked(args: list[str], masked: list[str]) -> None:
    assert mask_args(args) == masked


def test_f1_the_write_check_of_the_log_folder_follows_no_planted_link(tmp_path: Path) -> None:
    """`monitor run` checks that it can write its log folder with a file of its own: a link planted at
    a name it would use must not make it create the link's target (a root run in a shared folder)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    victim = tmp_path / "victim"
    (logs / ".monitor-write-test").symlink_to(victim)
    out = subprocess.run([sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight", "--log-dir", str(logs),
                          "--", sys.executable, "-c", "print('ok')"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert not victim.exists()
    assert not [p for p in logs.iterdir() if p.name.startswith(".monitor-write-test.")]
