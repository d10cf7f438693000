"""Reading untrusted files in a child process the operating system bounds (issue #32: no input
makes the monitor use more than 200 MB or hang; faults round 3, F7 and F9).

The peaks are measured for what they are: the reader process's own (its VmHWM, which
``run_bounded`` reports) and the process that asked (its own VmHWM), in a fresh Python. Not
getrusage: a process's ru_maxrss starts at the size of the process it was forked from (kept
across exec), so a reader started by pytest would show pytest's size."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from monitor import untrusted
from monitor.checkpoints import verify
from monitor.flight_recorder import dumps

ROOT = Path(__file__).resolve().parents[1]
LIMIT_KB = 200_000  # 200 MB
# Four million empty sets: 930 MB before this change (checkpoint: 934,000 kB peak RSS).
SETS = b"\x80\x04" + b"\x8f" * 3_990_000 + b"."
# Four million empty dicts in a dump (sets are refused there): 312,000 kB before.
DICTS = b"\x80\x04" + b"}" * 3_990_000 + b"."


def measured(code: str) -> dict:
    """Run ``code`` (which sets ``result``) in a fresh Python; its result and its own peak RSS."""
    program = ("import json, sys\n" + code + "\nfrom monitor.untrusted import _peak_rss_kb"
               "\nprint(json.dumps({'result': result, 'self_kb': _peak_rss_kb()}))")
    out = subprocess.run([sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_checkpoint_of_millions_of_sets_is_refused_under_200_mb(tmp_path: Path):
    (tmp_path / "sets.pkl").write_bytes(SETS)
    with zipfile.ZipFile(tmp_path / "sets.pt", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", SETS)
    for name in ("sets.pkl", "sets.pt"):
        path = tmp_path / name
        got = measured(
            "from monitor.checkpoints import verify\n"
            f"kind = verify._kind(open({str(path)!r}, 'rb').read(64), 1 << 20)\n"
            "usage = {}\n"
            "try:\n"
            f"    verify.run_bounded('monitor.checkpoints.verify:_check_in_child', {str(path)!r}, kind, 'deep', usage=usage)\n"
            "except verify.Refused as exc:\n"
            "    why = str(exc)\n"
            f"result = [why, usage, verify.check_checkpoint(verify.Path({str(path)!r})).line()]")
        why, usage, line = got["result"]
        assert why == "reading it needs more than 128 MB", why
        assert 0 < usage["peak_rss_kb"] < LIMIT_KB, usage
        assert 0 < got["self_kb"] < LIMIT_KB, got
        # The monitor and its reader together, at their peaks, stay under the bound too.
        assert usage["peak_rss_kb"] + got["self_kb"] < LIMIT_KB, (usage, got)
        assert line == f"BAD     {path}: refused: reading it needs more than 128 MB: corrupt or hostile, not read further"


def test_a_dump_of_millions_of_dicts_is_refused_under_200_mb(tmp_path: Path):
    path = tmp_path / "dump-rank3"
    path.write_bytes(DICTS)
    got = measured(
        "from monitor.flight_recorder import dumps\n"
        "usage = {}\n"
        "try:\n"
        f"    dumps.run_bounded('monitor.flight_recorder.dumps:_load_in_child', {str(path)!r}, '3', usage=usage)\n"
        "except dumps.Refused as exc:\n"
        "    why = str(exc)\n"
        "try:\n"
        f"    dumps.load(dumps.Path({str(path)!r}))\n"
        "except dumps.DumpError as exc:\n"
        "    line = str(exc)\n"
        "result = [why, usage, line]")
    why, usage, line = got["result"]
    assert why == "reading it needs more than 128 MB"
    assert 0 < usage["peak_rss_kb"] < LIMIT_KB, usage
    assert 0 < got["self_kb"] < LIMIT_KB, got
    assert line == f"{path}: refused: reading it needs more than 128 MB"


def test_the_usual_hostile_pickle_still_gets_the_opcode_line(tmp_path: Path):
    path = tmp_path / "steps.pkl"  # 4.1 million opcodes that make nothing lasting
    path.write_bytes(b"\x80\x04" + b"N0" * 2_050_000 + b"N.")
    assert "the pickle asks for more than 4,000,000 opcodes" in verify.check_checkpoint(path).detail
    dump = tmp_path / "dump-rank0"
    dump.write_bytes(path.read_bytes())
    with pytest.raises(dumps.DumpError, match="refused: it runs more than 4,000,000 opcodes"):
        dumps.load(dump)


def test_a_read_that_never_ends_is_killed_after_its_timeout(tmp_path: Path):
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)  # opening it blocks until a writer comes: none does
    started = time.monotonic()
    with pytest.raises(untrusted.Refused, match=r"^reading it took longer than 1 s$"):
        untrusted.run_bounded("monitor.checkpoints.verify:_check_in_child", str(fifo), "torch-legacy", "", timeout_s=1)
    assert time.monotonic() - started < 10


def test_the_reader_does_not_inherit_the_monitor_size():
    ballast = b"x" * (300 << 20)  # a monitor that grew: the reader is a fresh interpreter, not a fork of it
    usage: dict = {}
    assert untrusted.run_bounded("monitor.checkpoints.verify:_check_in_child", "/nonexistent", "x", "", usage=usage) \
        == ["bad", "x", "not a torch or safetensors checkpoint (unknown format)"]
    del ballast
    assert 0 < usage["peak_rss_kb"] < 60_000, usage


def test_what_the_reader_passes_back_is_bounded_and_only_monitor_functions_run(tmp_path: Path):
    path = tmp_path / "dump-rank0"  # one entry whose frame names a 2 MB function: 20,000 times over
    entry = {"process_group": ("0", "pg"), "collective_seq_id": 1, "profiling_name": "nccl:all_reduce",
             "input_sizes": ["x" * (2 << 20)]}
    path.write_bytes(pickle.dumps({"entries": [entry] * 20}, protocol=2))
    with pytest.raises(dumps.DumpError, match=r"refused: what it holds comes to more than 16 MB$"):
        dumps.load(path)
    with pytest.raises(untrusted.Refused, match="not a monitor function"):
        untrusted.run_bounded("os:system", "true")


def test_a_failed_or_crashed_reader_is_one_line():
    with pytest.raises(untrusted.Refused, match=r"^the reader failed \(ModuleNotFoundError: No module named"):
        untrusted.run_bounded("monitor.no_such_module:f")
    with pytest.raises(untrusted.Refused, match=r"^the reader process stopped \(exit status 1: \w+Error") as caught:
        untrusted.run_bounded("monitor.checkpoints.verify:_check_in_child", "/x", "x", "", memory=1 << 20)
    assert "\n" not in str(caught.value)


# -- real files still pass -----------------------------------------------------------------------
def _safetensors(path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]},
                         "b": {"dtype": "BF16", "shape": [3], "data_offsets": [64, 70]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(70))


def test_real_checkpoints_pass(tmp_path: Path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 16)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}
    torch.save(state, tmp_path / "zip.pt")
    torch.save(state, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    _safetensors(tmp_path / "model.safetensors")
    got = {path.name: verify.check_checkpoint(path) for path in sorted(tmp_path.iterdir())}
    assert {name: (r.status, r.kind) for name, r in got.items()} == {
        "legacy.pt": ("ok", "torch-legacy"), "model.safetensors": ("ok", "safetensors"), "zip.pt": ("ok", "torch-zip")}
    assert "16 tensor storages" in got["zip.pt"].detail and "16 tensor storages" in got["legacy.pt"].detail
    assert "2 tensors" in got["model.safetensors"].detail


def test_a_dump_comes_back_from_the_reader_as_it_was_read(tmp_path: Path):
    frames = [{"name": f"f{n}", "filename": f"/x/t{n % 3}.py", "line": n} for n in range(40)]
    entries = [{"process_group": ("1", "tp"), "collective_seq_id": seq, "p2p_seq_id": seq + 100, "is_p2p": seq % 5 == 0,
                "profiling_name": "nccl:all_gather", "input_sizes": [[4, seq], (2,)], "input_dtypes": ["Float"],
                "state": "completed", "retired": seq % 2 == 0, "timeout_ms": 600000 if seq % 3 else None,
                "frames": frames[seq % 7:]} for seq in range(300)]
    path = tmp_path / "trace_7"
    path.write_bytes(pickle.dumps({"entries": entries, "pg_config": {"1": {"name": "tp", "ranks": "[6, 7]"}}}, protocol=2))
    direct = dumps._read(path, 7)  # the same parse, in this process
    loaded = dumps.load(path)
    assert loaded.rank == 7 and loaded.groups == {"tp": [6, 7]} == direct.groups
    for mine, theirs in zip(loaded.entries, direct.entries, strict=True):
        assert [getattr(mine, f) for f in mine.__slots__ if f != "input_sizes"] == \
            [getattr(theirs, f) for f in theirs.__slots__ if f != "input_sizes"]
        assert mine.input_sizes == [[4, theirs.input_sizes[0][1]], [2]]  # tuples come back as lists
    assert loaded.entries[3].call_site() == direct.entries[3].call_site()
