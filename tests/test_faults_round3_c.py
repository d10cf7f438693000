"""Faults of round 3 (2026-11-25) in what the monitor reads as untrusted input: checkpoints whose
pickle or zip member claims gigabytes (F7), flight-recorder dumps with a non-finite number (F8)
or made of memo references (F9), and rule files that are devices, FIFOs or nested too deep (F10).

Each runs the real command in its own process and measures what that process cost (its peak
RSS from wait4: the largest of the command and the reader processes it starts), under an
address-space limit so that a regression fails here instead of taking the machine's memory."""

from __future__ import annotations

import os
import pickle
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from monitor.flight_recorder import dumps

ROOT = Path(__file__).resolve().parents[1]
# Issue #32: no input makes the monitor use more than 200 MB. The faults took gigabytes; what
# still made many objects (4 million sets: 930 MB) is now bounded by the reader process's limit.
MAX_RSS_KB = 200_000
# A fault reaches this instead of the machine's memory (the test then fails on its output).
ADDRESS_SPACE = 3 << 30
TRACEBACK = 'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nValueError: x\n'


@dataclass
class Ran:
    returncode: int
    output: str
    maxrss_kb: int


# Between the test and the command, a small Python that runs it and reports its rusage: a process's
# ru_maxrss starts at the size of the process it was forked from (kept across exec), and pytest
# has grown to hundreds of MB once other test modules imported torch.
MEASURE = ("import os, subprocess, sys\n"
           "child = subprocess.Popen(sys.argv[1:])\n"
           "_, status, usage = os.wait4(child.pid, 0)\n"
           "sys.stdout.write(f'\\n@maxrss {usage.ru_maxrss}\\n')\n"
           "sys.exit(os.waitstatus_to_exitcode(status))\n")


