"""What to follow: the files named by a PATH argument (a file, a directory or a glob), now and later.

A directory means every log file under it, including files created after the start (torchrun
``--log-dir`` writes ``attempt_0/<rank>/stderr.log`` once the workers start). A glob is expanded
again on every rescan, so files that match later are picked up too.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from monitor.logs.reader import is_link_loop, is_log_like

# A compressed (rotated) log cannot be followed; its text was read while it was the live file.
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zip")


# A glob over a huge tree (``/sys/**/*``) would take minutes at every rescan: its walk stops after
# this many entries or seconds, and follows what it found by then.
GLOB_MAX_ENTRIES = 100_000
GLOB_MAX_S = 5.0


class SourceError(Exception):
    """A PATH argument that cannot be followed (one line naming it)."""


class GlobTooWide(SourceError):
    """A glob whose walk stopped at its bounds; ``found``: what it named by then."""

    def __init__(self, message: str, found: list[str]) -> None:
        super().__init__(message)
        self.found = found


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
        return expand_glob(self.spec, lambda path: os.path.isfile(path) and is_log_name(path))


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


def expand_glob(pattern: str, keep: Callable[[str], bool]) -> list[str]:
    """The paths ``keep`` wants of those ``glob.glob(pattern, recursive=True)`` names, sorted,
    except that ``**`` does not enter symlinked folders (``up -> ..`` would make it endless;
    ``monitor watch DIR`` and ``diagnose`` walk a folder the same way), and the walk is bounded:
    raises GlobTooWide."""
    parts = _glob_parts(pattern)
    fixed = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts))
    start = os.sep.join(parts[:fixed]) or (os.sep if pattern.startswith(os.sep) else "")
    walk = _Walk(keep)
    try:
        walk.match(start, parts[fixed:])
    except _Bounded:
        found = sorted(set(walk.found))
        raise GlobTooWide(
            f"{pattern}: the glob reaches more than {GLOB_MAX_ENTRIES} entries or takes over {GLOB_MAX_S:g} s; "
            f"following the {len(found)} file(s) found by then (name a narrower glob)", found) from None
    return sorted(set(walk.found))  # a/**/x/**/y can name a file once per way to reach it


def _glob_parts(pattern: str) -> list[str]:
    """The parts of a glob, less a "**" right after another: a/**/**/x is a/**/x, and each "**"
    more would walk the same folders again."""
    parts: list[str] = []
    for part in pattern.split(os.sep):
        if not (part == "**" and parts[-1:] == ["**"]):
            parts.append(part)
    return parts


class _Bounded(Exception):
    """A glob's walk reached its bounds."""


class _Walk:
    """One bounded walk for a glob: the entries looked at and the time are counted."""

    def __init__(self, keep: Callable[[str], bool]) -> None:
        self.keep = keep
        self.found: list[str] = []
        self.looked = 0
        self.deadline = time.monotonic() + GLOB_MAX_S

    def match(self, folder: str, parts: list[str]) -> None:
        """Every path under ``folder`` ("": the current one) that ``parts`` match."""
        if not parts:
            if self.keep(folder):
                self.found.append(folder)
        elif parts[0] == "**":
            self._match_below(folder, parts[1:] or ["*"])
        else:
            self._match_in(folder, self._entries(folder), parts)

    def _match_in(self, folder: str, entries: list[os.DirEntry], parts: list[str]) -> None:
        head, rest = parts[0], parts[1:]
        for entry in entries:
            if (head.startswith(".") or not entry.name.startswith(".")) and fnmatch.fnmatchcase(entry.name, head):
                if not rest or _is_dir(entry, follow_symlinks=True):  # outside **, a symlinked folder is entered
                    self.match(os.path.join(folder, entry.name), rest)

    def _match_below(self, folder: str, parts: list[str]) -> None:
        """``parts`` matched in ``folder`` and in every folder below it, each listed once; as
        glob's ``**``, hidden folders are left out, and symlinked ones too."""
        entries = self._entries(folder)
        self._match_in(folder, entries, parts)
        for entry in entries:
            if not entry.name.startswith(".") and _is_dir(entry, follow_symlinks=False):
                self._match_below(os.path.join(folder, entry.name), parts)

    def _entries(self, folder: str) -> list[os.DirEntry]:
        try:
            with os.scandir(folder or os.curdir) as entries:
                listed = list(entries)
        except OSError:
            return []  # not a folder, gone, or not ours to read: glob names nothing there either
        self.looked += len(listed)
        if self.looked > GLOB_MAX_ENTRIES or time.monotonic() > self.deadline:
            raise _Bounded
        return listed


def _is_dir(entry: os.DirEntry, follow_symlinks: bool) -> bool:
    try:
        return entry.is_dir(follow_symlinks=follow_symlinks)
    except OSError:  # a symlink loop
        return False


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
