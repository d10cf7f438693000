"""Following awkward input: partial lines, progress bars, bad bytes, huge lines, many files."""

from __future__ import annotations

import os
import time
import tracemalloc

import pytest

from monitor.logs.decode import MAX_LINE_BYTES, TRUNCATION_MARK
from monitor.text import clean
from monitor.logs.follow import Follower
from monitor.logs.sources import SourceError
from tests.clock_helpers import FakeClock


def read_until(follower: Follower, count: int, limit: float = 10.0):
    lines = []
    deadline = time.monotonic() + limit
    while len(lines) < count and time.monotonic() < deadline:
        lines += follower.read(0.05).lines
    return lines


def append(path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def test_partial_line_is_held_then_emitted_once(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(b"first\nsec")
    follower = Follower([str(log)])
    assert [l.text for l in read_until(follower, 1)] == ["first"]
    assert follower.read(0.2).lines == []
    assert follower.pending() == {str(log): "sec"}
    append(log, b"ond\nthi")
    assert [(l.line, l.text) for l in read_until(follower, 1)] == [(2, "second")]
    final = follower.close()
    assert [(l.line, l.text) for l in final.lines] == [(3, "thi")]


def test_progress_bar_keeps_its_last_state_and_stays_small(tmp_path):
    log = tmp_path / "a.log"
    log.touch()
    follower = Follower([str(log)])
    for chunk in range(20):
        append(log, b"".join(b"\r%3d%%|%s|" % (i, b"#" * (i // 10)) for i in range(chunk * 5, chunk * 5 + 5)))
        follower.read(0.01)
    assert follower.pending()[str(log)] == " 99%|#########|"
    assert len(follower._files[str(log)].assembler.pending) < 100
    append(log, b"\rdone\n")
    assert [l.text for l in read_until(follower, 1)] == ["done"]
    follower.close()


def test_bad_bytes_escape_codes_and_markup(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(
        b"\x1b[31mred [bold]not markup[/bold]\x1b[0m\n"
        b"bad utf8 \xff\xfe here\n"
        b"nul\x00\x00 bytes\n"
        b"\x00\x00\x00\x00\n"
        b"crlf line\r\n"
    )
    follower = Follower([str(log)])
    texts = [l.text for l in read_until(follower, 5)]
    follower.close()
    assert texts == ["red [bold]not markup[/bold]", "bad utf8 \ufffd\ufffd here", "nul bytes", "", "crlf line"]


def test_hundred_megabyte_line_is_capped_with_bounded_memory(tmp_path):
    log = tmp_path / "huge.log"
    log.write_bytes(b"before\n")
    follower = Follower([str(log)])
    assert [l.text for l in read_until(follower, 1)] == ["before"]
    block = b"A" * (1 << 20)
    with open(log, "ab") as handle:
        for _ in range(100):
            handle.write(block)
        handle.write(b" tail\nafter\n")
    tracemalloc.start()
    lines = read_until(follower, 2, limit=30)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    follower.close()
    assert [l.line for l in lines] == [2, 3]
    # Cut, marked where with what was left out (the line says so, as data too), its end kept (an
    # error after a dumped tensor), bounded.
    mark = TRUNCATION_MARK.format(left_out=lines[0].left_out)
    assert lines[0].left_out == 100 * (1 << 20) + 5 - MAX_LINE_BYTES
    assert mark in lines[0].text and lines[0].text.endswith(" tail")
    assert len(lines[0].text) <= MAX_LINE_BYTES + len(mark)
    assert lines[1].text == "after"
    assert peak < 16 * (1 << 20), f"peak {peak / 2**20:.1f} MiB"


def test_binary_file_is_reported_once_and_skipped(tmp_path):
    (tmp_path / "model.log").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "train.log").write_text("hello\n")
    follower = Follower([str(tmp_path)])
    update = follower.read(0.5)
    follower.close()
    assert [l.text for l in update.lines] == ["hello"]
    assert update.problems == [f"{tmp_path / 'model.log'}: binary file, not read as a log"]


def test_thousands_of_files_within_a_small_descriptor_budget(tmp_path):
    count = 1500
    for i in range(count):
        (tmp_path / f"rank{i}.log").write_text(f"hello from {i}\n")
    fds_before = len(os.listdir("/proc/self/fd"))
    follower = Follower([str(tmp_path)], max_open=32)
    first = read_until(follower, count, limit=30)
    for i in range(count):
        append(tmp_path / f"rank{i}.log", f"bye from {i}\n".encode())
    second = read_until(follower, count, limit=30)
    fds_during = len(os.listdir("/proc/self/fd"))
    follower.close()
    assert sorted(l.text for l in first) == sorted(f"hello from {i}" for i in range(count))
    assert sorted(l.text for l in second) == sorted(f"bye from {i}" for i in range(count))
    assert all(l.line == 2 for l in second)
    assert fds_during - fds_before <= 32 + 8  # the cache plus inotify's own descriptors


def test_glob_and_files_created_later(tmp_path):
    follower = Follower([str(tmp_path / "attempt_*" / "*" / "stderr.log")])
    assert follower.read(0.1).lines == []
    (tmp_path / "attempt_0" / "2").mkdir(parents=True)
    (tmp_path / "attempt_0" / "2" / "stderr.log").write_text("rank two\n")
    (tmp_path / "attempt_0" / "2" / "stdout.log").write_text("not matched\n")
    lines = read_until(follower, 1, limit=5)
    follower.close()
    assert [(os.path.relpath(l.file, tmp_path), l.text) for l in lines] == [("attempt_0/2/stderr.log", "rank two")]


def test_polling_picks_up_new_files_and_growth(tmp_path):
    follower = Follower([str(tmp_path)], poll=True, poll_interval=0.05)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "w.log").write_text("one\n")
    assert [l.text for l in read_until(follower, 1)] == ["one"]
    append(tmp_path / "sub" / "w.log", b"two\n")
    assert [l.text for l in read_until(follower, 1)] == ["two"]
    follower.close()


def test_file_that_does_not_exist_yet_is_followed_once_created(tmp_path):
    log = tmp_path / "later.log"
    follower = Follower([str(log)])
    assert follower.read(0.1).lines == []
    log.write_text("appeared\n")
    assert [l.text for l in read_until(follower, 1)] == ["appeared"]
    follower.close()


def test_unusable_paths_are_one_line_errors(tmp_path):
    with pytest.raises(SourceError, match=r"no such file or directory$"):
        Follower([str(tmp_path / "missing" / "x.log")])
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(SourceError, match="not a regular file"):
        Follower([str(tmp_path / "pipe")])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_file_is_reported_and_recovers(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("one\n")
    log.chmod(0)
    follower = Follower([str(log)], poll=True, poll_interval=0.05)
    update = follower.read(0.2)
    assert update.lines == [] and len(update.problems) == 1 and "cannot read" in update.problems[0]
    assert follower.read(0.2).problems == []  # reported once
    log.chmod(0o644)
    assert [l.text for l in read_until(follower, 1)] == ["one"]
    follower.close()


def test_permission_error_is_reported_once_and_recovers(tmp_path, monkeypatch):
    """The same as above where the tests run as root: opening fails as it does for EACCES."""
    import monitor.logs.tracked_file as followed

    log = tmp_path / "a.log"
    log.write_text("one\n")
    real_open = os.open
    denied = {str(log)}

    def open_or_deny(path, flags, *args):
        if str(path) in denied:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(followed.os, "open", open_or_deny)
    follower = Follower([str(log)], poll=True, poll_interval=0.05)
    update = follower.read(0.2)
    assert update.lines == [] and update.problems == [f"{log}: cannot read: Permission denied"]
    assert follower.read(0.2).problems == []
    denied.clear()
    assert [l.text for l in read_until(follower, 1)] == ["one"]
    follower.close()


def test_switches_to_polling_when_file_events_do_not_arrive(tmp_path, monkeypatch):
    """As on NFS written from another node: the directory is watched, no event ever comes. The
    follower's clock is moved by the test: the safety poll that finds the lines is seconds away."""
    from monitor.logs import follow

    class NoEvents:
        def get(self, timeout):
            return None

        def drain(self):
            return []

        def take_problems(self):
            return []

        def close(self):
            pass

    monkeypatch.setattr(follow, "open_file_events", lambda watches: NoEvents())
    log = tmp_path / "a.log"
    log.write_text("one\n")
    clock = FakeClock()
    follower = Follower([str(log)], clock=clock)
    assert [l.text for l in read_until(follower, 1)] == ["one"] and not follower.polling
    append(log, b"two\n")
    start = clock.monotonic()
    # No event: nothing is read until the safety poll, which finds lines written over
    # MISSED_EVENT_S ago that no event announced.
    update = follower.read(follow.SAFETY_POLL_S / 2)
    assert update.lines == [] and update.problems == [] and not follower.polling
    update = follower.read(follow.SAFETY_POLL_S)
    assert [l.text for l in update.lines] == ["two"]
    assert clock.monotonic() - start >= follow.SAFETY_POLL_S
    assert follower.polling
    assert update.problems == [f"{log}: no file events for new lines (network file system?); polling every 0.5 s"]
    append(log, b"three\n")
    update = follower.read(follow.POLL_S)  # one poll interval
    assert [l.text for l in update.lines] == ["three"]
    follower.close()


def test_clean_drops_invisible_characters_that_change_how_a_line_reads():
    # A right-to-left override can make a log line display differently from what it holds
    # ("Trojan Source"); zero-width characters hide inside words; none of them may reach a
    # report or the screen. Tabs stay.
    raw = "[rank0]: loss \u202enan\u202c ok\u200b \ufeffstep\t3 \u2066x\u2069\x85".encode()
    assert clean(raw) == "[rank0]: loss nan ok step\t3 x"


def test_a_long_line_is_read_through_without_waiting_between_chunks(tmp_path):
    # A 20 MB line is read 1 MB at a time; the follower must go straight on to the next chunk
    # rather than wait for a file event that will not come (the writer has finished).
    log = tmp_path / "big.log"
    log.write_bytes(b"")
    follower = Follower([str(log)], poll=True)
    waits: list[float] = []
    real_wait = follower._wait
    follower._wait = lambda seconds: (waits.append(seconds), real_wait(seconds))[1]
    try:
        follower.read(0.05)
        waits.clear()
        log.write_bytes(b"x" * (20 * 1024 * 1024) + b"\n[rank0]: torch.OutOfMemoryError: CUDA out of memory.\n")
        texts: list[str] = []
        while not any("OutOfMemoryError" in t for t in texts):
            texts.extend(line.text for line in follower.read(5.0).lines)
        assert len(texts) == 2 and "…[line cut: 20,905,984 bytes left out]" in texts[0]
        assert len(waits) <= 2, waits
    finally:
        follower.close()


@pytest.mark.parametrize("body", [
    b"".join(b"\x01\x02 step %d loss 1.0\n" % i for i in range(50)),  # control-heavy text
    b"\0" * 4096 + b"step 1 loss 1.0\n",  # a preallocated file's NUL hole, then text
    b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 8,  # a program
])
def test_watch_and_diagnose_agree_on_what_is_binary(tmp_path, body):
    from monitor.logs.reader import UnreadableLog, read_log

    log = tmp_path / "x.log"
    log.write_bytes(body)
    try:
        read_by_diagnose = [line.text for line in read_log(log)]
    except UnreadableLog:
        read_by_diagnose = None
    follower = Follower([str(log)])
    try:
        update = follower.read(0.5)
        binary_live = any("binary" in p for p in update.problems)
        assert binary_live == (read_by_diagnose is None)
        if read_by_diagnose is not None:
            assert [line.text for line in update.lines] == read_by_diagnose
    finally:
        follower.close()
