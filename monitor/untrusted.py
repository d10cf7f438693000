"""Reading untrusted files (checkpoints, flight-recorder dumps): bounded by the operating system.

Two bounds, one inside the other:

- ``BoundedUnpickler``: the pure-Python unpickler with every opcode counted (an opcode makes at
  most one object), reading through a ``BoundedReader`` that refuses a read beyond the bytes
  left (a byte string, frame or line a pickle merely claims is never allocated). It imports
  nothing unless a subclass's ``find_class`` says what a global becomes. Its refusals say what
  was asked for: the clear message for the usual hostile or corrupt file.
- ``run_bounded``: runs the whole parse in a fresh interpreter (``sys.executable -I -S -c``, the
  path passed as an argument: never a fork of the monitor, whose memory it would inherit) whose
  data is limited by ``setrlimit`` (``MEMORY_BYTES``: the child and the monitor together stay
  under 200 MB) and whose wall-clock time is limited (``TIMEOUT_S``, then it is killed). It
  answers the plain data the parse returns, passed back as JSON over a pipe of bounded size,
  or raises ``Refused`` with one line saying why not.

RLIMIT_DATA bounds what a pickle can grow (heap and private mappings: since Linux 4.7 these
include malloc's mmaps and Python's arenas) and not the files mapped read-only at start (a
distribution's locale archive maps 200 MB); RLIMIT_AS is set too, above what was mapped at
start, for kernels whose RLIMIT_DATA counts the heap only. Measured with CPython 3.11 on Linux
6.18 (a pickle of 4 million empty sets): RLIMIT_DATA = 176 MiB stops it at 184,000 kB peak RSS.

Bottom layer: imports nothing of the monitor, so that the child starts with the standard
library alone (``-S``: no site-packages to scan) plus the module it is asked to run.
"""

from __future__ import annotations

import json
import pickle
import struct
import sys
import time
from pathlib import Path
from typing import ClassVar

# What the child's data may take: with the interpreter's own pages (about 10 MB) the child stays
# under 140 MB, and with the monitor beside it (40-60 MB) the two under 200 MB.
MEMORY_BYTES = 128 << 20
TIMEOUT_S = 30.0
# The plain data a parse may pass back (a real dump's, the largest, is about 1 MB).
MAX_RESULT_BYTES = 16 << 20
_ROOT = str(Path(__file__).resolve().parent.parent)
_MARK = b"\x00monitor-untrusted:"
# The child: its limits first, before the module it runs is imported or the file opened. The CPU
# limit is a backstop for a child whose parent died before its timeout could kill it.
_CHILD = """\
import resource, sys
memory = int(sys.argv[1])
with open("/proc/self/statm") as statm:
    mapped = int(statm.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
resource.setrlimit(resource.RLIMIT_AS, (mapped + memory + (64 << 20),) * 2)
resource.setrlimit(resource.RLIMIT_CPU, (int(sys.argv[3]),) * 2)
sys.path.insert(0, sys.argv[2])
from monitor.untrusted import _serve
_serve(int(sys.argv[4]), sys.argv[5], sys.argv[6:])
"""


class Refused(Exception):
    """Why a bounded parse gave no answer, in one line ("reading it needs more than 176 MB")."""


class TooBig(Exception):
    """A pickle that asks for more than its bounds; the message says which ("more than N opcodes")."""


# -- the child process ---------------------------------------------------------------------------
def run_bounded(target: str, *args: str, memory: int = MEMORY_BYTES, timeout_s: float = TIMEOUT_S,
                max_result: int = MAX_RESULT_BYTES, usage: dict | None = None):
    """``target`` (``"monitor.package.module:function"``) called with ``args`` (strings) in a
    bounded child; returns what it returned (plain data, through JSON). Raises ``Refused``.

    ``usage``, if given, gets the child's own peak RSS (``peak_rss_kb``, its VmHWM: what
    getrusage would add to it is the monitor's size at the fork) where it could answer."""
    import subprocess
    import threading

    command = [sys.executable, "-I", "-S", "-c", _CHILD, str(memory), _ROOT, str(int(timeout_s) + 10),
               str(max_result), target, *args]
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, close_fds=True)
    except (OSError, ValueError) as exc:
        raise Refused(f"cannot start a reader process ({getattr(exc, 'strerror', None) or exc})") from None
    pipe = child.stdout
    assert pipe is not None  # stdout=PIPE
    output: list[bytes] = []
    # The child bounds what it writes; so does this read (a pipe, never a file of unknown size).
    reader = threading.Thread(target=lambda: output.append(pipe.read(max_result + 4096)), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        # The pipe's end first (Popen.wait with a timeout polls, up to 50 ms late), then the exit.
        reader.join(timeout_s)
        child.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        reader.join()
        pipe.close()
    if timed_out:
        raise Refused(f"reading it took longer than {timeout_s:g} s")
    text = b"".join(output)
    reply = None
    if _MARK in text:
        try:
            reply = json.loads(text[text.rindex(_MARK) + len(_MARK):])
        except ValueError:
            reply = None
    if isinstance(reply, dict) and usage is not None and isinstance(reply.get("peak_rss_kb"), int):
        usage["peak_rss_kb"] = reply["peak_rss_kb"]
    if not isinstance(reply, dict):
        # Killed (the OOM killer, a signal), or it failed before it could answer.
        last = text.decode(errors="replace").strip().splitlines()[-1:] or [""]
        status = child.returncode
        why = f"killed by signal {-status}" if status < 0 else f"exit status {status}"
        raise Refused(f"the reader process stopped ({why}{': ' + last[0][:200] if last[0] else ''})")
    if reply.get("memory"):
        raise Refused(f"reading it needs more than {memory >> 20} MB")
    if "too_big" in reply:
        raise Refused(f"what it holds comes to more than {max_result >> 20} MB")
    if "error" in reply:
        raise Refused(f"the reader failed ({' '.join(str(reply['error']).split())[:300]})")
    return reply.get("result")


def _serve(max_result: int, target: str, args: list[str]) -> None:
    """In the child: run ``target``, write its answer (or why none) as one JSON line."""
    import importlib

    module, _, name = target.partition(":")
    reply: dict = {}
    out_of_memory = False
    try:
        if not module.startswith("monitor."):
            raise ValueError(f"not a monitor function: {target}")
        function = getattr(importlib.import_module(module), name)
        reply = {"result": function(*args)}
        data = json.dumps(reply, separators=(",", ":")).encode()
    except MemoryError:
        out_of_memory = True  # the frames holding what was made are gone once out of this block
    except Exception as exc:  # the answer is one line, whatever went wrong
        data = json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}).encode()
    if out_of_memory:
        reply = {}
        data = b'{"memory":true}'
    if len(data) > max_result:
        data = json.dumps({"too_big": len(data)}).encode()
    data = data[:-1] + b',"peak_rss_kb":%d}' % _peak_rss_kb()
    sys.stdout.buffer.write(_MARK + data + b"\n")
    sys.stdout.flush()


