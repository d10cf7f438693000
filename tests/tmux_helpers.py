"""A terminal a test types into: a tmux server of its own (its socket in the test's folder), one
session of a given size, what the screen shows, and keys as tmux delivers them."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


class Terminal:
    def __init__(self, folder: Path, name: str, command: str, width: int = 80, height: int = 24) -> None:
        self.tmux = ["tmux", "-S", str(folder / "tmux.sock")]
        self.session = name
        subprocess.run([*self.tmux, "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), command],
                       check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", self.session],
                              capture_output=True, text=True).stdout

    def wait_for_text(self, text: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        shown = ""
        while time.monotonic() < deadline:
            shown = self.screen()
            if text in shown:
                return shown
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never shown:\n{shown}")

    def keys(self, *keys: str, literal: bool = False) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", self.session, *(["-l"] if literal else []), *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)
