"""`--watch-ckpt`: checkpoints are checked once complete; truncation and read-while-writing warn."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # without torch: skipped, not an error at collection

from monitor.checkpoints.watch import CheckpointWatcher  # noqa: E402  (after the skip without torch)
from tests.runner_helpers import wait_for  # noqa: E402

# Writes a real checkpoint (made by torch in the test) in two halves with a pause between,
# holding the file open throughout, as torch.save to a slow disk does.
SLOW_WRITER = """
import sys, time
data = open(sys.argv[3], "rb").read()
with open(sys.argv[1], "wb") as f:
    f.write(data[: len(data) // 2]); f.flush()
    print("half", flush=True)
    time.sleep(float(sys.argv[2]))
    f.write(data[len(data) // 2:])
print("closed", flush=True)
"""


def real_checkpoint(tmp_path: Path) -> str:
    source = tmp_path.parent / f"{tmp_path.name}-source.bin"
    torch.save({"w": torch.randn(256, 256)}, source)
    return str(source)
READER = "import sys, time\nf = open(sys.argv[1], 'rb')\nprint('reading', flush=True)\ntime.sleep(30)\n"


def make_watcher(directory: Path, pids=list) -> tuple[CheckpointWatcher, list]:
    seen: list = []
    watcher = CheckpointWatcher([directory], seen.append, since=time.time() - 5, job_pids=pids,
                                poll_s=0.05, settle_polls=2)
    return watcher, seen


def test_a_checkpoint_is_checked_only_after_its_writer_closed_it(tmp_path: Path):
    path = tmp_path / "step1.pt"
    writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(path), "1.0", real_checkpoint(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    watcher, seen = make_watcher(tmp_path, pids=lambda: [writer.pid])
    watcher.start()
    try:
        assert writer.stdout.readline() == "half\n"
        time.sleep(0.5)  # ten scans while half written and stable: still not checked
        assert path not in watcher.checked
        writer.wait(timeout=30)
        result = wait_for(lambda: watcher.checked.get(path))
        assert result.ok, result.line()
    finally:
        watcher.stop()
        writer.kill()
    assert seen == []


def test_truncated_checkpoint_warns_once(tmp_path: Path):
    good = tmp_path / "good.pt"
    torch.save({"w": torch.randn(64, 64)}, good)
    watcher, seen = make_watcher(tmp_path)
    watcher.start()
    try:
        (tmp_path / "resume.pt").write_bytes(good.read_bytes()[:5000])
        wait_for(lambda: len(seen) == 1)
        time.sleep(0.3)
    finally:
        watcher.stop()
    assert len(seen) == 1 and watcher.checked[good].ok
    finding = seen[0]
    assert finding.rule == "ckpt-watch-bad" and finding.category == "corrupt_checkpoint"
    assert "resume.pt" in finding.title and "central directory" in finding.title
    assert "os.replace" in finding.remedy


def test_reading_while_writing_is_caught_as_it_happens(tmp_path: Path):
    path = tmp_path / "shared.pt"
    writer = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(path), "5", real_checkpoint(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    reader = None
    try:
        assert writer.stdout.readline() == "half\n"
        reader = subprocess.Popen([sys.executable, "-c", READER, str(path)], stdout=subprocess.PIPE, text=True)
        assert reader.stdout.readline() == "reading\n"
        watcher, seen = make_watcher(tmp_path, pids=lambda: [writer.pid, reader.pid])
        watcher.start()
        wait_for(lambda: seen)
        watcher.stop()
    finally:
        writer.kill()
        if reader:
            reader.kill()
    race = seen[0]
    assert race.rule == "ckpt-read-while-writing"
    assert f"pid {reader.pid} read" in race.remedy and f"pid {writer.pid} was writing" in race.remedy


def test_files_that_never_settle_are_checked_when_watching_stops(tmp_path: Path):
    watcher, seen = make_watcher(tmp_path)
    (tmp_path / "last.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    watcher.stop()  # never started: the final scan alone must check it
    assert [f.rule for f in seen] == ["ckpt-watch-bad"]


def test_big_checkpoints_get_the_quick_structural_check(tmp_path: Path, monkeypatch):
    import monitor.checkpoints.watch as watch_module
    monkeypatch.setattr(watch_module, "DEEP_CHECK_MAX_BYTES", 100)
    torch.save({"w": torch.randn(64, 64)}, tmp_path / "big.pt")
    watcher, seen = make_watcher(tmp_path)
    watcher.stop()
    assert "structure only" in watcher.checked[tmp_path / "big.pt"].detail and seen == []
