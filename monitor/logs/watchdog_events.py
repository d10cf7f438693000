"""File-system change events through watchdog (FSEvents, kqueue: where there is no inotify).

watchdog's observer thread only puts paths on a queue; all reading happens in the thread that
calls ``Follower.read``.
"""

from __future__ import annotations

import queue
import warnings

from watchdog.events import (
    DirCreatedEvent,
    DirMovedEvent,
    FileAttribEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from monitor.logs.fs_events import RESCAN

# Events the follower acts on. Opens and closes are left out: our own reads would cause them.
WATCHED_EVENTS = [
    FileModifiedEvent, FileCreatedEvent, FileDeletedEvent, FileMovedEvent, FileAttribEvent,
    DirCreatedEvent, DirMovedEvent,
]

# watchdog warns when a directory tree appears faster than its recursive watch adds sub-watches
# (torchrun creating attempt_0/<rank>/): the watch is re-added, nothing is lost.
warnings.filterwarnings("ignore", message="Callback with id", category=RuntimeWarning, module=r"watchdog\.")


class _Enqueue(FileSystemEventHandler):
    def __init__(self, paths: queue.SimpleQueue[str]) -> None:
        self._paths = paths

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            self._paths.put(RESCAN)
            return
        self._paths.put(str(event.src_path))
        dest = getattr(event, "dest_path", "")
        if dest:
            self._paths.put(str(dest))


class WatchdogEvents:
    """Watches directories; ``get(timeout)`` blocks until a path changed (or the timeout)."""

    def __init__(self, watches: list[tuple[str, bool]]) -> None:
        """``watches``: (directory, recursive) pairs. Raises OSError if inotify is unavailable."""
        self._paths: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._observer = Observer()
        self._observer.daemon = True
        handler = _Enqueue(self._paths)
        try:
            for folder, recursive in watches:
                self._observer.schedule(handler, folder, recursive=recursive, event_filter=WATCHED_EVENTS)
            self._observer.start()
        except BaseException:
            self.close()
            raise

    def get(self, timeout: float) -> str | None:
        try:
            return self._paths.get(timeout=timeout) if timeout > 0 else self._paths.get_nowait()
        except queue.Empty:
            return None

    def take_problems(self) -> list[str]:
        return []  # watchdog re-adds its watches itself

    def drain(self) -> list[str]:
        paths: list[str] = []
        while True:
            try:
                paths.append(self._paths.get_nowait())
            except queue.Empty:
                return paths

    def close(self) -> None:
        try:
            self._observer.stop()
            if self._observer.is_alive():
                self._observer.join(timeout=2)
        except RuntimeError:
            pass
