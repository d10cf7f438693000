"""The terminal driver drops output to a terminal that is gone instead of dying on it (Textual's
own writer thread dies on the first EIO, and every later write then blocks forever)."""

from __future__ import annotations

import os
import pty

from textual.drivers.linux_driver import LinuxDriver

from monitor.tui.app import MonitorApp
from monitor.tui.driver import HangUpSafeDriver, LostTerminalTolerantOutput
from monitor.session.feeds import LogBatch


class NoLogs:
    def poll(self, timeout: float) -> LogBatch:
        return LogBatch()


def test_writes_to_a_hung_up_terminal_are_dropped():
    master, slave = pty.openpty()
    terminal = os.fdopen(slave, "w", buffering=1)
    output = LostTerminalTolerantOutput(terminal)
    output.write("before\n")
    output.flush()
    assert os.read(master, 100).replace(b"\r", b"") == b"before\n"
    assert not output.lost
    os.close(master)  # the terminal closes: writes to the slave now fail with EIO
    for _ in range(100):  # far more writes than Textual's writer queue holds
        assert output.write("\x1b[?1049l" * 100) == 800
        output.flush()
    assert output.lost
    assert output.fileno() == slave
    try:
        terminal.close()
    except OSError:
        pass  # the buffered bytes had nowhere to go


def test_the_app_uses_it_where_textual_would_use_the_terminal_driver():
    app = MonitorApp(NoLogs())
    assert app.driver_class is HangUpSafeDriver
    assert issubclass(HangUpSafeDriver, LinuxDriver)
