"""Checkpoint verification speed against the baselines a user has today, same files, same run.

For a torch zip checkpoint: `check_checkpoint` (every member's CRC streamed) against reading
the file once (the I/O floor), `zipfile.testzip()` and `torch.load` (what users run to "check"
a file, and which does not verify CRCs). For safetensors: header and offset checks only, which
should not depend on the file's size.

    python benchmarks/runner_ckpt_verify.py [--mb 512]
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
import time
import zipfile
from pathlib import Path

import torch

from monitor.checkpoints.verify import check_checkpoint


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def read_all(path: Path) -> None:
    with path.open("rb") as f:
        while f.read(1 << 20):
            pass


def make_safetensors(path: Path, mb: int) -> None:
    tensors, offset, header = 200, 0, {}
    size = mb * (1 << 20) // tensors // 4 * 4
    for i in range(tensors):
        header[f"layer{i}.weight"] = {"dtype": "F32", "shape": [size // 4], "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header).encode()
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.truncate(8 + len(blob) + offset)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=512)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        zpath = Path(tmp) / "model.pt"
        layers = {f"layer{i}": torch.randn(args.mb * (1 << 20) // 4 // 64) for i in range(64)}
        torch.save(layers, zpath)
        size_mb = zpath.stat().st_size / (1 << 20)
        print(f"torch zip checkpoint, {size_mb:.0f} MiB, 64 tensors")
        rows = [("read the file once (floor)", lambda: read_all(zpath)),
                ("check_checkpoint (CRC of every member)", lambda: check_checkpoint(zpath)),
                ("zipfile.testzip()", lambda: zipfile.ZipFile(zpath).testzip()),
                ("torch.load (no CRC check)", lambda: torch.load(zpath))]
        for label, fn in rows:
            seconds = timed(fn)
            print(f"  {label:<42} {seconds:7.3f} s  {size_mb / seconds:8.0f} MiB/s")
        for mb in (args.mb, args.mb * 4):
            spath = Path(tmp) / f"model{mb}.safetensors"
            make_safetensors(spath, mb)
            seconds = timed(lambda: check_checkpoint(spath))
            print(f"safetensors {mb} MiB, 200 tensors: check_checkpoint {seconds * 1000:.2f} ms")


if __name__ == "__main__":
    main()