def _peak_rss_kb() -> int:
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return -1


# -- the bounded unpickler -----------------------------------------------------------------------
class BoundedReader:
    """The file a pickle is read from, giving out at most ``max_bytes`` in all.

    The unpickler reads what an opcode declares (a byte string's length, a frame, a line of
    protocol 0) in one request: a request beyond what is left is refused before anything is
    read or allocated, whatever the file claims."""

    def __init__(self, file, max_bytes: int, over: str) -> None:
        self._file = file
        self._left = max_bytes
        self._over = over  # what a refusal says: "more than the 256.0 MiB a checkpoint's pickle may hold"

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self._left:
            raise TooBig(self._over)
        data = self._count(self._file.read(size))
        if len(data) < size:
            raise EOFError  # the Python unpickler would go on with a short string
        return data

    def readline(self) -> bytes:
        line = self._file.readline(self._left + 1)
        if len(line) > self._left:
            raise TooBig(self._over)
        return self._count(line)

    def _count(self, data: bytes) -> bytes:
        self._left -= len(data)
        return data


class _Opcodes(dict):
    """One unpickler's opcodes, counted as they are run."""

    def __init__(self, table: dict, limit: int) -> None:
        super().__init__(table)
        self._limit = limit
        self._left = limit

    def __getitem__(self, opcode: int):
        self._left -= 1
        if self._left < 0:
            raise TooBig(f"more than {self._limit:,} opcodes")
        return super().__getitem__(opcode)

    def __missing__(self, opcode: int):
        raise pickle.UnpicklingError(f"invalid load key, {bytes([opcode])!r}.")


class BoundedUnpickler(pickle._Unpickler):
    """The Python unpickler, not the C one: its opcodes can be counted and replaced, and its memo
    is a dict (the C one allocates an array as long as the highest index a pickle names:
    LONG_BINPUT 100,000,000, five bytes, costs 1.5 GB).

    ``max_opcodes`` bounds the objects made; ``refused_opcodes`` (a subclass's) are not known at
    all ("invalid load key"). ``find_class`` refuses every global unless a subclass says
    otherwise; raising ``TooBig`` from a subclass's hook is a refusal too."""

    refused_opcodes: frozenset[int] = frozenset()
    # Each class's own table (in its __dict__, made once by _table()): declared, not defined here.
    _dispatch_table: ClassVar[dict]

    def __init__(self, file, max_opcodes: int) -> None:
        super().__init__(file)
        # typeshed declares dispatch a class variable, but pickle's loop reads self.dispatch: an
        # instance's own table replaces the class's for this load only.
        self.dispatch = _Opcodes(self._table(), max_opcodes)  # type: ignore[misc]

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"it names {module}.{name}")

    def _load_bytearray8(self) -> None:
        # The stock opcode allocates the declared length before reading: read it first instead.
        # read and append are bound by pickle's load() (self.read = file.read, ...), which
        # typeshed does not declare.
        (size,) = struct.unpack("<Q", self.read(8))  # type: ignore[attr-defined]
        self.append(bytearray(self.read(size)))  # type: ignore[attr-defined]

    @classmethod
    def _table(cls) -> dict:
        table = cls.__dict__.get("_dispatch_table")
        if table is None:
            table = {opcode: load for opcode, load in pickle._Unpickler.dispatch.items()
                     if opcode not in cls.refused_opcodes}
            table[pickle.BYTEARRAY8[0]] = BoundedUnpickler._load_bytearray8
            cls._dispatch_table = table
        return table
