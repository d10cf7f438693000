"""Real writers for the follow tests: sequence-numbered lines appended to files on disk."""

from __future__ import annotations

import os
import re
import threading
import time

from monitor.logs.follow import Follower

SEQ = re.compile(r"^seq (\d+)\b")


class SeqWriter(threading.Thread):
    """Writes ``seq N ...`` lines 0..count-1 to ``path``, each in two writes (so the follower
    sees partial lines), pausing ``pause`` s between lines. ``actions[n]`` runs in this thread
    just before line n is written, with the writer itself as argument (so rotation happens
    between writes, as logrotate does with a paused writer)."""

    def __init__(self, path: str, count: int, *, pause: float = 0.0005, actions=None, append: bool = True):
        super().__init__(daemon=True)
        self.path = path
        self.count = count
        self.pause = pause
        self.actions = actions or {}
        self.append = append
        self.fd = self.open()

    def open(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if self.append else 0)
        return os.open(self.path, flags, 0o644)

    def reopen(self) -> None:
        os.close(self.fd)
        self.fd = self.open()

    def run(self) -> None:
        for n in range(self.count):
            action = self.actions.get(n)
            if action is not None:
                action(self)
            line = f"seq {n:06d} loss={n * 0.001:.3f} payload {'x' * (n % 37)}\n".encode()
            os.write(self.fd, line[:7])
            os.write(self.fd, line[7:])
            if self.pause:
                time.sleep(self.pause)
        os.close(self.fd)


def follow_until_done(follower: Follower, writers: list[threading.Thread], *, settle: float = 0.6):
    """Read while the writers run and until nothing new came for ``settle`` seconds; then close."""
    lines, ended = [], []
    for writer in writers:
        writer.start()
    quiet_since = None
    while True:
        update = follower.read(0.05)
        lines += update.lines
        ended += [path for _, path in update.ended]
        if any(w.is_alive() for w in writers) or update.lines:
            quiet_since = None
            continue
        quiet_since = quiet_since or time.monotonic()
        if time.monotonic() - quiet_since > settle:
            break
    final = follower.close()
    return lines + final.lines, ended + [path for _, path in final.ended]


def seqs(lines) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := SEQ.match(line.text))]