def monitor(*args: str, cwd: Path, timeout: float = 120) -> Ran:
    """``python -m monitor ARGS`` in its own process: exit code, stdout+stderr, peak RSS (the
    command's and that of the reader processes it starts, whichever is the largest)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    env = {**os.environ, "COLUMNS": "400", "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen([sys.executable, "-c", MEASURE, sys.executable, "-m", "monitor", *args], cwd=cwd,
                                   env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   preexec_fn=limit, start_new_session=True)
        # A FIFO that blocks must not block the tests.
        timer = threading.Timer(timeout, lambda: os.killpg(process.pid, signal.SIGKILL))
        timer.start()
        try:
            process.wait()
        finally:
            timer.cancel()
        out.seek(0)
        output, _, maxrss = out.read().decode(errors="replace").rpartition("\n@maxrss ")
        return Ran(process.returncode, output, int(maxrss) if maxrss.strip().isdigit() else 1 << 40)


def assert_one_line_each(ran: Ran) -> None:
    assert "Traceback" not in ran.output, ran.output
    assert ran.maxrss_kb < MAX_RSS_KB, (ran.maxrss_kb, ran.output)


# -- F7: check-ckpt reads what the file claims ---------------------------------------------------
def test_f7_a_zip_bomb_checkpoint_is_refused_by_its_declared_size(tmp_path: Path):
    bomb = tmp_path / "bomb.pt"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
            for _ in range(32):
                member.write(bytes(1 << 24))  # 512 MiB of zeros in 2 MB
    ran = monitor("check-ckpt", str(bomb), cwd=tmp_path)
    assert_one_line_each(ran)
    assert ran.returncode == 1
    assert "BAD" in ran.output and "data.pkl" in ran.output and "512.0 MiB" in ran.output, ran.output
    # Under the size cap, 200 million one-byte opcodes (EMPTY_DICT) in 200 KB: 13 GB of dicts, or
    # 300 MB before the opcode bound: the reader process's memory limit refuses it first.
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("archive/data.pkl", "w", force_zip64=True) as member:
            member.write(b"\x80\x02")
            for _ in range(200):
                member.write(b"}" * (1 << 20))
    ran = monitor("check-ckpt", str(bomb), cwd=tmp_path)
    assert_one_line_each(ran)
    assert ran.returncode == 1 and "BAD" in ran.output and "refused: reading it needs more than" in ran.output, ran.output
    # 4.1 million opcodes that make nothing (None, popped): the opcode bound's clearer line.
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02" + b"N0" * 2_050_000 + b"N.")
    ran = monitor("check-ckpt", str(bomb), cwd=tmp_path)
    assert_one_line_each(ran)
    assert ran.returncode == 1 and "more than 4,000,000 opcodes" in ran.output, ran.output


def test_f7_a_pickle_claiming_gigabytes_is_refused_before_it_is_read(tmp_path: Path):
    legacy = tmp_path / "legacybomb.pt"  # PROTO 4, BINBYTES8 of 3 GiB: sparse, 4 KB on disk
    with legacy.open("wb") as file:
        file.write(b"\x80\x04\x8e" + struct.pack("<Q", 3 << 30))
        file.truncate(11 + (3 << 30) + 1)
    line = tmp_path / "line.pkl"  # protocol 0: a unicode string whose line never ends
    with line.open("wb") as file:
        file.write(b"V")
        file.truncate(1 << 30)
    steps = tmp_path / "steps.pkl"  # 4.1 million opcodes, each pushing None
    steps.write_bytes(b"\x80\x04" + b"N" * 4_100_000 + b".")
    for path in (legacy, line, steps):
        ran = monitor("check-ckpt", str(path), cwd=tmp_path)
        assert_one_line_each(ran)
        assert ran.returncode == 1 and ran.output.startswith("BAD"), ran.output
        assert len(ran.output.strip().splitlines()) == 1, ran.output
    # 9 bytes: None put at memo index 100 million (the C unpickler allocates an array that long:
    # 1.5 GB). A valid pickle, read for what it is.
    memo = tmp_path / "memo.pkl"
    memo.write_bytes(b"\x80\x02Nr" + struct.pack("<I", 100_000_000) + b".")
    ran = monitor("check-ckpt", str(memo), cwd=tmp_path)
    assert_one_line_each(ran)
    assert ran.returncode == 0 and ran.output.startswith("OK"), ran.output


def test_f7_real_checkpoints_still_pass_through_the_bounded_reader(tmp_path: Path):
    torch = __import__("pytest").importorskip("torch")
    state = {"w": torch.randn(64, 32), "step": 3, "names": ["a" * 1000] * 50}
    torch.save(state, tmp_path / "zip.pt")
    torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"x": list(range(10_000)), "b": b"x" * 100_000}, protocol=5))
    ran = monitor("check-ckpt", str(tmp_path), cwd=tmp_path)
    assert ran.returncode == 0, ran.output
    assert ran.output.count("OK") == 3, ran.output


# -- F8: a non-finite number in a dump -----------------------------------------------------------
def _run_folder(tmp_path: Path, log: str = TRACEBACK) -> Path:
    logs = tmp_path / "logs"
    (logs / "run-20260101-000000.fr").mkdir(parents=True)
    (logs / "run-20260101-000000.log").write_text(log)
    return logs / "run-20260101-000000.fr"


def test_f8_a_dump_with_inf_or_a_deep_ranks_string_is_one_problem_line(tmp_path: Path):
    fr = _run_folder(tmp_path)
    entry = {"process_group": ("0", "default_pg"), "collective_seq_id": 1, "profiling_name": "nccl:all_reduce"}
    bad = {
        "dump-rank0": {"entries": [{**entry, "collective_seq_id": float("inf")}]},
        "dump-rank1": {"entries": [{**entry, "frames": [{"name": "f", "filename": "t.py", "line": float("-inf")}]}]},
        "dump-rank2": {"entries": [], "pg_config": {"0": {"name": "0", "ranks": "-" * 100_000 + "1"}}},  # MemoryError
        "dump-rank3": {"entries": [], "pg_config": {"0": {"name": "0", "ranks": "1+" * 100_000 + "1"}}},  # RecursionError
    }
    for name, raw in bad.items():
        (fr / name).write_bytes(pickle.dumps(raw, protocol=2))
    ran = monitor("diagnose", "logs", cwd=tmp_path)
    assert_one_line_each(ran)
    assert ran.returncode == 1, ran.output
    assert "ValueError" in ran.output
    for name in bad:
        assert sum(f"{name}: not a flight-recorder dump" in line for line in ran.output.splitlines()) == 1, ran.output


# -- F9: a dump that expands ----------------------------------------------------------------------
def _entry(seq: int, frames: int = 4) -> dict:
    return {"process_group": ("0", "default_pg"), "collective_seq_id": seq, "profiling_name": "nccl:all_reduce",
            "frames": [{"name": "f", "filename": "t.py", "line": 1}] * frames}


def test_f9_a_dump_of_memo_references_costs_what_a_real_dump_does(tmp_path: Path):
    fr = _run_folder(tmp_path, "hello\n")
    # One entry referenced 2 million times (4 MB); one entry with a million frames; a memo index of
    # 100 million (five bytes: the C unpickler allocates a memo array that long, 1.5 GB); 4.1
    # million opcodes each making a dict (300 MB: the reader process's memory limit refuses it); a
    # bytearray claiming 3 GiB.
    (fr / "dump-rank0").write_bytes(pickle.dumps({"entries": [_entry(1)] * 2_000_000}, protocol=2))
    (fr / "dump-rank1").write_bytes(pickle.dumps({"entries": [_entry(1, frames=1_000_000)]}, protocol=2))
    (fr / "dump-rank2").write_bytes(b"\x80\x02}r" + struct.pack("<I", 100_000_000) + b".")
    (fr / "dump-rank3").write_bytes(b"\x80\x04" + b"}" * 4_100_000 + b".")
    (fr / "dump-rank4").write_bytes(b"\x80\x05\x96" + struct.pack("<Q", 3 << 30))  # a 3 GiB bytearray, 11 bytes
    ran = monitor("diagnose", "logs", cwd=tmp_path, timeout=60)
    assert_one_line_each(ran)
    assert ran.returncode == 0, ran.output
    assert "dump-rank2: not a flight-recorder dump (ValueError: no 'entries')" in ran.output, ran.output
    assert "dump-rank3: refused: reading it needs more than 128 MB" in ran.output, ran.output
    assert "dump-rank4: not a readable flight-recorder dump" in ran.output, ran.output


def test_f9_the_newest_entries_and_the_innermost_frames_are_kept(tmp_path: Path):
    path = tmp_path / "dump-rank0"
    entries = [_entry(seq) for seq in range(dumps.MAX_ENTRIES + 10)]
    entries[-1]["frames"] = [{"name": f"f{n}", "filename": "t.py", "line": n} for n in range(dumps.MAX_FRAMES + 10)]
    path.write_bytes(pickle.dumps({"entries": entries}, protocol=2))
    dump = dumps.load(path)
    assert len(dump.entries) == dumps.MAX_ENTRIES
    assert dump.entries[0].seq == 10 and dump.entries[-1].seq == dumps.MAX_ENTRIES + 9  # torch's ring keeps the newest
    assert [f.line for f in dump.entries[-1].frames] == list(range(dumps.MAX_FRAMES))  # innermost first


# -- F10: rule files that are not files, or nested too deep ---------------------------------------
RULE = """[[rule]]
id = "my-rule"
category = "python_exception"
severity = "error"
role = "root"
title = "mine"
patterns = ['hello (?P<x>\\d+)']
remedy = "x"
[[rule.advice]]
text = "adv"
when = "{when}"
[rule.examples]
match = ["hello 1"]
"""


def _rules(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


def test_f10_a_rule_file_that_is_a_device_a_fifo_or_too_big_is_one_line(tmp_path: Path):
    (tmp_path / "x.log").write_text("hello\n")
    (_rules(tmp_path, "zero") / "zero.toml").symlink_to("/dev/zero")
    os.mkfifo(_rules(tmp_path, "fifo") / "fifo.toml")
    with (_rules(tmp_path, "big") / "big.toml").open("wb") as file:
        file.truncate(1 << 30)  # a regular file, sparse: 1 GiB of NULs
    for folder, expected in (("zero", "zero.toml:1: rule file is not a regular file"),
                             ("fifo", "fifo.toml:1: rule file is not a regular file"),
                             ("big", "big.toml:1: rule file is larger than")):
        ran = monitor("diagnose", "--rules", folder, "x.log", cwd=tmp_path, timeout=30)
        assert_one_line_each(ran)
        assert ran.returncode == 2, (folder, ran.output)
        assert expected in ran.output and len(ran.output.strip().splitlines()) == 1, ran.output


def test_f10_a_when_nested_too_deep_names_its_file_and_line(tmp_path: Path):
    (tmp_path / "x.log").write_text("hello 1\n")
    for name, when in (("parser", "not " * 200_000 + "x"), ("ast", "1+" * 100_000 + "x"),
                       ("evaluation", "not " * 1_500 + "x")):
        (_rules(tmp_path, name) / "deep.toml").write_text(RULE.format(when=when))
        ran = monitor("diagnose", "--rules", name, "x.log", cwd=tmp_path, timeout=60)
        assert_one_line_each(ran)
        assert ran.returncode == 2, (name, ran.output)
        assert "deep.toml:11:" in ran.output and "too deeply nested" in ran.output, ran.output
        assert len(ran.output.strip().splitlines()) == 1, ran.output
