"""What to follow: the files named by a PATH argument (a file, a directory or a glob), now and later.

A directory means every log file under it, including files created after the start (torchrun
``--log-dir`` writes ``attempt_0/<rank>/stderr.log`` once the workers start). A glob is expanded
again on every rescan, so files that match later are picked up too.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass

# Files in a log directory that are not logs: archives, checkpoints, tensors, images. A rotated,
# compressed log is skipped too (its text was read while it was the live file).
NOT_LOG_SUFFIXES = (
    ".gz", ".bz2", ".xz", ".zst", ".zip", ".tar", ".tgz", ".7z", ".lz4",
    ".pt", ".pth", ".ckpt", ".bin", ".safetensors", ".npy", ".npz", ".pkl", ".pickle", ".h5",
    ".png", ".jpg", ".jpeg", ".gif", ".pdf", ".so", ".o", ".pyc", ".sqlite", ".db", ".lock",
)


class SourceError(Exception):
    """A PATH argument that cannot be followed (one line naming it)."""


@dataclass(frozen=True, slots=True)
class Source:
    """One PATH argument: ``kind`` is "file", "dir" or "glob"; ``root`` is the directory to watch."""

    spec: str
    kind: str
    root: str

    def matches(self, path: str) -> bool:
        """Whether a file at ``path`` (found by a directory event) belongs to this source."""
        if self.kind == "file":
            return path == self.spec
        if self.kind == "dir":
            return path.startswith(self.root + os.sep) and is_log_name(path)
        return glob_matches(self.spec, path) and is_log_name(path)

    def expand(self) -> list[str]:
        """The files this source names right now (a missing explicit file is still named)."""
        if self.kind == "file":
            return [self.spec]
        if self.kind == "dir":
            return list_log_files(self.root)
        return sorted(p for p in glob.glob(self.spec, recursive=True) if os.path.isfile(p) and is_log_name(p))


def is_log_name(path: str) -> bool:
    name = os.path.basename(path)
    return not name.startswith(".") and not name.lower().endswith(NOT_LOG_SUFFIXES)


def list_log_files(root: str) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if is_log_name(path):
                found.append(path)
    return found


def glob_matches(pattern: str, path: str) -> bool:
    """Whether ``path`` matches ``pattern`` as glob would have it (``**`` spans directories)."""
    return _match_parts(pattern.split(os.sep), path.split(os.sep))


def _match_parts(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match_parts(rest, parts[i:]) for i in range(len(parts) + 1))
    if not parts or (parts[0].startswith(".") and not head.startswith(".")):
        return False
    return fnmatch.fnmatchcase(parts[0], head) and _match_parts(rest, parts[1:])


def parse_source(spec: str) -> Source:
    """Classify one PATH argument; raises SourceError if it can never name a file."""
    path = os.path.normpath(os.path.abspath(os.path.expanduser(spec)))
    if glob.has_magic(spec):
        return Source(path, "glob", _glob_root(path))
    if os.path.isdir(path):
        return Source(path, "dir", path)
    if os.path.exists(path):
        if not os.path.isfile(path):
            raise SourceError(f"{spec}: not a regular file (a pipe or device cannot be followed)")
        return Source(path, "file", os.path.dirname(path))
    if os.path.isdir(os.path.dirname(path)):
        # Not there yet: the job has not started writing it. Followed once it appears.
        return Source(path, "file", os.path.dirname(path))
    raise SourceError(f"{spec}: no such file or directory")


def _glob_root(pattern: str) -> str:
    parts = pattern.split(os.sep)
    fixed: list[str] = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    root = os.sep.join(fixed) or os.sep
    return root
