"""The log's writer (monitor/runner/log_writer.py): bytes move from a pipe into the file, through a
holding pipe from a pseudo-terminal, and by reading and writing where splice(2) cannot be used."""

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
    path = tmp_path / "run.log"
    path.write_bytes(b"earlier\n")
    writer = LogWriter(open_read_write(path))
    yield path, writer
    os.close(writer.fd)


def test_bytes_leave_the_pipe_into_the_log_after_what_it_held(log):
    path, writer = log
    read_fd, write_fd = open_pipe()
    os.write(write_fd, b"first\nsecond\n")
    assert writer.take(read_fd, 1 << 20, copy=True) == (13, b"first\nsecond\n")
    os.write(write_fd, b"third\n")
    assert writer.take(read_fd, 1 << 20) == (6, b"")  # no copy asked for
    os.close(write_fd)
    assert writer.take(read_fd, 1 << 20) == (0, b"")  # the end
    assert path.read_bytes() == b"earlier\nfirst\nsecond\nthird\n"
    assert writer.fallback is None and writer.lost_total == 0


def test_a_terminals_output_passes_through_the_holding_pipe(log):
    path, writer = log
    master, slave = os.openpty()
    tty.setraw(slave)
    hold = open_pipe()
    os.write(slave, b"\x1b[1mbold\x1b[0m\r\n")
    assert writer.take_through(master, hold, 1 << 20, copy=True) == (14, b"\x1b[1mbold\x1b[0m\r\n")
    assert path.read_bytes() == b"earlier\n\x1b[1mbold\x1b[0m\r\n"
    os.set_blocking(hold[0], False)
    with pytest.raises(BlockingIOError):
        os.read(hold[0], 1)  # nothing left held


def test_without_splice_the_bytes_are_read_and_written_and_that_is_said(log, monkeypatch):
    path, writer = log

    def no_splice(*_args, **_kwargs):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))

    monkeypatch.setattr(os, "splice", no_splice)
    read_fd, write_fd = open_pipe()
    os.write(write_fd, b"by hand\n")
    assert writer.take(read_fd, 1 << 20, copy=True) == (8, b"by hand\n")
    assert writer.fallback == "splice(2) into the log failed: Invalid argument"
    master, slave = os.openpty()
    tty.setraw(slave)
    os.write(slave, b"from the terminal\n")
    assert writer.take_through(master, open_pipe(), 1 << 20) == (18, b"from the terminal\n")
    assert path.read_bytes() == b"earlier\nby hand\nfrom the terminal\n"
