"""Rotation under pressure: writers that rotate their logs as fast as they can, all five kinds at
once. Each line that is on disk at the end is reported at least once, and no line twice."""

from __future__ import annotations

import os
import re
import shutil
import threading
import time

import pytest

from monitor.logs.follow import Follower

LINE = re.compile(r"^seq (\d+) rank (\d+)\b")
KINDS = ["rename", "copytruncate", "delete", "truncate", "keep"]


class RotatingWriter(threading.Thread):
    """Writes ``seq N rank R ...`` lines with no pause (each in two writes, so the follower sees
    partial lines) and rotates its file every ``every`` lines with its kind of rotation, in its own
    thread between two lines, as logrotate does with a paused writer: rename and create (copies
    shifted .1 -> .2), copytruncate, delete and create, truncate to zero, and ``keep`` (truncated
    to the first half of its lines, ``truncate -s``). ``barrier``: every writer rotates at once."""

    def __init__(self, path: str, rank: int, kind: str, count: int, every: int, barrier=None):
        super().__init__(daemon=True)
        self.path, self.rank, self.kind, self.count, self.every, self.barrier = path, rank, kind, count, every, barrier
        self.fd = self._open()
        self.line_starts: list[int] = []

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _reopen(self) -> None:
        os.close(self.fd)
        self.fd = self._open()
        self.line_starts = []

    def _shift_copies(self) -> None:
        n = 1
        while os.path.exists(f"{self.path}.{n}"):
            n += 1
        for k in range(n - 1, 0, -1):
            os.rename(f"{self.path}.{k}", f"{self.path}.{k + 1}")

    def rotate(self) -> None:
        if self.kind == "rename":
            self._shift_copies()
            os.rename(self.path, self.path + ".1")
            self._reopen()
        elif self.kind == "copytruncate":
            self._shift_copies()
            shutil.copyfile(self.path, self.path + ".1")
            os.truncate(self.path, 0)
            self.line_starts = []
        elif self.kind == "delete":
            os.unlink(self.path)
            self._reopen()
        elif self.kind == "truncate":
            os.truncate(self.path, 0)
            self.line_starts = []
        elif self.kind == "keep" and len(self.line_starts) > 2:
            cut = self.line_starts[len(self.line_starts) // 2]
            os.truncate(self.path, cut)
            self.line_starts = [start for start in self.line_starts if start < cut]

    def run(self) -> None:
        for n in range(self.count):
            if n and n % self.every == 0:
                if self.barrier is not None:
                    time.sleep(0.3)  # the lines before the burst are read (or at least seen)
                    self.barrier.wait()
                self.rotate()
            line = f"seq {n:06d} rank {self.rank} loss={n * 0.001:.3f} {'x' * (n % 37)}\n".encode()
            self.line_starts.append(os.fstat(self.fd).st_size)
            os.write(self.fd, line[:9])
            os.write(self.fd, line[9:])
        os.close(self.fd)


def follow(folder, writers, *, target: str, poll: bool):
    paths = [str(folder)] if target == "dir" else [w.path for w in writers]
    follower = Follower(paths, poll=poll, poll_interval=0.02)
    lines = follower.read(0.01).lines  # already following when the writers start
    for writer in writers:
        writer.start()
    quiet_since = None
    while True:
        update = follower.read(0.05)
        lines += update.lines
        if any(w.is_alive() for w in writers) or update.lines:
            quiet_since = None
            continue
        quiet_since = quiet_since or time.monotonic()
        if time.monotonic() - quiet_since > 0.6:
            break
    return lines + follower.close().lines


def by_rank(texts) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for text in texts:
        if m := LINE.match(text):
            found.setdefault(int(m.group(2)), []).append(int(m.group(1)))
    return found


def on_disk(folder) -> dict[int, set[int]]:
    texts = []
    for name in os.listdir(folder):
        texts += (folder / name).read_bytes().replace(b"\0", b"").decode().splitlines()
    return {rank: set(seqs) for rank, seqs in by_rank(texts).items()}


def assert_once_each(folder, lines, kinds, *, may_repeat=()):
    reported = by_rank(line.text for line in lines)
    disk = on_disk(folder)
    for rank, kind in enumerate(kinds):
        got = reported.get(rank, [])
        twice = sorted({n for n in got if got.count(n) > 1})
        assert kind in may_repeat or not twice, f"{kind}: reported twice: {twice[:10]}"
        lost = sorted(disk.get(rank, set()) - set(got))
        assert not lost, f"{kind}: on disk, never reported: {lost[:10]}"


@pytest.mark.parametrize("target", ["dir", "file"])
@pytest.mark.parametrize("poll", [False, True], ids=["events", "poll"])
def test_five_kinds_of_rotation_in_one_burst(tmp_path, target, poll):
    barrier = threading.Barrier(len(KINDS))
    writers = [RotatingWriter(str(tmp_path / f"rank{r}.log"), r, kind, 1000, 500, barrier) for r, kind in enumerate(KINDS)]
    lines = follow(tmp_path, writers, target=target, poll=poll)
    # "keep" cuts its file (truncate -s) about 12 KiB back, further than the last 4 KiB read: the
    # sums of the last lines read tell where the file stops holding what was read.
    assert_once_each(tmp_path, lines, KINDS)
    # Rank 1's lines written before its copytruncate and not read by then are only in the copy.
    assert sorted(by_rank(line.text for line in lines)[1]) == list(range(1000))


FAST = ["rename", "delete", "truncate", "keep"]


@pytest.mark.parametrize("target", ["dir", "file"])
@pytest.mark.parametrize("poll", [False, True], ids=["events", "poll"])
def test_writers_rotating_as_fast_as_they_can(tmp_path, target, poll):
    """60 rotations per writer within about a second: whole generations are written and rotated
    away between two reads (and renamed on, .1 -> .2 -> ...)."""
    writers = [RotatingWriter(str(tmp_path / f"rank{r}.log"), r, kind, 3000, 50) for r, kind in enumerate(FAST)]
    lines = follow(tmp_path, writers, target=target, poll=poll)
    assert_once_each(tmp_path, lines, FAST)
    assert sorted(by_rank(line.text for line in lines)[0]) == list(range(3000))  # renamed: all on disk


@pytest.mark.parametrize("target", ["dir", "file"])
@pytest.mark.parametrize("poll", [False, True], ids=["events", "poll"])
def test_five_writers_copytruncating_every_20_lines(tmp_path, target, poll):
    """150 copytruncates per writer, every copy kept (.1 -> .2 -> ... -> .150): the copies move on
    between our stat of a name and our look inside it, and a copy is looked for while the writer
    shifts them all. Each line once: a generation was read again from a copy judged by what sat at
    its name a moment later, a line lost when its start was read before the truncation and the
    copy holding its end was missed mid-shift, and a last generation as long as the one before was
    never read (the same size, so no growth to notice)."""
    writers = [RotatingWriter(str(tmp_path / f"rank{r}.log"), r, "copytruncate", 3000, 20) for r in range(5)]
    lines = follow(tmp_path, writers, target=target, poll=poll)
    assert_once_each(tmp_path, lines, ["copytruncate"] * 5)
    for rank in range(5):
        assert sorted(by_rank(line.text for line in lines)[rank]) == list(range(3000))


def test_a_file_truncated_and_written_again_to_the_same_size_is_read_again(tmp_path):
    """Between two reads the file is truncated and refilled with other lines of exactly the
    length already read: nothing grew, but the bytes are new."""
    path = tmp_path / "rank0.log"
    first = "".join(f"seq {n:06d} rank 0 loss=1.000\n" for n in range(10))
    second = "".join(f"seq {n:06d} rank 0 loss=2.000\n" for n in range(10, 20))
    assert len(first) == len(second)
    path.write_text(first)
    follower = Follower([str(path)])
    got = _read_until(follower, lambda got: len(got) >= 10)
    time.sleep(0.01)  # a later modification time, as a real writer's would be
    with open(path, "r+") as handle:
        handle.truncate(0)
        handle.write(second)
    got += _read_until(follower, lambda more: len(more) >= 10, limit=5.0)
    got += follower.close().lines
    assert sorted(by_rank(line.text for line in got)[0]) == list(range(20))


@pytest.mark.parametrize("more", [5, 0], ids=["grown", "empty-again"])
@pytest.mark.parametrize("target", ["dir", "file"])
def test_a_generation_copied_away_from_a_file_we_saw_empty_is_read_from_the_copy(tmp_path, target, more):
    """The file was empty when we read it; before the next read 10 lines are written, copied to
    .1 and the file truncated (copytruncate), then 5 more lines written, or none: the file only
    grew, or did not change at all, as far as its size tells, and the 10 lines are only in the
    copy."""
    path = tmp_path / "rank0.log"
    path.write_text("")
    follower = Follower([str(tmp_path) if target == "dir" else str(path)], poll=True, poll_interval=0.02)
    got = follower.read(0.1).lines
    time.sleep(0.01)  # the copy is written after our visit, as it would be
    path.write_text("".join(f"seq {n:06d} rank 0 loss=1.0\n" for n in range(10)))
    shutil.copyfile(path, f"{path}.1")
    os.truncate(path, 0)
    with open(path, "a") as handle:
        handle.write("".join(f"seq {n:06d} rank 0 loss=1.0\n" for n in range(10, 10 + more)))
    got += _read_until(follower, lambda lines: len(lines) >= 10 + more, limit=3.0)
    got += follower.close().lines
    assert sorted(by_rank(line.text for line in got)[0]) == list(range(10 + more))


@pytest.mark.parametrize("kept", [100, 390])
def test_cut_far_back_and_grown_before_the_next_read_reads_each_line_once(tmp_path, kept):
    """400 lines (about 24 KiB) read; the file is cut to its first ``kept`` lines (20 KiB back,
    past the last 4 KiB read; or 10 lines back) and 50 new lines of the same length are written
    before we look again: the new lines once, the kept ones not again."""
    path = tmp_path / "rank0.log"
    text = [f"seq {n:06d} rank 0 loss={n * 0.001:.3f} {'x' * 20}\n" for n in range(400)]
    path.write_text("".join(text))
    follower = Follower([str(path)], poll=True, poll_interval=0.02)
    got = _read_until(follower, lambda got: len(got) >= 400)
    with open(path, "r+") as handle:
        handle.truncate(len("".join(text[:kept])))
        handle.seek(0, os.SEEK_END)
        handle.write("".join(f"seq {n:06d} rank 0 loss={n * 0.001:.3f} {'y' * 20}\n" for n in range(400, 450)))
    got += _read_until(follower, lambda more: len(more) >= 50, limit=3.0)
    got += follower.close().lines
    seqs = by_rank(line.text for line in got)[0]
    assert sorted(seqs) == list(range(400)) + list(range(400, 450))
    assert [line.line for line in got[400:]] == list(range(kept + 1, kept + 51))  # numbered as in the file


def test_a_copytruncate_between_the_look_and_the_read_mixes_no_generations(tmp_path, monkeypatch):
    """The follower looked (same file, grown) and then read; in between, the file was copied to
    .1, truncated and written past our offset: the bytes read there are the new text's. They were
    taken for the old text's end (its lines read twice, the old end lost); now they are left and
    the cut is handled at once."""
    from monitor.logs import tracked_file

    path = tmp_path / "rank0.log"
    old = [f"seq {n:06d} rank 0 loss=1.0 {'x' * 20}\n" for n in range(100)]
    path.write_text("".join(old[:60]))
    follower = Follower([str(tmp_path)], poll=True, poll_interval=0.02)
    got = _read_until(follower, lambda got: len(got) >= 60)
    with open(path, "a") as handle:
        handle.write("".join(old[60:]))
    read_at = len("".join(old[:60]).encode())
    real_pread = os.pread

    def rotate_then_read(fd, length, offset):
        if offset == read_at and length > 1000 and not (tmp_path / "rank0.log.1").exists():
            shutil.copyfile(path, tmp_path / "rank0.log.1")
            os.truncate(path, 0)
            with open(path, "a") as handle:
                handle.write("".join(f"seq {n:06d} rank 0 loss=2.0 {'y' * 20}\n" for n in range(100, 180)))
        return real_pread(fd, length, offset)

    monkeypatch.setattr(tracked_file.os, "pread", rotate_then_read)
    got += _read_until(follower, lambda more: len(more) >= 120, limit=3.0)
    got += follower.close().lines
    assert sorted(by_rank(line.text for line in got)[0]) == list(range(180))


def _read_until(follower, want, limit=10.0):
    got = []
    deadline = time.monotonic() + limit
    while not want(got) and time.monotonic() < deadline:
        got += follower.read(0.1).lines
    return got


@pytest.mark.parametrize("grown", ["after a read", "before the next read"])
def test_truncated_to_a_smaller_size_then_grown_reads_no_kept_line_twice(tmp_path, grown):
    """20 lines with a finding each; ``truncate -s`` keeps the first 10; 10 more are written.
    30 lines are reported, the kept 10 once (they were reported twice: 40)."""
    path = tmp_path / "rank0.log"
    lines = [f"seq {n:06d} rank 0 RuntimeError: CUDA error: an illegal memory access\n" for n in range(20)]
    path.write_text("".join(lines))
    follower = Follower([str(path)])
    got = _read_until(follower, lambda got: len(got) >= 20)
    os.truncate(path, len("".join(lines[:10]).encode()))
    if grown == "after a read":
        got += follower.read(0.3).lines
    with open(path, "a") as handle:
        handle.write("".join(f"seq {n:06d} rank 0 RuntimeError: again\n" for n in range(20, 30)))
    got += _read_until(follower, lambda more: len(more) >= 10)
    got += follower.close().lines
    seqs = by_rank(line.text for line in got)[0]
    assert sorted(seqs) == list(range(30))
    # Numbered as in the file: the new lines follow the 10 kept ones.
    assert [(l.line, LINE.match(l.text).group(1)) for l in got[-10:]][0] == (11, "000020")
