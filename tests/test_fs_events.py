"""File events on real folders: inotify read in the follower's thread (Linux), and watchdog's
observer (elsewhere; run here too, so that path is not left untested)."""

from __future__ import annotations

import ctypes
import errno
import os
import time

import pytest

from monitor.logs import follow, inotify
from monitor.logs.follow import Follower
from monitor.logs.fs_events import RESCAN
from monitor.logs.inotify import InotifyEvents
from monitor.logs.watchdog_events import WatchdogEvents

from follow_helpers import SeqWriter, follow_until_done, seqs

BACKENDS = {"inotify": InotifyEvents, "watchdog": WatchdogEvents}
REAL_LIBC = inotify._libc
# watchdog's own note when a folder tree appears at once (watchdog_events silences it outside
# pytest, which resets warning filters per test).
pytestmark = pytest.mark.filterwarnings("ignore:Callback with id:RuntimeWarning")


def queued_events_limit() -> int:
    """fs.inotify.max_queued_events: how many events overflow the queue (16384 by default)."""
    limit = int(open("/proc/sys/fs/inotify/max_queued_events").read())
    if limit > 100_000:
        pytest.skip(f"fs.inotify.max_queued_events is {limit}: too many files to overflow it in a test")
    return limit


@pytest.fixture(params=sorted(BACKENDS))
def backend(request):
    return BACKENDS[request.param]


def collect(events, until, timeout=5.0) -> list[str]:
    """Paths reported until ``until(paths)`` holds (or the timeout)."""
    paths: list[str] = []
    deadline = time.monotonic() + timeout
    while not until(paths) and time.monotonic() < deadline:
        path = events.get(0.1)
        if path is not None:
            paths.append(path)
        paths += events.drain()
    return paths


def test_writes_renames_and_new_folders_are_reported(tmp_path, backend):
    events = backend([(str(tmp_path), False)])
    try:
        log = tmp_path / "rank0.log"
        with open(log, "ab") as handle:
            handle.write(b"step 1\n")
        assert str(log) in collect(events, lambda p: str(log) in p)
        os.rename(log, tmp_path / "rank0.log.1")
        moved = collect(events, lambda p: str(tmp_path / "rank0.log.1") in p)
        assert {str(log), str(tmp_path / "rank0.log.1")} <= set(moved)
        (tmp_path / "attempt_0").mkdir()
        assert RESCAN in collect(events, lambda p: RESCAN in p)
    finally:
        events.close()


def test_a_recursive_watch_covers_folders_created_later(tmp_path, backend):
    # torchrun --log-dir creates attempt_0/<rank>/ after the job started.
    events = backend([(str(tmp_path), True)])
    try:
        rank_dir = tmp_path / "attempt_0" / "3"
        rank_dir.mkdir(parents=True)
        collect(events, lambda p: False, timeout=0.5)  # the new folders get their watches
        log = rank_dir / "stderr.log"
        with open(log, "ab") as handle:
            handle.write(b"[rank3]: step 1\n")
        assert str(log) in collect(events, lambda p: str(log) in p)
    finally:
        events.close()


def test_a_lost_event_queue_makes_the_follower_look_at_every_file(tmp_path):
    # More events than the kernel queues (fs.inotify.max_queued_events, 16384 by default): the
    # queue overflows, the events of rank2's write are lost, and rank2 must be read anyway.
    limit = queued_events_limit()
    paths = [tmp_path / f"rank{r}.log" for r in range(3)]
    for path in paths:
        path.touch()
    follower = Follower([str(tmp_path)])
    assert len(follower.read(0.2).new_files) == 3
    fds = [os.open(p, os.O_WRONLY | os.O_APPEND) for p in paths]
    writes = limit + 100
    for n in range(writes):  # alternating files: consecutive events differ, none are merged
        os.write(fds[n % 2], f"line {n}\n".encode())
    os.write(fds[2], b"rank2 last words\n")
    for fd in fds:
        os.close(fd)
    follower._take_events()
    assert str(paths[2]) in follower._dirty
    got = []
    deadline = time.monotonic() + 10
    while len(got) < writes + 1 and time.monotonic() < deadline:
        got += follower.read(0.1).lines
    assert len(got) == writes + 1 and got[-1].text == "rank2 last words"
    follower.close()


def test_the_inotify_watch_limit_falls_back_to_polling_and_says_which_limit(tmp_path, monkeypatch):
    real = inotify._libc()

    class LimitReached:
        inotify_init1 = real.inotify_init1

        @staticmethod
        def inotify_add_watch(fd, path, mask):
            ctypes.set_errno(errno.ENOSPC)
            return -1

    monkeypatch.setattr(inotify, "_libc", lambda: LimitReached)
    log = tmp_path / "train.log"
    log.write_text("one\n")
    follower = Follower([str(log)], poll_interval=0.05)
    update = follower.read(0.5)
    assert follower.polling
    assert update.problems == [
        f"file events unavailable (watching {tmp_path}: the inotify watch limit is reached "
        "(sysctl fs.inotify.max_user_watches)); polling every 0.05 s"
    ]
    with open(log, "a") as handle:
        handle.write("two\n")
    got = update.lines
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        got += follower.read(0.1).lines
    assert [line.text for line in got] == ["one", "two"]
    follower.close()


