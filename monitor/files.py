"""Creating the files the monitor writes beside a job's log, and replacing one whole or not at all.

The folders these files go to may be writable by others (a shared ``/scratch/logs``, a
group-writable ``--job-dir``, many runs of a job array at once), and their names are predictable
(``run-<stamp>.log``): a file is created exclusively (``create_new``), under the next name when
one is taken.

At the bottom of the package with ``monitor/text.py``: it imports nothing of ``monitor``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

# Create, or fail with EEXIST when anything has the name: a file, or a symlink (dangling or not).
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def create_new(names: Iterable[Path]) -> tuple[Path, int]:
    """Create the first of ``names`` that nothing has yet, mode 0600, open for writing: its path
    and descriptor. Raises OSError (FileExistsError when every name was taken)."""
    taken = None
    for path in names:
        try:
            return path, os.open(path, NEW_FILE, 0o600)
        except FileExistsError:
            taken = path
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(taken))


def replace_file(path: Path, data: bytes) -> str | None:
    """Replace ``path`` with ``data`` atomically (a reader sees the old file or the new one,
    never half), mode 0600 (side files hold command lines and stacks). Never raises: returns
    None, or one line saying why it could not be written (a full disk must not turn a good job
    into a failed one)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # a stale .tmp of another mode
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return f"cannot write {path}: {(exc.strerror or str(exc))}"
    return None
