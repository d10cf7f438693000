"""Linux inotify, read in the follower's own thread.

watchdog's observer hands every event through three threads (the inotify reader, the emitter
that pairs moves, the dispatcher) before it reaches us: at 800 writes/s (8 ranks, 10 ms
batches) that cost 7% of a core, more than reading the lines did. Here one non-blocking
descriptor is read with select() in the thread that reads the files, all pending events in one
read(2), nothing but the changed paths kept (benchmarks/follow_latency.py has the figures).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct

from monitor.logs.fs_events import OVERFLOW, RESCAN

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_ISDIR = 0x40000000
# What the follower acts on. Opens, reads and closes are left out: our own reads cause them.
WATCH_MASK = (IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
EVENT_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (of the NUL-padded name after it)
READ_SIZE = 64 * 1024


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if not hasattr(libc, "inotify_init1"):
        raise OSError(errno.ENOSYS, "inotify is not available")
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    return libc


class InotifyEvents:
    """Watches directories (recursively where asked); ``get(timeout)`` blocks until a path
    changed. Raises OSError where inotify cannot be set up (not Linux, the watch limit)."""

    def __init__(self, watches: list[tuple[str, bool]]) -> None:
        self._libc = _libc()
        fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise _os_error("inotify_init1")
        self._fd = fd
        self._poller = select.poll()  # not select(): the fd may be past 1024 with many logs open
        self._poller.register(fd, select.POLLIN)
        self._roots = watches
        self._folders: dict[int, tuple[str, bool]] = {}  # wd -> (folder, recursive)
        self._ready: list[str] = []
        self._problems: list[str] = []
        try:
            for folder, recursive in watches:
                self._watch(folder, recursive, required=True)
        except BaseException:
            self.close()
            raise

    def get(self, timeout: float) -> str | None:
        if not self._ready:
            if self._fd < 0 or not self._poller.poll(max(0.0, timeout) * 1000):
                return None
            self._read()
        return self._ready.pop(0) if self._ready else None

    def take_problems(self) -> list[str]:
        """Folders that could not be watched since the last call (the watch limit): events no
        longer cover every file, the caller should poll."""
        problems, self._problems = self._problems, []
        return problems

    def drain(self) -> list[str]:
        self._read()
        paths, self._ready = self._ready, []
        return paths

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _watch(self, folder: str, recursive: bool, required: bool = False) -> None:
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), WATCH_MASK)
        if wd < 0:
            error = _os_error(f"watching {folder}")
            if required:
                raise error
            if error.errno in LIMITS:
                self._problems.append(f"file events unavailable ({error.strerror})")
            return  # else a folder gone already: nothing to watch
        self._folders[wd] = (folder, recursive)
        if recursive:
            try:
                entries = list(os.scandir(folder))
            except OSError:
                return
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    self._watch(entry.path, True)

    def _read(self) -> None:
        while self._fd >= 0:
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                return
            if not data:
                return
            self._parse(data)

    def _parse(self, data: bytes) -> None:
        offset, header_size = 0, EVENT_HEADER.size
        while offset < len(data):
            wd, mask, _cookie, length = EVENT_HEADER.unpack_from(data, offset)
            name = data[offset + header_size:offset + header_size + length].rstrip(b"\0")
            offset += header_size + length
            if mask & IN_Q_OVERFLOW:
                # Events were lost, folders created meanwhile among them: watch them (adding a
                # watch again is harmless), discover their files and look at every file.
                for folder, recursive in self._roots:
                    self._watch(folder, recursive)
                self._ready += [RESCAN, OVERFLOW]
                continue
            if mask & IN_IGNORED:
                self._folders.pop(wd, None)  # the folder was deleted or unmounted
                continue
            folder, recursive = self._folders.get(wd, ("", False))
            if not folder:
                continue
            if mask & (IN_ISDIR | IN_DELETE_SELF | IN_MOVE_SELF):
                if recursive and mask & (IN_CREATE | IN_MOVED_TO) and name:
                    self._watch(os.path.join(folder, os.fsdecode(name)), True)
                self._ready.append(RESCAN)
            elif name:
                self._ready.append(os.path.join(folder, os.fsdecode(name)))


# The limits behind the errors people meet, by the sysctl that raises them.
LIMITS = {
    errno.ENOSPC: "the inotify watch limit is reached (sysctl fs.inotify.max_user_watches)",
    errno.EMFILE: "too many inotify instances (sysctl fs.inotify.max_user_instances)",
}


def _os_error(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {LIMITS.get(code) or os.strerror(code)}")
