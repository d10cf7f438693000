"""Verifying checkpoints without loading them: structure and checksums only, no torch needed.

- torch zip format (``torch.save`` default): the central directory must be there (a truncated
  file loses it first), every member is streamed through its CRC-32, ``data.pkl`` must parse,
  and every tensor storage it references must be a member.
- torch legacy format (``_use_new_zipfile_serialization=False``): magic number, the pickled
  object, the storage key list, then each storage's 8-byte element count and its bytes must
  fit in the file.
- safetensors: 8-byte header length, JSON header, each tensor's ``data_offsets`` must match its
  dtype and shape and lie inside the file, and the tensors must exactly tile the data area.
- torch distributed checkpoints (a directory with ``.metadata``, ``torch.distributed.checkpoint``):
  every (file, offset, length) the metadata lists must exist inside its ``.distcp`` file.

Pickles are walked by an unpickler that never imports anything: every global becomes an inert
placeholder, so a checkpoint cannot run code here. Nor can it cost more than its bounds: a
file's pickles are read through one ``BoundedReader``, which refuses a read beyond the bytes
left (a byte string, frame or line the file merely claims is never allocated), and a pickle
may run at most ``MAX_OPCODES`` opcodes (each makes at most one object). Both give the clear
refusal for the usual hostile file; what the objects made may cost (4 million empty sets are
900 MB) is bounded by the operating system: every format is read in a child process limited
to less than 200 MB and 30 s (``monitor.untrusted.run_bounded``).
"""

from __future__ import annotations

import json
import math
import pickle
import stat
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from monitor.units import binary_size
from monitor.untrusted import BoundedReader, BoundedUnpickler, Refused, TooBig, run_bounded

