"""Writing a file beside the job's log: whole or not at all, readable by its owner only.

At the bottom of the package with ``monitor/text.py``: it imports nothing of ``monitor``.
"""

from __future__ import annotations

import os
from pathlib import Path


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
