"""A terminal driver whose output survives the terminal going away.

When the terminal closes under the app (ssh drops, tmux kill-session), writes to it fail with
EIO. Textual's writer thread dies on the first failed write, and every write after that
blocks forever on its full queue: the app can never shut down, and ``monitor run`` never
gets to save the diagnosis. Here a failed write is dropped instead: there is nobody left to
read it, and the app goes on to its end.
"""

from __future__ import annotations

import errno
from typing import IO

from textual.drivers.linux_driver import LinuxDriver

# What a write to a terminal that is gone fails with (EIO: the pty's master closed). Any other
# error is left to Textual, as before.
LOST = (errno.EIO, errno.ENXIO, errno.EBADF, errno.EPIPE)


class LostTerminalTolerantOutput:
    """The driver's output file, with writes to a terminal that is gone dropped."""

    def __init__(self, file: IO[str]) -> None:
        self._file = file
        self.lost = False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                return self._file.write(text)
            except OSError as exc:
                if exc.errno not in LOST:
                    raise
                self.lost = True
            except ValueError:  # the file was closed
                self.lost = True
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._file.flush()
            except OSError as exc:
                if exc.errno not in LOST:
                    raise
                self.lost = True
            except ValueError:
                self.lost = True

    def fileno(self) -> int:
        return self._file.fileno()

    def isatty(self) -> bool:
        return self._file.isatty()


class HangUpSafeDriver(LinuxDriver):
    def __init__(self, app, **kwargs) -> None:
        super().__init__(app, **kwargs)
        self._file = LostTerminalTolerantOutput(self._file)
