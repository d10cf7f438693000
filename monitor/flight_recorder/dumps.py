"""Reading flight-recorder dumps without torch, as the untrusted input they are.

A dump is one pickle per rank of builtins only (dicts, lists, tuples, strings, numbers): an
unpickler that refuses every class loads it and can run no code, whatever the file holds (a
pickle naming ``os.system`` is refused with one line naming the file). What it may cost is
bounded too: the file's size, the opcodes run, the entries and each entry's frames kept, and,
whatever the objects made, the memory and time of the child process it is read in
(``monitor.untrusted.run_bounded``: less than 200 MB, 30 s), which passes back only what is kept.
The rank is the number at the end of the file's name (torch writes ``<prefix><rank>``).
"""

from __future__ import annotations

import ast
import io
import math
import os
import pickle
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from monitor.untrusted import BoundedUnpickler, Refused, TooBig, run_bounded

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
# object (a dict, 64 bytes: sets are refused): a dump of 4 million 1-byte opcodes would make 300
# MB of them, more than the reader process may take (untrusted.MEMORY_BYTES), which refuses it first.
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
    timeout_ms: float | None   # torch writes an int; a cached dump (JSON) may hold a float
    frames: list[CallSite] = field(default_factory=list)  # innermost first

    def call_site(self) -> CallSite | None:
        """The innermost frame in the user's code (not torch's), else the innermost frame."""
        # Imported here: the bounded reader process imports this module with the standard library alone.
        from monitor.stacks.compare import is_user_code

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


class _BuiltinsOnly(BoundedUnpickler):
    """Builtins only: every global is refused, and sets are not known at all."""

    refused_opcodes = frozenset(_SET_OPCODES)

    def find_class(self, module: str, name: str):
        raise DumpError(f"refused: it names {module}.{name}; a flight-recorder dump holds only plain data")


def load(path: Path) -> RankDump:
    """One rank's dump; raises DumpError (one line, naming the file).

    Read in a bounded child process (``_load_in_child``), which passes back only what is kept."""
    match = _RANK_AT_END.search(path.name)
    if match is None:
        raise DumpError(f"{path}: no rank at the end of the name (torch writes <prefix><rank>)")
    try:
        if os.path.getsize(path) > MAX_DUMP_BYTES:
            raise DumpError(f"{path}: larger than {MAX_DUMP_BYTES >> 20} MB, not read")
    except OSError as exc:
        raise DumpError(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}") from None
    try:
        reply = run_bounded(f"{__name__}:_load_in_child", str(path), match.group(1))
    except Refused as exc:
        raise DumpError(f"{path}: refused: {exc}") from None
    if isinstance(reply, str):
        raise DumpError(f"{path}: {reply}")
    try:
        return _from_plain(path, reply)
    except (KeyError, TypeError, ValueError, IndexError):
        raise DumpError(f"{path}: the reader process gave no answer") from None


def _load_in_child(path: str, rank: str) -> dict | str:
    """In the bounded child: the dump as plain data (``_to_plain``), or the line saying why not."""
    try:
        return _to_plain(_read(Path(path), int(rank)))
    except DumpError as exc:
        return str(exc)


def _read(path: Path, rank: int) -> RankDump:
    try:
        with open(path, "rb") as handle:
            # Its size again (it may have grown since it was checked), and only that read: a read of
            # the most a dump may be would allocate all of it first.
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_DUMP_BYTES:
                raise DumpError(f"larger than {MAX_DUMP_BYTES >> 20} MB, not read")
            data = handle.read(size)
    except OSError as exc:
        raise DumpError(f"cannot read: {(exc.strerror or str(exc)).lower()}") from None
    try:
        raw = _BuiltinsOnly(io.BytesIO(data), MAX_OPCODES).load()
    except TooBig as exc:
        raise DumpError(f"refused: it runs {exc}") from None
    except DumpError:
        raise
    except EOFError:
        raise DumpError("not a readable flight-recorder dump (it ends early: cut while written?)") from None
    except MemoryError:
        raise
    except Exception as exc:  # a corrupt pickle raises anything from struct.error on
        raise DumpError(f"not a readable flight-recorder dump ({type(exc).__name__}: {exc})") from None
    del data
    try:
        return _rank_dump(rank, path, raw)
    # OverflowError: int() of an infinity; RecursionError and MemoryError: literal_eval of a
    # deeply nested ranks string (the parser's own limits).
    except (KeyError, TypeError, ValueError, AttributeError, SyntaxError, OverflowError, RecursionError,
            MemoryError) as exc:
        raise DumpError(f"not a flight-recorder dump ({type(exc).__name__}: {exc})") from None


def _plain(value, depth: int = 0):
    """What JSON carries of a field the dump holds (sizes, dtypes): tuples as lists, the rest as text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)) and depth < 8:
        return [_plain(item, depth + 1) for item in value]
    return repr(value)[:200]


def _to_plain(dump: RankDump) -> dict:
    """A RankDump as JSON's plain data, each distinct frame once (a dump repeats its stacks)."""
    frames: dict[CallSite, int] = {}
    entries = []
    for e in dump.entries:
        entries.append([e.group, e.group_desc, e.seq, e.op, _plain(e.input_sizes), _plain(e.input_dtypes), e.state,
                        e.retired, e.is_p2p, _plain(e.timeout_ms), [frames.setdefault(f, len(frames)) for f in e.frames]])
    return {"rank": dump.rank, "groups": dump.groups, "entries": entries,
            "frames": [[f.function, f.file, f.line] for f in frames]}


def _from_plain(path: Path, plain: dict) -> RankDump:
    frames = [CallSite(str(function), str(file), int(line)) for function, file, line in plain["frames"]]
    entries = [Entry(group=str(group), group_desc=str(desc), seq=int(seq), op=str(op), input_sizes=list(sizes),
                     input_dtypes=list(dtypes), state=str(state), retired=bool(retired), is_p2p=bool(p2p),
                     timeout_ms=timeout if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) else None,
                     frames=[frames[i] for i in used])
               for group, desc, seq, op, sizes, dtypes, state, retired, p2p, timeout, used in plain["entries"]]
    groups = {str(name): [int(r) for r in ranks] for name, ranks in plain["groups"].items()}
    return RankDump(rank=int(plain["rank"]), path=str(path), groups=groups, entries=entries)


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
