"""Reading flight-recorder dumps without torch, as the untrusted input they are.

A dump is one pickle per rank of builtins only (dicts, lists, tuples, strings, numbers): an
unpickler that refuses every class loads it and can run no code, whatever the file holds (a
pickle naming ``os.system`` is refused with one line naming the file). What it may cost is
bounded too: the file's size, the opcodes run, the entries and each entry's frames kept.
The rank is the number at the end of the file's name (torch writes ``<prefix><rank>``).
"""

from __future__ import annotations

import ast
import io
import os
import pickle
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from monitor.stacks.compare import is_user_code

# Dumps of 2000 entries with frames are a few MB. A pickle's bytes stand for many times their
# size in objects (a reference to an entry is two bytes, an Entry with its frames a few hundred),
# so what one file may cost is bounded by its size and by what is kept of it:
MAX_DUMP_BYTES = 64 << 20
# torch keeps its newest TORCH_FR_BUFFER_SIZE entries (the monitor sets 2000): five times that, the
# newest, as a smaller buffer would have kept them.
MAX_ENTRIES = 10_000
# Innermost first; the call site is the innermost frame in the user's code.
MAX_FRAMES = 64
# A dump of 2000 entries of 30 frames runs about 850,000 opcodes. An opcode makes at most one
# object (a dict, 64 bytes: sets are refused), so a dump of 1-byte opcodes makes no more than
# 300 MB of them.
MAX_OPCODES = 4_000_000
# A pickle starts with PROTO (0x80) and its version; torch writes protocol 2 (checked on 2.13).
_PICKLE_START = re.compile(rb"\x80[\x02-\x05]")
_RANK_AT_END = re.compile(r"(\d+)$")
# Plain data has no sets (216 bytes each, the largest object one opcode makes): refused.
_SET_OPCODES = (pickle.EMPTY_SET[0], pickle.ADDITEMS[0], pickle.FROZENSET[0])


class DumpError(Exception):
    """A file that is not a dump we can read: one line naming it."""


@dataclass(frozen=True, slots=True)
class CallSite:
    function: str
    file: str
    line: int


@dataclass(slots=True)
class Entry:
    """One collective (or point-to-point op) a rank enqueued."""

    group: str                 # the process group's name ("0" is the default group)
    group_desc: str            # "default_pg", or the name the job gave it
    seq: int                   # collective_seq_id (p2p_seq_id for point-to-point ops)
    op: str                    # profiling_name: "nccl:all_reduce", "gloo:broadcast"
    input_sizes: list
    input_dtypes: list
    state: str                 # scheduled / started / completed (gloo says only scheduled)
    retired: bool              # finished and out of the recorder's live set
    is_p2p: bool
    timeout_ms: int | None
    frames: list[CallSite] = field(default_factory=list)  # innermost first

    def call_site(self) -> CallSite | None:
        """The innermost frame in the user's code (not torch's), else the innermost frame."""
        own = next((frame for frame in self.frames if is_user_code(frame.file)), None)
        return own or (self.frames[0] if self.frames else None)


@dataclass(slots=True)
class RankDump:
    rank: int
    path: str
    groups: dict[str, list[int]]                       # group name -> its global ranks
    entries: list[Entry] = field(default_factory=list)


def looks_like_dump(path: Path) -> bool:
    """A regular file that starts as a pickle does (the name says nothing: torch adds only a rank)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False  # the pipes beside the dumps are FIFOs: opening one would block
        with open(path, "rb") as handle:
            return bool(_PICKLE_START.match(handle.read(2)))
    except OSError:
        return False


def find_dumps(folder: Path) -> list[Path]:
    """The dump files under ``folder`` (recursive, sorted)."""
    found = []
    for directory, subdirs, files in os.walk(folder):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        # Only names ending in a rank are opened: torch writes <prefix><rank>, and a folder of logs
        # is not read twice over.
        found += [Path(directory) / name for name in sorted(files)
                  if not name.startswith(".") and _RANK_AT_END.search(name) and looks_like_dump(Path(directory) / name)]
    return found


class _Opcodes(dict):
    """One unpickler's opcodes, counted as they are run."""

    def __init__(self, table: dict) -> None:
        super().__init__(table)
        self._left = MAX_OPCODES

    def __getitem__(self, opcode: int):
        self._left -= 1
        if self._left < 0:
            raise DumpError(f"it runs more than {MAX_OPCODES:,} opcodes")
        return super().__getitem__(opcode)

    def __missing__(self, opcode: int):
        raise pickle.UnpicklingError(f"invalid load key, {bytes([opcode])!r}.")


