"""Byte counts in words, the same way everywhere a report or a screen line shows one."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def binary_size(value: float) -> str:
    """512 B, 3.2 MiB, 78.0 GiB."""
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable: the last unit always returns")
