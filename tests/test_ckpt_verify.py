"""`monitor check-ckpt`: real torch and safetensors files, whole and damaged in many ways."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # without torch: skipped, not an error at collection

from monitor.checkpoints.verify import check_checkpoint  # noqa: E402  (after the skip without torch)


def state_dict() -> dict:
    torch.manual_seed(0)
    return {"model": {"w": torch.randn(64, 32), "b": torch.zeros(32, dtype=torch.int64),
                      "h": torch.ones(8, dtype=torch.bfloat16)}, "step": 12, "name": "run"}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]],
                      header_extra: dict | None = None) -> None:
    header, data, offset = {"__metadata__": {"format": "pt"}}, b"", 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        data += raw
        offset += len(raw)
    header.update(header_extra or {})
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


@pytest.fixture
def zip_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "model.pt"
    torch.save(state_dict(), path)
    return path


@pytest.fixture
def legacy_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "legacy.pth"
    torch.save(state_dict(), path, _use_new_zipfile_serialization=False)
    return path


@pytest.fixture
def safetensors_ckpt(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    write_safetensors(path, {"w": ("F32", [4, 4], bytes(64)), "b": ("BF16", [3], bytes(6))})
    return path


def test_whole_checkpoints_pass(zip_ckpt: Path, legacy_ckpt: Path, safetensors_ckpt: Path):
    for path, kind in ((zip_ckpt, "torch-zip"), (legacy_ckpt, "torch-legacy"),
                       (safetensors_ckpt, "safetensors")):
        result = check_checkpoint(path)
        assert (result.status, result.kind) == ("ok", kind), result.line()
    assert "3 tensor storages" in check_checkpoint(zip_ckpt).detail
    assert "3 tensor storages" in check_checkpoint(legacy_ckpt).detail
    assert "2 tensors" in check_checkpoint(safetensors_ckpt).detail
    # What torch itself says about the same files, so "ok" means torch.load works.
    assert torch.load(zip_ckpt)["step"] == torch.load(legacy_ckpt, weights_only=False)["step"] == 12


@pytest.mark.parametrize("fixture", ["zip_ckpt", "legacy_ckpt", "safetensors_ckpt"])
def test_every_truncation_is_caught(fixture: str, request, tmp_path: Path):
    data = request.getfixturevalue(fixture).read_bytes()
    cut_file = tmp_path / "cut.bin"
    for cut in sorted({*range(0, len(data), max(1, len(data) // 97)), len(data) - 1, 1, 8, 9}):
        cut_file.write_bytes(data[:cut])
        result = check_checkpoint(cut_file)
        assert result.status == "bad", (cut, result.line())


def test_flipped_byte_in_tensor_data_fails_the_crc(zip_ckpt: Path, tmp_path: Path):
    with zipfile.ZipFile(zip_ckpt) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith("/data/0"))
        # Local header: 30 bytes + name + extra field, then the member's data.
        raw = zip_ckpt.read_bytes()
        name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26: info.header_offset + 30])
        data_at = info.header_offset + 30 + name_len + extra_len
    damaged = bytearray(raw)
    damaged[data_at + 100] ^= 0x01
    path = tmp_path / "flipped.pt"
    path.write_bytes(damaged)
    result = check_checkpoint(path)
    assert result.status == "bad" and "CRC" in result.detail and "data/0" in result.detail
    # torch.load does not check CRCs: it would silently return different weights.
    assert not torch.equal(torch.load(path)["model"]["w"], state_dict()["model"]["w"])


def test_missing_storage_member_is_reported(zip_ckpt: Path, tmp_path: Path):
    path = tmp_path / "partial.pt"
    with zipfile.ZipFile(zip_ckpt) as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith("/data/1"):
                dst.writestr(info, src.read(info))
    result = check_checkpoint(path)
    assert result.status == "bad" and "data/1 is missing" in result.detail


@pytest.mark.parametrize("header_extra, blob_tail, expected", [
    ({"x": {"dtype": "F32", "shape": [2], "data_offsets": [70, 78]}}, b"", "ends at byte 78"),
    ({"x": {"dtype": "F32", "shape": [3], "data_offsets": [70, 78]}}, bytes(8), "needs 12 bytes"),
    ({"x": {"dtype": "F32", "shape": [2]}}, b"", "malformed entry"),
    ({}, bytes(5), "5 bytes after the last tensor"),
])
def test_safetensors_offsets_are_checked(tmp_path: Path, header_extra, blob_tail, expected):
    path = tmp_path / "t.safetensors"
    write_safetensors(path, {"w": ("F32", [4, 4], bytes(64)), "b": ("BF16", [3], bytes(6))}, header_extra)
    path.write_bytes(path.read_bytes() + blob_tail)
    result = check_checkpoint(path)
    assert result.status == "bad" and expected in result.detail, result.line()


def test_safetensors_header_problems(tmp_path: Path):
    path = tmp_path / "t.safetensors"
    path.write_bytes(struct.pack("<Q", 10**12) + b"{}")
    assert "does not fit" in check_checkpoint(path).detail
    path.write_bytes(struct.pack("<Q", 5) + b"{oops")
    assert "JSON header is invalid" in check_checkpoint(path).detail


def test_odd_files(tmp_path: Path):
    fifo = tmp_path / "pipe.pt"
    os.mkfifo(fifo)
    assert check_checkpoint(fifo).detail == "not a regular file"  # and it did not block
    empty = tmp_path / "empty.pt"
    empty.touch()
    lfs = tmp_path / "lfs.bin"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    text = tmp_path / "notes.pt"
    text.write_text("hello world, not a checkpoint\n")
    assert "empty file" in check_checkpoint(empty).detail
    assert "git lfs pull" in check_checkpoint(lfs).detail
    assert "unknown format" in check_checkpoint(text).detail
    assert check_checkpoint(tmp_path / "nope.pt").status == "missing"


def test_a_pickle_never_runs_code(tmp_path: Path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    evil.write_bytes(b"\x80\x02cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")
    result = check_checkpoint(evil)
    assert result.status == "ok" and result.kind == "pickle"
    assert not marker.exists()


def run_cli(*args: str) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom monitor.cli import main\nrc = main(sys.argv[1:])\n"
            "assert 'torch' not in sys.modules and 'textual' not in sys.modules\nsys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, "check-ckpt", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_exit_codes_and_one_line_per_file(zip_ckpt: Path, legacy_ckpt: Path, tmp_path: Path):
    good = run_cli(str(zip_ckpt), str(legacy_ckpt))
    assert good.returncode == 0 and len(good.stdout.splitlines()) == 2, good.stderr
    bad = tmp_path / "bad.pt"
    bad.write_bytes(zip_ckpt.read_bytes()[:-30])
    result = run_cli(str(zip_ckpt), str(bad))
    assert result.returncode == 1
    assert result.stdout.splitlines()[1].startswith(f"BAD     {bad}: zip central directory not found")
    assert run_cli(str(tmp_path / "missing.pt"), str(zip_ckpt)).returncode == 2
    listing = run_cli("--json", str(tmp_path))
    rows = [json.loads(line) for line in listing.stdout.splitlines()]
    assert {Path(r["path"]).name: r["status"] for r in rows} == {
        "bad.pt": "bad", "legacy.pth": "ok", "model.pt": "ok"}
    assert listing.returncode == 1


def test_quick_check_skips_crcs_but_not_structure(zip_ckpt: Path, tmp_path: Path):
    assert "structure only" in check_checkpoint(zip_ckpt, deep=False).detail
    cut = tmp_path / "cut.pt"
    cut.write_bytes(zip_ckpt.read_bytes()[:-10])
    assert check_checkpoint(cut, deep=False).status == "bad"


@pytest.fixture
def dcp_ckpt(tmp_path: Path) -> Path:
    import warnings

    import torch.distributed.checkpoint as dcp
    path = tmp_path / "step100"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        dcp.save(state_dict()["model"], checkpoint_id=str(path))
    return path


def test_distributed_checkpoint_directory(dcp_ckpt: Path):
    result = check_checkpoint(dcp_ckpt)
    assert (result.status, result.kind) == ("ok", "torch-distributed"), result.line()
    assert "3 items" in result.detail


def test_distributed_checkpoint_truncated_or_missing_shard(dcp_ckpt: Path):
    shard = next(dcp_ckpt.glob("*.distcp"))
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 100])
    result = check_checkpoint(dcp_ckpt)
    assert result.status == "bad" and f"truncated: {shard.name}" in result.detail
    shard.unlink()
    assert f"{shard.name} is missing" in check_checkpoint(dcp_ckpt).detail
    (dcp_ckpt / ".metadata").write_bytes(b"\x80\x04N.")
    assert "no storage table" in check_checkpoint(dcp_ckpt).detail


def test_directory_listing_checks_distributed_checkpoints_whole(dcp_ckpt: Path, zip_ckpt: Path):
    listing = run_cli(str(dcp_ckpt.parent))
    lines = listing.stdout.splitlines()
    assert listing.returncode == 0, listing.stdout
    assert [line.split()[1].rstrip(":") for line in lines] == [str(zip_ckpt), str(dcp_ckpt)]
