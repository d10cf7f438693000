"""Reading a small UTF-8 TOML data file (a rule file, the knob registry) with errors that name
the file and the line."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import regex

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

# The shipped rule files are tens of KB: a bound far above them, so that a path naming a big
# file costs no more than this.
MAX_TEXT_BYTES = 16 << 20


def read_text_file(path: Path, what: str, error: type[Exception]) -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``MAX_TEXT_BYTES``; raises ``error``
    naming the line of a byte that is not UTF-8."""
    try:
        data = _read_regular_file(path, what, error)
    except OSError as exc:
        raise error(f"{path}:1: cannot read {what}: {(exc.strerror or str(exc)).lower()}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{path}:{line}: {what} is not UTF-8 (byte 0x{data[exc.start]:02x})") from None


def _read_regular_file(path: Path, what: str, error: type[Exception]) -> bytes:
    # Opened without blocking (a FIFO would wait for a writer) and read only if it is a regular
    # file: /dev/zero never ends.
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise error(f"{path}:1: {what} is not a regular file")
        data = file.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise error(f"{path}:1: {what} is larger than {MAX_TEXT_BYTES >> 20} MiB")
    return data


def read_toml_file(path: Path, what: str, error: type[Exception]) -> tuple[str, dict]:
    """The text of ``path`` and its TOML data; raises ``error`` as ``file:line: message``."""
    text = read_text_file(path, what, error)
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_from_message(str(exc))
        message = getattr(exc, "msg", None) or str(exc).split(" (at line")[0]
        raise error(f"{path}:{line}: invalid TOML: {message}") from None


def _line_from_message(message: str) -> int:
    match = regex.search(r"line (\d+)", message)
    return int(match.group(1)) if match else 1
