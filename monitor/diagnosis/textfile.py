"""Reading a small UTF-8 data file (a rule file, the knob registry) with errors that name the line."""

from __future__ import annotations

from pathlib import Path


def read_text_file(path: Path, what: str, error: type[Exception]) -> str:
    """The UTF-8 text of ``path``; raises ``error`` naming the line of a byte that is not UTF-8."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}:1: cannot read {what}: {(exc.strerror or str(exc)).lower()}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise error(f"{path}:{line}: {what} is not UTF-8 (byte 0x{data[exc.start]:02x})") from None