CHUNK = 1 << 20
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
# A safetensors header larger than this is corruption, not metadata (safetensors caps it at 100 MB).
MAX_SAFETENSORS_HEADER = 100_000_000
# What one file's pickles may make us read: they hold structure only, the tensors lie elsewhere
# (torch's data.pkl is a few MB for the largest models). Also the cap on data.pkl's uncompressed
# size, checked before it is inflated (a zip bomb declares gigabytes).
MAX_PICKLE_BYTES = 256 << 20
# Opcodes one pickle may run: torch's data.pkl runs 30 per tensor, so 130,000 tensors. An
# opcode makes at most one object (an empty set, 216 bytes): a pickle of 1-byte opcodes (a
# 200 KB zip inflating to 200 million EMPTY_DICTs) is refused here, or earlier, by the reader
# process's memory limit (untrusted.MEMORY_BYTES).
MAX_OPCODES = 4_000_000
SUFFIXES = {".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".tar", ".pkl"}

SAFETENSORS_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
    "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}
# Element size of each legacy storage class (UntypedStorage counts bytes).
STORAGE_BYTES = {
    "FloatStorage": 4, "DoubleStorage": 8, "HalfStorage": 2, "BFloat16Storage": 2,
    "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2, "CharStorage": 1, "ByteStorage": 1,
    "BoolStorage": 1, "ComplexFloatStorage": 8, "ComplexDoubleStorage": 16,
    "UntypedStorage": 1, "QInt8Storage": 1, "QUInt8Storage": 1, "QInt32Storage": 4,
    "QUInt4x2Storage": 1, "QUInt2x4Storage": 1,
}


class CorruptCheckpoint(Exception):
    """What is wrong with the file, in words."""


@dataclass(frozen=True)
class CheckResult:
    path: Path
    status: str   # ok | bad | missing
    kind: str     # torch-zip | torch-legacy | pickle | safetensors | unknown
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def line(self) -> str:
        label = {"ok": "OK", "bad": "BAD", "missing": "MISSING"}[self.status]
        return f"{label:<7} {self.path}: {self.detail}"

    def to_json(self) -> dict:
        return {"path": str(self.path), "status": self.status, "kind": self.kind, "detail": self.detail}


# -- inert unpickling ----------------------------------------------------------------------------
class _Inert:
    """Stands in for any object a pickle builds; accepts whatever the pickle does to it."""

    def __new__(cls, *args, **kwargs):
        return object.__new__(cls)

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        # Keep plain attribute state (dataclasses, e.g. a distributed checkpoint's metadata).
        for part in state if isinstance(state, tuple) else (state,):
            if isinstance(part, dict):
                self.__dict__.update((k, v) for k, v in part.items() if isinstance(k, str))

    def __setitem__(self, key, value) -> None:
        pass

    def append(self, item) -> None:
        pass

    def extend(self, items) -> None:
        pass


_OVER_BOUND = f"more than the {binary_size(MAX_PICKLE_BYTES)} a checkpoint's pickle may hold"


class _InertUnpickler(BoundedUnpickler):
    """Unpickles structure only: globals become ``_Inert`` subclasses, storages are recorded."""

    def __init__(self, file: BoundedReader) -> None:
        super().__init__(file, MAX_OPCODES)
        self.storages: list[tuple] = []
        self._classes: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> type:
        key = (module, name)
        if key not in self._classes:
            self._classes[key] = type(name, (_Inert,), {"__module__": module})
        return self._classes[key]

    def persistent_load(self, pid):
        if isinstance(pid, tuple) and pid and pid[0] == "storage":
            self.storages.append(pid)
        return _Inert()


def _bounded(file) -> BoundedReader:
    """What one file's pickles are read through: together at most ``MAX_PICKLE_BYTES``."""
    return BoundedReader(file, MAX_PICKLE_BYTES, _OVER_BOUND)


def _unpickle(source: BoundedReader) -> tuple[object, list[tuple]]:
    unpickler = _InertUnpickler(source)
    try:
        obj = unpickler.load()
    except TooBig as exc:
        raise CorruptCheckpoint(f"the pickle asks for {exc}: corrupt or hostile, not read further") from None
    except EOFError:
        raise CorruptCheckpoint("the pickle ends early (file truncated)") from None
    except pickle.UnpicklingError as exc:
        if "truncated" in str(exc):
            raise CorruptCheckpoint("the pickle ends early (file truncated)") from None
        raise CorruptCheckpoint(f"the pickle is corrupt ({exc})") from None
    except ( ValueError, TypeError, AttributeError, IndexError,
            KeyError, struct.error, UnicodeDecodeError, RecursionError) as exc:
        raise CorruptCheckpoint(f"the pickle is corrupt ({type(exc).__name__}: {exc})") from None
    return obj, unpickler.storages


def _storage_class_name(storage_type) -> str:
    return getattr(storage_type, "__name__", str(storage_type))


# -- formats -------------------------------------------------------------------------------------
def _check_zip(path: Path, deep: bool) -> str:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise CorruptCheckpoint(f"zip central directory not found: file truncated or still being "
                                f"written ({exc})") from None
    with archive:
        members = archive.infolist()
        names = {info.filename for info in members}
        pickles = [name for name in names if name == "data.pkl" or name.endswith("/data.pkl")]
        if not pickles:
            raise CorruptCheckpoint("a zip file without data.pkl: not a torch checkpoint")
        prefix = pickles[0][: -len("data.pkl")]
        declared = archive.getinfo(pickles[0]).file_size
        if declared > MAX_PICKLE_BYTES:
            raise CorruptCheckpoint(f"{pickles[0]} inflates to {binary_size(declared)}, {_OVER_BOUND} (a zip bomb?)")
        for info in members if deep else ():
            try:
                with archive.open(info) as member:
                    while member.read(CHUNK):
                        pass
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
                raise CorruptCheckpoint(f"member {info.filename} is corrupt ({exc})") from None
        with archive.open(pickles[0]) as stream:
            _, storages = _unpickle(_bounded(stream))
        total = sum(info.file_size for info in members)
    for storage in storages:
        key = str(storage[2]) if len(storage) > 2 else "?"
        if f"{prefix}data/{key}" not in names:
            raise CorruptCheckpoint(f"data.pkl refers to storage {key} but data/{key} is missing")
    checked = f"{len(members)} members CRC-checked" if deep else "structure only"
    return f"torch zip, {len(storages)} tensor storages, {checked}, {binary_size(total)}"


def _check_legacy(path: Path, size: int) -> str:
    with path.open("rb") as file:
        pickles = _bounded(file)  # the five pickles before the storages share the bound
        magic, _ = _unpickle(pickles)
        if magic != LEGACY_MAGIC:
            # A plain pickle (torch.save of the old days without the header, or pickle.dump).
            if file.tell() != size:
                raise CorruptCheckpoint(f"{size - file.tell()} bytes after the pickle: not a "
                                        "plain pickle, not a torch legacy checkpoint")
            return f"pickle, {binary_size(size)}"
        _unpickle(pickles)  # protocol version
        _unpickle(pickles)  # system info
        _, storages = _unpickle(pickles)
        keys, _ = _unpickle(pickles)
        element_bytes = {str(s[2]): STORAGE_BYTES.get(_storage_class_name(s[1]), 1)
                         for s in storages if len(s) > 2}
        if not isinstance(keys, list):
            raise CorruptCheckpoint("the storage key list is missing")
        offset = file.tell()
    for key in keys:
        if offset + 8 > size:
            raise CorruptCheckpoint(f"truncated at storage {key}: {size} bytes, its header needs {offset + 8}")
        with path.open("rb") as file:
            file.seek(offset)
            (numel,) = struct.unpack("<q", file.read(8))
        end = offset + 8 + numel * element_bytes.get(str(key), 1)
        if numel < 0 or end > size:
            raise CorruptCheckpoint(f"truncated: storage {key} needs bytes up to {end}, the file has {size}")
        offset = end
    return f"torch legacy, {len(keys)} tensor storages, {binary_size(size)}"


def _check_safetensors(path: Path, size: int) -> str:
    with path.open("rb") as file:
        (header_len,) = struct.unpack("<Q", file.read(8))
        if header_len > MAX_SAFETENSORS_HEADER or 8 + header_len > size:
            raise CorruptCheckpoint(f"header length {header_len} does not fit in {size} bytes "
                                    "(file truncated or not safetensors)")
        raw = file.read(header_len)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptCheckpoint(f"the JSON header is invalid ({exc})") from None
    if not isinstance(header, dict):
        raise CorruptCheckpoint("the JSON header is not an object")
    data_len = size - 8 - header_len
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = entry["dtype"], entry["shape"]
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise CorruptCheckpoint(f"tensor {name}: malformed entry {entry!r}"[:300]) from None
        if dtype in SAFETENSORS_DTYPE_BYTES:
            want = math.prod(shape) * SAFETENSORS_DTYPE_BYTES[dtype]
            if end - begin != want:
                raise CorruptCheckpoint(f"tensor {name}: {dtype}{shape} needs {want} bytes, "
                                        f"its offsets give {end - begin}")
        if not 0 <= begin <= end:
            raise CorruptCheckpoint(f"tensor {name}: bad offsets [{begin}, {end}]")
        if end > data_len:
            raise CorruptCheckpoint(f"truncated: tensor {name} ends at byte {end} of the data, "
                                    f"which holds only {data_len} bytes")
        spans.append((begin, end, name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise CorruptCheckpoint(f"tensor {name} starts at {begin}, expected {position} "
                                    "(overlapping tensors or a hole in the data)")
        position = end
    if position != data_len:
        raise CorruptCheckpoint(f"{data_len - position} bytes after the last tensor")
    return f"safetensors, {len(spans)} tensors, {binary_size(size)}"


def _check_distributed(directory: Path) -> str:
    with (directory / ".metadata").open("rb") as file:
        metadata, _ = _unpickle(_bounded(file))
    items = getattr(metadata, "storage_data", None)
    if not isinstance(items, dict):
        raise CorruptCheckpoint(".metadata holds no storage table: not a torch distributed checkpoint")
    needed: dict[str, int] = {}
    for info in items.values():
        try:
            name, end = str(info.relative_path), int(info.offset) + int(info.length)
        except (AttributeError, TypeError, ValueError):
            raise CorruptCheckpoint(".metadata has a malformed storage entry") from None
        needed[name] = max(needed.get(name, 0), end)
    total = 0
    for name, end in sorted(needed.items()):
        try:
            size = (directory / name).stat().st_size
        except OSError:
            raise CorruptCheckpoint(f"{name} is missing (listed in .metadata)") from None
        if size < end:
            raise CorruptCheckpoint(f"truncated: {name} has {size} bytes, .metadata needs {end}")
        total += size
    return f"torch distributed checkpoint, {len(needed)} files, {len(items)} items, {binary_size(total)}"


def _kind(head: bytes, size: int) -> str:
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "torch-zip"
    if head.startswith(b"\x80"):
        return "torch-legacy"
    if size >= 9 and len(head) >= 9 and head[8:9] == b"{":
        return "safetensors"
    return "unknown"


def check_checkpoint(path: Path, deep: bool = True) -> CheckResult:
    """Check one checkpoint file; never raises for a bad or unreadable file.

    ``deep=False`` skips streaming a zip's members through their CRCs (the one check whose cost
    grows with the file): quick enough to run before a launch. What the file's format says is
    read in a child process the operating system bounds (``untrusted.run_bounded``): whatever
    the file holds, the monitor beside a training job never grows with it."""
    path = Path(path)
    if path.is_dir():
        if not (path / ".metadata").is_file():
            return CheckResult(path, "bad", "unknown", "a directory without .metadata: not a distributed checkpoint")
        kind = "torch-distributed"
    else:
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):
                return CheckResult(path, "bad", "unknown", "not a regular file")
            size = info.st_size
            with path.open("rb") as file:
                head = file.read(64)
        except FileNotFoundError:
            return CheckResult(path, "missing", "unknown", "no such file")
        except OSError as exc:
            return CheckResult(path, "bad", "unknown", f"cannot read: {exc.strerror}")
        if size == 0:
            return CheckResult(path, "bad", "unknown", "empty file (0 bytes): the save did not happen or was cut off")
        if head.startswith(b"version https://git-lfs"):
            return CheckResult(path, "bad", "unknown", "a git-lfs pointer, not the checkpoint: run `git lfs pull`")
        kind = _kind(head, size)
        if kind == "unknown":
            if size < 8 and head[:1] in (b"P", b"\x80"):
                return CheckResult(path, "bad", kind, f"only {size} bytes: truncated")
            return CheckResult(path, "bad", kind, "not a torch or safetensors checkpoint (unknown format)")
    try:
        status, kind, detail = run_bounded(f"{__name__}:_check_in_child", str(path), kind, "deep" if deep else "")
    except Refused as exc:
        return CheckResult(path, "bad", kind, f"refused: {exc}: corrupt or hostile, not read further")
    except (TypeError, ValueError):
        return CheckResult(path, "bad", kind, "the reader process gave no answer")
    return CheckResult(path, str(status), str(kind), str(detail))


def _check_in_child(path: str, kind: str, deep: str) -> list[str]:
    """In the bounded child: the format's check, as (status, kind, detail)."""
    result = _check_format(Path(path), kind, bool(deep))
    return [result.status, result.kind, result.detail]


def _check_format(path: Path, kind: str, deep: bool) -> CheckResult:
    try:
        if kind == "torch-distributed":
            detail = _check_distributed(path)
        elif kind == "torch-zip":
            detail = _check_zip(path, deep)
        elif kind == "torch-legacy":
            detail = _check_legacy(path, path.stat().st_size)
            kind = "pickle" if detail.startswith("pickle") else kind
        elif kind == "safetensors":
            detail = _check_safetensors(path, path.stat().st_size)
        else:
            return CheckResult(path, "bad", kind, "not a torch or safetensors checkpoint (unknown format)")
    except CorruptCheckpoint as exc:
        return CheckResult(path, "bad", kind, str(exc))
    except OSError as exc:
        return CheckResult(path, "bad", kind, f"read error: {exc}")
    return CheckResult(path, "ok", kind, detail)


def checkpoint_files(directory: Path) -> list[Path]:
    """Checkpoint-looking files under ``directory`` (by suffix), sorted."""
    return sorted(p for p in directory.rglob("*") if p.suffix in SUFFIXES and p.is_file())


def checkpoint_targets(directory: Path) -> list[Path]:
    """What ``check-ckpt DIR`` checks: checkpoint files, and each distributed checkpoint
    directory (one with ``.metadata``) as a whole, sorted."""
    dcp_dirs = sorted(m.parent for m in directory.rglob(".metadata") if m.is_file())
    files = [p for p in checkpoint_files(directory) if not any(d in p.parents for d in dcp_dirs)]
    return sorted([*dcp_dirs, *files])
