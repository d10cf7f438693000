"""File-system change events, reduced to "look at this path again".

All reading happens in the thread that calls ``Follower.read``; the events only say which
path to look at. Where events do not arrive (NFS, Lustre) or cannot be set up (the inotify
watch limit), the follower polls; it also keeps a slow safety poll when events work.

A backend has ``get(timeout) -> path | None`` (blocks until a path changed), ``drain() ->
[path]`` (what is waiting, without blocking), ``take_problems() -> [line]`` (folders it could
not watch: the caller then polls) and ``close()``; paths are absolute, or:
"""

from __future__ import annotations

import sys
from typing import Protocol

# A directory appeared, moved or went away: its files must be discovered again.
RESCAN = ""
# The kernel's event queue overflowed: events were lost, every file must be looked at.
OVERFLOW = "\0overflow"


class FileEvents(Protocol):
    def get(self, timeout: float) -> str | None: ...

    def drain(self) -> list[str]: ...

    def take_problems(self) -> list[str]: ...

    def close(self) -> None: ...


def open_file_events(watches: list[tuple[str, bool]]) -> FileEvents:
    """Watch ``watches`` ((directory, recursive) pairs): inotify read in the caller's thread on
    Linux, watchdog's observer elsewhere. Raises OSError where events cannot be set up."""
    if sys.platform.startswith("linux"):
        from monitor.logs.inotify import InotifyEvents

        return InotifyEvents(watches)
    from monitor.logs.watchdog_events import WatchdogEvents

    return WatchdogEvents(watches)
