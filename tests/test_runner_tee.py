"""The headless copy of the job's output: every byte to a file, dropped chunks marked elsewhere."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from monitor.runner import recorder
from monitor.runner.recorder import TEE_QUEUE_CHUNKS, FileCopy, QueuedCopy, destination_name
from tests.runner_helpers import job_state, monitor_cmd, only_log, python_job

# What a user ran (`monitor run --headless -- python spam.py > out.txt`): 300,000 numbered
# lines as fast as they come, each flushed, so the recorder reads many small chunks.
SPAM_JOB = """
import sys
for i in range(300_000):
    print(f"{i:07d} the quick brown fox jumps over the lazy dog", flush=True)
"""
SPAM_BYTES = 300_000 * 52
MARKER = re.compile(rb"\[monitor: (\d+) bytes not shown here; all are in ([^\]\n]+)\]\n")
LOG_NAME = "logs/run-20260101-000000.log"


def test_a_burst_to_a_file_arrives_whole_and_in_order(tmp_path: Path):
    out_path = tmp_path / "out.txt"
    with open(out_path, "wb") as out:
        result = subprocess.run(monitor_cmd(tmp_path / "logs", *python_job(SPAM_JOB)), stdout=out,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=180)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    log = only_log(tmp_path / "logs").read_bytes()
    assert len(log) == SPAM_BYTES
    assert out_path.read_bytes() == log
    state = job_state(tmp_path / "logs")
    assert state["tee_destination"] == "the file"
    assert state["tee_dropped_bytes"] == 0
    assert b"not shown" not in result.stderr


def numbered_lines(start: int, count: int) -> bytes:
    return b"".join(b"%09d padding padding\n" % i for i in range(start, start + count))


def read_all(fd: int, into: bytearray) -> threading.Thread:
    def drain() -> None:
        while chunk := os.read(fd, 1 << 16):
            into.extend(chunk)
    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return thread


def test_a_stopped_pipe_gets_a_marker_where_chunks_were_dropped(tmp_path: Path):
    read_end, write_end = os.pipe()
    copy = QueuedCopy(write_end, "the pipe", LOG_NAME)
    sent = []
    # Nobody reads: the pipe fills, then the queue, then chunks are dropped (never blocking).
    while copy.dropped_bytes < 500_000:
        sent.append(numbered_lines(len(sent) * 100, 100))
        copy.put(sent[-1])
    # The reader comes back: once the queue has room, the next chunk goes out behind a marker.
    received = bytearray()
    reader = read_all(read_end, received)
    for _ in range(TEE_QUEUE_CHUNKS * 4):
        sent.append(numbered_lines(len(sent) * 100, 100))
        copy.put(sent[-1])
    copy.close(timeout=10)
    os.close(write_end)
    reader.join(10)
    os.close(read_end)
    assert copy.error is None

    # Rebuild the log from the copy: its text pieces and, at each marker, the bytes it says
    # are missing. Every chunk ends a line, so no marker needed a newline of its own.
    log = b"".join(sent)
    pieces = MARKER.split(bytes(received))
    offset, markers, skipped = 0, 0, 0
    for i in range(0, len(pieces), 3):
        text = pieces[i]
        assert text == log[offset:offset + len(text)]
        offset += len(text)
        if i + 1 < len(pieces):
            markers += 1
            missing = int(pieces[i + 1])
            assert pieces[i + 2].decode() == LOG_NAME
            offset += missing
            skipped += missing
    assert offset == len(log)
    assert skipped == copy.dropped_bytes > 500_000
    assert markers >= 1


@pytest.mark.parametrize("filler, newline_before_marker", [(b"x" * 1023 + b"\n", b""), (b"y" * 1024, b"\n")],
                         ids=["after-a-whole-line", "in-the-middle-of-a-line"])
def test_a_marker_always_starts_a_line_of_its_own(filler: bytes, newline_before_marker: bytes):
    read_end, write_end = os.pipe()
    copy = QueuedCopy(write_end, "the pipe", LOG_NAME)
    puts = 0
    # The pipe (64 KiB) fills and the copy thread blocks on it, then the queue fills.
    while copy.dropped_bytes == 0:
        copy.put(filler)
        puts += 1
    copy.put(filler)  # dropped too: the queue is still full
    puts += 1
    received = bytearray()
    reader = read_all(read_end, received)
    copy.close(timeout=10)
    os.close(write_end)
    reader.join(10)
    os.close(read_end)
    # What was not dropped arrived whole, then the marker with every dropped byte, after a
    # newline of its own only where the copy stopped in the middle of a line.
    marker = newline_before_marker + (
        b"[monitor: %d bytes not shown here; all are in %s]\n" % (copy.dropped_bytes, LOG_NAME.encode()))
    text = bytes(received)
    assert text.endswith(marker)
    shown = puts - copy.dropped_bytes // len(filler)
    assert shown >= TEE_QUEUE_CHUNKS and copy.dropped_bytes >= 2 * len(filler)
    assert text == filler * shown + marker


def test_a_file_copy_that_cannot_be_written_counts_what_it_lost(tmp_path: Path):
    path = tmp_path / "out.txt"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)  # a real regular file whose writes fail (EBADF)
    try:
        copy = FileCopy(fd)
        copy.put(b"one\n")
        copy.put(b"two\n")
        copy.close(timeout=1)
    finally:
        os.close(fd)
    assert copy.error == "Bad file descriptor"
    assert copy.dropped_bytes == 8
    assert path.read_bytes() == b""


def test_destinations_are_named_for_the_end_message(tmp_path: Path):
    with open(tmp_path / "out.txt", "wb") as regular:
        assert destination_name(regular.fileno()) == "the file"
    read_end, write_end = os.pipe()
    assert destination_name(write_end) == "the pipe"
    os.close(read_end)
    os.close(write_end)
    left, right = socket.socketpair()
    with left, right:
        assert destination_name(left.fileno()) == "the socket"
    with open(os.devnull, "wb") as null:
        assert destination_name(null.fileno()) == "the device"
    master, slave = os.openpty()
    assert destination_name(slave) == "the terminal"
    os.close(master)
    os.close(slave)
    fd = os.open(tmp_path / "out.txt", os.O_RDONLY)
    os.close(fd)
    assert destination_name(fd) == "the output"  # closed: the copy's write will fail and say so


def test_a_file_on_a_network_file_system_is_written_from_a_thread_bounded_by_bytes(tmp_path: Path, monkeypatch):
    # SLURM's .out on Lustre: a stalled server must not stall the read loop (and so the job).
    import psutil

    real = psutil.disk_partitions(all=True)
    lustre = type(real[0])(str(tmp_path), str(tmp_path), "lustre", "rw")
    monkeypatch.setattr(psutil, "disk_partitions", lambda all=False: [*real, lustre])
    with open(tmp_path / "slurm-42.out", "wb") as out:
        copy = recorder.open_copy(out.fileno(), LOG_NAME)
        assert isinstance(copy, QueuedCopy) and copy.destination == "the file"
        sent = [numbered_lines(n * 100, 100) for n in range(2000)]  # a burst: every byte arrives
        for chunk in sent:
            copy.put(chunk)
        copy.close(timeout=10)
    assert (tmp_path / "slurm-42.out").read_bytes() == b"".join(sent) and copy.dropped_bytes == 0
    with open(tmp_path / "local.out", "wb") as out:
        monkeypatch.setattr(psutil, "disk_partitions", lambda all=False: real)
        assert isinstance(recorder.open_copy(out.fileno(), LOG_NAME), FileCopy)


def test_a_byte_bounded_copy_drops_what_exceeds_its_budget_and_never_blocks():
    read_end, write_end = os.pipe()  # nobody reads: the writer thread soon blocks in write()
    copy = QueuedCopy(write_end, "the file", LOG_NAME, max_bytes=1 << 20)
    chunk = b"x" * 4095 + b"\n"
    for _ in range(2000):  # 8 MiB against a 1 MiB budget (plus the pipe's own buffer)
        copy.put(chunk)
    assert copy.dropped_bytes >= 8 * (1 << 20) - (1 << 20) - (1 << 20)
    copy.close(timeout=0.5)
    os.close(read_end)
    os.close(write_end)