class _BuiltinsOnly(pickle._Unpickler):
    """The Python unpickler, not the C one: its opcodes can be counted and replaced, and its memo
    is a dict (the C one allocates an array as long as the highest index a pickle names: five
    bytes ask for gigabytes)."""

    def __init__(self, file) -> None:
        super().__init__(file)
        self.dispatch = _Opcodes(self._opcodes)

    def find_class(self, module: str, name: str):
        raise DumpError(f"it names {module}.{name}; a flight-recorder dump holds only plain data")

    def _load_bytearray8(self) -> None:
        # The stock opcode allocates the declared length before reading: read it first instead.
        (size,) = struct.unpack("<Q", self.read(8))
        self.append(bytearray(self.read(size)))

    _opcodes = {opcode: load for opcode, load in pickle._Unpickler.dispatch.items() if opcode not in _SET_OPCODES}
    _opcodes[pickle.BYTEARRAY8[0]] = _load_bytearray8


def load(path: Path) -> RankDump:
    """One rank's dump; raises DumpError (one line, naming the file)."""
    match = _RANK_AT_END.search(path.name)
    if match is None:
        raise DumpError(f"{path}: no rank at the end of the name (torch writes <prefix><rank>)")
    try:
        if os.path.getsize(path) > MAX_DUMP_BYTES:
            raise DumpError(f"{path}: larger than {MAX_DUMP_BYTES >> 20} MB, not read")
        data = path.read_bytes()
    except OSError as exc:
        raise DumpError(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}") from None
    try:
        raw = _BuiltinsOnly(io.BytesIO(data)).load()
    except DumpError as exc:
        raise DumpError(f"{path}: refused: {exc}") from None
    except EOFError:
        raise DumpError(f"{path}: not a readable flight-recorder dump (it ends early: cut while written?)") from None
    except Exception as exc:  # a corrupt pickle raises anything from struct.error on
        raise DumpError(f"{path}: not a readable flight-recorder dump ({type(exc).__name__}: {exc})") from None
    try:
        return _rank_dump(int(match.group(1)), path, raw)
    # OverflowError: int() of an infinity; RecursionError and MemoryError: literal_eval of a
    # deeply nested ranks string (the parser's own limits).
    except (KeyError, TypeError, ValueError, AttributeError, SyntaxError, OverflowError, RecursionError,
            MemoryError) as exc:
        raise DumpError(f"{path}: not a flight-recorder dump ({type(exc).__name__}: {exc})") from None


def _rank_dump(rank: int, path: Path, raw: dict) -> RankDump:
    if not isinstance(raw, dict) or "entries" not in raw:
        raise ValueError("no 'entries'")
    groups = {}
    for key, config in (raw.get("pg_config") or {}).items():
        ranks = config.get("ranks", [])
        groups[str(config.get("name", key))] = [int(r) for r in (ast.literal_eval(ranks) if isinstance(ranks, str) else ranks)]
    return RankDump(rank=rank, path=str(path), groups=groups, entries=[_entry(e) for e in raw["entries"][-MAX_ENTRIES:]])


def _entry(e: dict) -> Entry:
    group, desc = e["process_group"]
    p2p = bool(e.get("is_p2p"))
    return Entry(
        group=str(group), group_desc=str(desc), seq=int(e["p2p_seq_id"] if p2p else e["collective_seq_id"]),
        op=str(e["profiling_name"]), input_sizes=list(e.get("input_sizes") or []),
        input_dtypes=list(e.get("input_dtypes") or []), state=str(e.get("state", "")),
        retired=bool(e.get("retired")), is_p2p=p2p, timeout_ms=e.get("timeout_ms"),
        frames=[CallSite(str(f.get("name", "?")), str(f.get("filename", "?")), int(f.get("line") or 0))
                for f in (e.get("frames") or [])[:MAX_FRAMES]],
    )