def test_rotation_is_followed_on_watchdogs_events_too(tmp_path, monkeypatch):
    monkeypatch.setattr(follow, "open_file_events", WatchdogEvents)
    path = str(tmp_path / "train.log")
    writer = SeqWriter(path, 1500)

    def rotate(w: SeqWriter) -> None:
        os.rename(w.path, w.path + ".1")
        w.actions[720] = lambda w2: w2.reopen()

    writer.actions[700] = rotate
    follower = Follower([str(tmp_path)])
    assert isinstance(follower._events, WatchdogEvents)
    lines, _ = follow_until_done(follower, [writer])
    assert sorted(seqs(lines)) == list(range(1500))


def read_lines(follower, want: int, seconds: float = 5.0):
    lines, problems = [], []
    deadline = time.monotonic() + seconds
    while len(lines) < want and time.monotonic() < deadline:
        update = follower.read(0.05)
        lines += update.lines
        problems += update.problems
    return lines, problems


def test_a_folder_created_while_events_were_lost_is_watched(tmp_path):
    # The queue overflows while torchrun creates attempt_0/0/: events for it are lost with the
    # rest, so the folder must get its watch on the overflow, not be left to polling.
    limit = queued_events_limit()
    (tmp_path / "a.log").write_text("x1\n")
    follower = Follower([str(tmp_path)])
    assert [line.text for line in read_lines(follower, 1)[0]] == ["x1"]
    for n in range(limit + 500):
        (tmp_path / f"junk{n}.bin").touch()
    rank_log = tmp_path / "attempt_0" / "0" / "stderr.log"
    rank_log.parent.mkdir(parents=True)
    with open(rank_log, "w") as handle:
        handle.write("hello\n")
        handle.flush()
        lines, problems = read_lines(follower, 1)
        assert [line.text for line in lines] == ["hello"] and problems == []
        handle.write("second\n")
        handle.flush()
        lines, problems = read_lines(follower, 1)
    assert [line.text for line in lines] == ["second"] and problems == [] and not follower.polling
    follower.close()


class WatchLimitFor:
    """libc whose inotify_add_watch fails with ENOSPC (the watch limit) for folders named ``name``."""

    def __init__(self, name: str) -> None:
        self.real = REAL_LIBC()
        self.name = name.encode()

    def __getattr__(self, attribute):
        return getattr(self.real, attribute)

    def inotify_add_watch(self, fd, path, mask):
        if os.path.basename(path) == self.name:
            ctypes.set_errno(errno.ENOSPC)
            return -1
        return self.real.inotify_add_watch(fd, path, mask)


def test_following_more_paths_past_the_watch_limit_polls_instead(tmp_path, monkeypatch):
    # The run screen adds torchrun's per-rank files as they appear; a watch that cannot be added
    # then must not stop the reading of every log.
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.log").write_text("1\n")
    (tmp_path / "b" / "y.log").write_text("2\n")
    follower = Follower([str(tmp_path / "a")], poll_interval=0.05)
    assert [line.text for line in read_lines(follower, 1)[0]] == ["1"]
    monkeypatch.setattr(inotify, "_libc", lambda: WatchLimitFor("b"))
    follower.add([str(tmp_path / "b" / "y.log")])
    lines, problems = read_lines(follower, 1)
    assert [line.text for line in lines] == ["2"] and follower.polling
    assert problems == [f"file events unavailable (watching {tmp_path / 'b'}: the inotify watch limit is reached "
                        "(sysctl fs.inotify.max_user_watches)); polling every 0.05 s"]
    follower.close()


def test_a_sub_folder_past_the_watch_limit_switches_to_polling_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(inotify, "_libc", lambda: WatchLimitFor("3"))
    follower = Follower([str(tmp_path)], poll_interval=0.05)
    rank_log = tmp_path / "attempt_0" / "3" / "stderr.log"
    rank_log.parent.mkdir(parents=True)
    rank_log.write_text("[rank3]: hello\n")
    lines, problems = read_lines(follower, 1)
    assert [line.text for line in lines] == ["[rank3]: hello"] and follower.polling
    assert problems == [f"file events unavailable (watching {rank_log.parent}: the inotify watch limit is reached "
                        "(sysctl fs.inotify.max_user_watches)); polling every 0.05 s"]
    follower.close()
