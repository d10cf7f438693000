"""Following real files on disk through rotation and truncation: every line once, none lost."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from monitor.logs.follow import Follower

from follow_helpers import SeqWriter, follow_until_done, seqs

COUNT = 1500


def copytruncate(writer: SeqWriter) -> None:
    """As logrotate does it: shift older copies (.1 -> .2), copy to a new .1, truncate."""
    if os.path.exists(writer.path + ".1"):
        os.rename(writer.path + ".1", writer.path + ".2")
    shutil.copyfile(writer.path, writer.path + ".1")
    os.truncate(writer.path, 0)


def delete_and_recreate(writer: SeqWriter) -> None:
    os.unlink(writer.path)
    writer.reopen()


def truncate_to_zero(writer: SeqWriter) -> None:
    os.truncate(writer.path, 0)


def assert_each_once(lines, count=COUNT):
    got = seqs(lines)
    assert len(got) == len(set(got)), "a line was reported twice"
    assert sorted(got) == list(range(count)), f"lost: {sorted(set(range(count)) - set(got))[:10]}"
    by_file: dict[str, list[int]] = {}
    for line in lines:
        by_file.setdefault(line.file, []).append(line.line)
    for numbers in by_file.values():
        # Consecutive within a generation; a new generation (rotation, truncation) starts at 1.
        steps = zip(numbers, numbers[1:])
        assert all(b == a + 1 or b == 1 for a, b in steps), "line numbers skip within a file"


@pytest.mark.parametrize("target", ["file", "dir"])
def test_rename_rotation_while_old_file_still_written(tmp_path, target):
    path = str(tmp_path / "train.log")
    writer = SeqWriter(path, COUNT)

    def rotate(w: SeqWriter) -> None:
        os.rename(w.path, w.path + ".1")
        w.actions[720] = lambda w2: w2.reopen()  # 20 more lines go to the renamed file

    writer.actions[700] = rotate
    follower = Follower([path if target == "file" else str(tmp_path)])
    lines, ended = follow_until_done(follower, [writer])
    assert_each_once(lines)
    late = [n for line in lines if line.file.endswith(".1") for n in seqs([line])]
    assert late == list(range(700, 720)) or set(late) <= set(range(700, 720))
    assert path in ended


@pytest.mark.parametrize("target", ["file", "dir"])
def test_copytruncate_recovers_unread_lines_from_the_copy(tmp_path, target):
    path = str(tmp_path / "train.log")
    writer = SeqWriter(path, COUNT, actions={500: copytruncate, 1100: copytruncate})
    follower = Follower([path if target == "file" else str(tmp_path)])
    lines, _ = follow_until_done(follower, [writer])
    assert_each_once(lines)
    # After each truncation the numbering starts again at 1, as in the file on disk.
    fresh = [line for line in lines if line.file == path and seqs([line]) in ([500], [1100])]
    assert [line.line for line in fresh] == [1, 1]


def test_copytruncate_with_writer_without_o_append(tmp_path):
    """A writer that keeps its offset after the truncation leaves a hole of NUL bytes."""
    path = str(tmp_path / "train.log")
    writer = SeqWriter(path, COUNT, actions={800: copytruncate}, append=False)
    lines, _ = follow_until_done(Follower([path]), [writer])
    assert_each_once(lines)
    assert not [line for line in lines if "\0" in line.text]


def test_delete_and_recreate(tmp_path):
    path = str(tmp_path / "rank0.log")
    writer = SeqWriter(path, COUNT, actions={300: delete_and_recreate, 900: delete_and_recreate})
    lines, ended = follow_until_done(Follower([path]), [writer])
    assert_each_once(lines)
    assert ended.count(path) >= 2


def test_truncation_to_zero_after_reading_restarts_numbering(tmp_path):
    path = str(tmp_path / "rank0.log")
    first = SeqWriter(path, 200, pause=0)
    follower = Follower([path])
    first.start()
    first.join()
    got = []
    while len(seqs(got)) < 200:
        got += follower.read(0.5).lines
    os.truncate(path, 0)
    with open(path, "a") as handle:
        handle.write("restarted\nseq 000200 again\n")
    update = follower.read(1.0)
    while not update.lines:
        update = follower.read(1.0)
    got += update.lines
    got += follower.close().lines
    assert [(line.line, line.text) for line in got[-2:]] == [(1, "restarted"), (2, "seq 000200 again")]
    assert seqs(got) == list(range(201))


def test_polling_mode_follows_rotation(tmp_path):
    path = str(tmp_path / "train.log")
    writer = SeqWriter(path, COUNT, actions={400: copytruncate, 1000: delete_and_recreate})
    follower = Follower([str(tmp_path)], poll=True, poll_interval=0.02)
    lines, _ = follow_until_done(follower, [writer])
    assert_each_once(lines)


@pytest.mark.parametrize("finished", ["before the rename is seen", "after the rename is seen"])
def test_line_cut_by_a_rename_is_reported_whole(tmp_path, finished):
    """A block-buffered writer flushes mid-line; logrotate renames and creates a new file; the
    writer finishes the line in the renamed file before it reopens the log. Finished before we
    notice the rename, the line is drained under the old name; after, it is completed under the
    new name (from the start of the line, which we had not emitted)."""
    path = tmp_path / "train.log"
    writer = open(path, "ab", buffering=0)
    writer.write(b"complete\npart")
    follower = Follower([str(path)])
    lines = follower.read(0.5).lines
    os.rename(path, str(path) + ".1")
    if finished == "before the rename is seen":
        writer.write(b"ial line\n")
    path.write_bytes(b"fresh\n")
    deadline = time.monotonic() + 5
    while len(lines) < 2 and time.monotonic() < deadline:
        lines += follower.read(0.2).lines
    if finished == "after the rename is seen":
        writer.write(b"ial line\n")
    writer.close()
    while len(lines) < 3 and time.monotonic() < deadline:
        lines += follower.read(0.2).lines
    lines += follower.close().lines
    got = sorted((os.path.basename(l.file), l.line, l.text) for l in lines)
    name = "train.log" if finished == "before the rename is seen" else "train.log.1"
    assert got == sorted([("train.log", 1, "complete"), (name, 2, "partial line"), ("train.log", 1, "fresh")])


def test_file_with_the_same_banner_is_not_taken_for_a_copy(tmp_path):
    banner = "=" * 80 + "\nrun 42: model=llama-7b world_size=8 seed=1\n" + "=" * 80 + "\n" + "config " * 40 + "\n"
    (tmp_path / "train.log").write_text(banner + "rank 0 step 1\n")
    follower = Follower([str(tmp_path / "*")])
    first = follower.read(0.5).lines
    (tmp_path / "train.log-rank1.log").write_text(banner + "rank 1 step 1\n")
    lines = first
    deadline = time.monotonic() + 5
    while not any(l.text == "rank 1 step 1" for l in lines) and time.monotonic() < deadline:
        lines += follower.read(0.2).lines
    follower.close()
    assert [l.text for l in lines if l.text.startswith("rank")] == ["rank 0 step 1", "rank 1 step 1"]


def _read_all(follower: Follower, want, limit: float = 10.0):
    got = []
    deadline = time.monotonic() + limit
    while not want(got) and time.monotonic() < deadline:
        got += follower.read(0.2).lines
    return got


def test_truncated_and_regrown_past_our_offset_under_the_same_banner_is_read_again(tmp_path):
    """Truncated to zero and written past where we were between two reads, under a first line
    that is the same every run: the new lines before our old offset are not lost."""
    path = tmp_path / "rank0.log"
    banner = "=" * 300 + " training run\n"
    path.write_text(banner + "".join(f"seq {n:06d} first run\n" for n in range(65)))
    follower = Follower([str(path)])
    got = _read_all(follower, lambda got: len(seqs(got)) >= 65)
    with open(path, "r+") as handle:  # truncate and regrow at once: no read sees the short file
        handle.truncate(0)
        handle.write(banner + "".join(f"seq {n:06d} second run {'x' * 10}\n" for n in range(65, 165)))
    got += _read_all(follower, lambda more: len(seqs(more)) >= 100)
    got += follower.close().lines
    assert seqs(got) == list(range(165))


def test_the_rotations_of_a_folder_are_indexed_by_the_names_they_rotate():
    """One listing answers every live file of a folder at once (thousands of files first written
    in one round): the same names as asking is_rotated_name of each."""
    from monitor.logs.tracked_file import is_rotated_name, rotations_by_base

    names = ["app.log", "app.log.1", "app.log-20250101", "app.log_old", "app.log.2.gz", "rank0.log",
             "rank0.log.10", "rank10.log", "x.", "a_b", "stdout.log.1.bz2"]
    index = rotations_by_base(names)
    for base in ["app.log", "app", "app.log.1", "rank0.log", "rank1", "x", "a", "stdout.log"]:
        assert sorted(index.get(base, [])) == sorted(n for n in names if is_rotated_name(base, n)), base
