"""Byte counts, durations and clock times in words, the same way everywhere a report or a
screen line shows one."""

from __future__ import annotations

import math
import time

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def binary_unit(value: float) -> tuple[str, int]:
    """The unit ``value`` bytes are shown in, and its size in bytes: ("GiB", 1 << 30)."""
    for power, unit in enumerate(_UNITS):
        if abs(value) < 1024 ** (power + 1) or unit == _UNITS[-1]:
            return unit, 1024 ** power
    raise AssertionError("unreachable: the last unit always returns")


def binary_size(value: float) -> str:
    """512 B, 3.2 MiB, 78.0 GiB."""
    unit, scale = binary_unit(value)
    return f"{value:.0f} {unit}" if unit == "B" else f"{value / scale:.1f} {unit}"


def duration(seconds: float | None) -> str:
    """45s, 2m10s, 1h02m, 2d03h; ? when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    days, seconds = divmod(seconds, 86400)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def clock(timestamp: float | None) -> str:
    """A wall-clock time as HH:MM:SS (local time)."""
    return "—" if timestamp is None else time.strftime("%H:%M:%S", time.localtime(timestamp))
