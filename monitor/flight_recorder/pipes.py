"""Asking a running job for flight-recorder dumps: each rank of an NCCL job (and of a gloo job
running ``serve.py``) reads the FIFO ``<pipe prefix><rank>.pipe``; a byte written to it makes
that rank write ``<dump prefix><rank>``.
"""

from __future__ import annotations

import glob
import os
import stat


def request_dumps(pipe_prefix: str) -> list[str]:
    """Write to every rank's pipe; returns the pipes that took the request. Never blocks and
    never raises: a pipe nobody reads (its rank ended, or it has not opened it yet) is skipped."""
    asked = []
    for path in sorted(glob.glob(glob.escape(pipe_prefix) + "*.pipe")):
        try:
            if not stat.S_ISFIFO(os.stat(path).st_mode):
                continue
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue  # ENXIO: nobody reads the other end (its rank ended); gone; not ours
        try:
            os.write(fd, b"1")
            asked.append(path)
        except OSError:
            pass
        finally:
            os.close(fd)
    return asked


def dump_files(dump_prefix: str) -> dict[str, int]:
    """The ranks' dump files (``<prefix><rank>``) and their modification times (ns). Compare two
    of these to see which ranks wrote since: a file's time is the kernel's coarse clock, which
    can lag ``time.time()`` taken just before the write by a few milliseconds."""
    found = {}
    for path in sorted(glob.glob(glob.escape(dump_prefix) + "*")):
        if not path[len(dump_prefix):].isdigit():
            continue
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found[path] = info.st_mtime_ns
    return found
