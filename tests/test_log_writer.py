"""The log's writer (monitor/runner/log_writer.py): bytes move from the job's pipe or pseudo-terminal
through the holding pipe into the file, by reading and writing where splice(2) cannot be used, the
job never waiting on the log's disk."""

from __future__ import annotations

import errno
import os
import tty
from pathlib import Path

import pytest

from monitor.files import open_read_write
from monitor.runner.log_writer import LogWriter
from monitor.runner.recorder import open_pipe


@pytest.fixture
def log(tmp_path: Path):
    """(the log's path, its writer, the fallbacks it reported); the log already holds a line."""
    path = tmp_path / "run.log"
    path.write_bytes(b"earlier\n")
    fallbacks: list[str] = []
    hold = open_pipe()
    writer = LogWriter(open_read_write(path), hold, fallbacks.append)
    yield path, writer, fallbacks
    for fd in (writer.fd, *hold):
        os.close(fd)


@pytest.fixture
def pipe():
    read_fd, write_fd = open_pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        try:
            os.close(fd)
        except OSError:
            pass  # closed by the test (the end of the output)


@pytest.fixture
def terminal():
    master, slave = os.openpty()
    tty.setraw(slave)
    yield master, slave
    os.close(master)
    os.close(slave)


def held(writer: LogWriter) -> bytes:
    """What the holding pipe still has (it must be empty between takes)."""
    os.set_blocking(writer.hold[0], False)
    try:
        return os.read(writer.hold[0], 1 << 20)
    except BlockingIOError:
        return b""
    finally:
        os.set_blocking(writer.hold[0], True)


def test_bytes_leave_the_pipe_into_the_log_after_what_it_held(log, pipe):
    path, writer, fallbacks = log
    read_fd, write_fd = pipe
    os.write(write_fd, b"first\nsecond\n")
    assert writer.take(read_fd, 1 << 20, copy=True) == (13, b"first\nsecond\n")
    os.write(write_fd, b"third\n")
    assert writer.take(read_fd, 1 << 20) == (6, b"")  # no copy asked for
    os.close(write_fd)
    assert writer.take(read_fd, 1 << 20) == (0, b"")  # the end
    assert path.read_bytes() == b"earlier\nfirst\nsecond\nthird\n"
    assert held(writer) == b"" and fallbacks == [] and writer.lost_total == 0


def test_a_terminals_output_passes_through_the_holding_pipe(log, terminal):
    path, writer, _ = log
    master, slave = terminal
    os.write(slave, b"\x1b[1mbold\x1b[0m\r\n")
    assert writer.take(master, 64 << 10, copy=True) == (14, b"\x1b[1mbold\x1b[0m\r\n")
    assert path.read_bytes() == b"earlier\n\x1b[1mbold\x1b[0m\r\n"
    assert held(writer) == b""


def test_without_splice_the_bytes_are_read_and_written_and_that_is_said_first(log, pipe, terminal, monkeypatch):
    path, writer, fallbacks = log

    def no_splice(*_args, **_kwargs):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(os, "splice", no_splice)
    read_fd, write_fd = pipe
    os.write(write_fd, b"by hand\n")
    assert writer.take(read_fd, 1 << 20, copy=True) == (8, b"by hand\n")
    assert fallbacks == ["splice(2) from the job's output failed: Invalid argument"]
    master, slave = terminal
    os.write(slave, b"from the terminal\n")
    assert writer.take(master, 64 << 10) == (18, b"from the terminal\n")
    assert path.read_bytes() == b"earlier\nby hand\nfrom the terminal\n"
    assert fallbacks == ["splice(2) from the job's output failed: Invalid argument"]  # said once


def test_a_log_that_cannot_be_read_back_still_gets_every_byte(log, pipe, monkeypatch):
    """The copy for the terminal reads the bytes back; where that fails only the copy misses them."""
    path, writer, _ = log
    read_fd, write_fd = pipe

    def broken_pread(*_args):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "pread", broken_pread)
    os.write(write_fd, b"kept\n")
    assert writer.take(read_fd, 1 << 20, copy=True) == (5, b"")
    assert path.read_bytes() == b"earlier\nkept\n"


def test_a_log_cut_shorter_is_written_on_at_its_new_end(log, pipe):
    """logrotate's copytruncate: no hole of NUL bytes before the next line."""
    path, writer, _ = log
    read_fd, write_fd = pipe
    os.write(write_fd, b"before the cut\n")
    writer.take(read_fd, 1 << 20)
    os.truncate(path, 0)
    writer.follow_truncation()
    os.write(write_fd, b"after the cut\n")
    writer.take(read_fd, 1 << 20)
    assert path.read_bytes() == b"after the cut\n"


def test_the_jobs_pipe_is_never_spliced_straight_into_the_file(log, pipe, monkeypatch):
    """splice into a file holds the source pipe's lock for the whole write: from the job's own pipe
    a stalled file system (an NFS server) would stall every print of the job's (the review measured
    13.9 s of prints against 0.001 s). Only the holding pipe, which the job never writes, waits."""
    _, writer, _ = log
    read_fd, write_fd = pipe
    calls = []
    real_splice = os.splice

    def recording_splice(src, dst, count, *args, **kwargs):
        calls.append((src, dst))
        return real_splice(src, dst, count, *args, **kwargs)

    monkeypatch.setattr(os, "splice", recording_splice)
    os.write(write_fd, b"a line\n")
    writer.take(read_fd, 1 << 20)
    assert calls == [(read_fd, writer.hold[1]), (writer.hold[0], writer.fd)]
