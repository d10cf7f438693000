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
from pathlib import Path

from monitor.logs.reader import is_link_loop, is_log_like

# A compressed (rotated) log cannot be followed; its text was read while it was the live file.
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zip")


class SourceError(Exception):
    """A PATH argument that cannot be followed (one line naming it)."""


@dataclass(frozen=True, slots=True)
class Source:
    """One PATH argument: ``kind`` is "file", "dir" or "glob"; ``root`` is the directory to watch."""

    spec: str
    kind: str
    root: str

    def name_of(self, event_path: str) -> str | None:
        """The name this source gives the file at ``event_path`` (an absolute path from a
        file-system event), or None if the file is not one of its files."""
        path = event_path if os.path.isabs(self.root) else os.path.relpath(event_path)
        if self.kind == "file":
            return path if path == self.spec else None
        if self.kind == "dir":
            inside = self.root == os.curdir or path.startswith(self.root + os.sep)
            return path if inside and not path.startswith(os.pardir) and is_log_name(path) else None
        return path if glob_matches(self.spec, path) and is_log_name(path) else None

    def expand(self) -> list[str]:
        """The files this source names right now (a missing explicit file is still named)."""
        if self.kind == "file":
            return [self.spec]
        if self.kind == "dir":
            return list_log_files(self.root)
        return sorted(p for p in glob.glob(self.spec, recursive=True) if os.path.isfile(p) and is_log_name(p))


def is_log_name(path: str) -> bool:
    """The files of a directory that are logs: the same choice as ``diagnose`` makes (so a live
    follow and a post-mortem read the same files), less compressed ones."""
    return is_log_like(Path(path)) and not path.lower().endswith(COMPRESSED_SUFFIXES)


def list_log_files(root: str) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if is_log_name(path) or is_link_loop(path):  # a loop is said, as by diagnose
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
    # Kept relative when given relative: files are named as the user (and ``diagnose``) names them.
    path = os.path.normpath(os.path.expanduser(spec))
    if glob.has_magic(spec):
        return Source(path, "glob", _glob_root(path))
    if os.path.isdir(path):
        return Source(path, "dir", path)
    if os.path.exists(path):
        if not os.path.isfile(path):
            raise SourceError(f"{spec}: not a regular file (a pipe or device cannot be followed)")
        return Source(path, "file", os.path.dirname(path) or os.curdir)
    if spec.endswith(os.sep):
        raise SourceError(f"{spec}: no such directory")
    if os.path.isdir(os.path.dirname(path) or os.curdir):
        # Not there yet: the job has not started writing it. Followed once it appears.
        return Source(path, "file", os.path.dirname(path) or os.curdir)
    raise SourceError(f"{spec}: no such file or directory")


def _glob_root(pattern: str) -> str:
    parts = pattern.split(os.sep)
    fixed: list[str] = []
    for part in parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    if not fixed:
        return os.curdir
    return os.sep.join(fixed) or os.sep
