"""Creating the files the monitor writes beside a job's log: new, never through a link, readable
by their owner only; and replacing one whole or not at all.

The folders these files go to may be writable by others (a shared ``/scratch/logs``, a
group-writable ``--job-dir``), and their names are predictable (``run-<stamp>.log``, its side
files). A link planted at such a name must never make the monitor (often root) create or
overwrite the link's target: every file is created exclusively and without following a link
(``create_new``), under the next name when one is taken.

At the bottom of the package with ``monitor/text.py``: it imports nothing of ``monitor``.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

# Create, or fail with EEXIST when anything has the name: a file, or a symlink (dangling or not).
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
# Names a temporary file tries (random ones: taken only when someone planted them).
TMP_TRIES = 20


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


def open_to_append(path: Path) -> int:
    """Open ``path`` to append to it (created, mode 0600, if missing); a symlink at its name is
    refused (``ELOOP``, see ``why``), never followed."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)


def open_read_write(path: Path) -> int:
    """Open ``path`` to read and write it (created, mode 0600, if missing), never through a link.
    Not in append mode: splice(2) refuses such a file, so its one writer keeps the offset."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)


def why(exc: OSError) -> str:
    """Why a file could not be opened, in words: ``O_NOFOLLOW``'s ELOOP says a link is there."""
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link (not followed)"
    return exc.strerror or str(exc)


def replace_file(path: Path, data: bytes) -> str | None:
    """Replace ``path`` with ``data`` atomically (a reader sees the old file or the new one,
    never half), mode 0600 (side files hold command lines and stacks). Never raises: returns
    None, or one line saying why it could not be written (a full disk must not turn a good job
    into a failed one)."""
    tmp = None
    try:
        tmp, fd = create_new(path.with_name(f"{path.name}.{secrets.token_hex(4)}.tmp") for _ in range(TMP_TRIES))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:  # ours: never unlink what someone else put at a name we tried
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return f"cannot write {path}: {why(exc)}"
    return None


def read_at_most(path: Path, limit: int, follow: bool = True) -> bytes:
    """At most ``limit + 1`` bytes of ``path`` from its start: more than ``limit`` tells the
    caller the file is too big for it, and no file decides how much is read. ``follow=False``:
    never through a link (a file beside a job, in a folder others may write). Raises OSError."""
    flags = os.O_RDONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    with os.fdopen(os.open(path, flags), "rb") as handle:
        return handle.read(limit + 1)
