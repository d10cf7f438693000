"""Turning raw log bytes into clean lines, the same way for files read whole and files followed.

Logs of real jobs hold terminal colour codes, tqdm's ``\\r`` progress updates, invalid UTF-8,
NUL bytes from preallocated files, Windows line ends and, now and then, one enormous line.
``LineAssembler`` splits a byte stream into lines with bounded memory; ``clean`` turns one raw
line into the text the engine and the UI read.
"""

from __future__ import annotations

import regex

# Longest line kept, in bytes. Longer lines keep their head (where the error text is) and are
# marked; the rest is skipped without being held in memory.
MAX_LINE_BYTES = 64 * 1024
TRUNCATION_MARK = " …[line cut]"

# CSI (colours, cursor moves), OSC (titles, hyperlinks; ended by BEL or ST), and other
# two-byte escapes. Colours are dropped here; the UI keeps them from the raw bytes if it wants.
_ESCAPES = regex.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI ... final byte
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL or ST (or cut off)
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"    # DCS/SOS/PM/APC strings
    r"|\x1b[@-Z\\-_]"                    # other Fe escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"            # 8-bit CSI
)
# Control characters other than tab; NUL and DEL included.
_CONTROLS = regex.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(raw: bytes | str) -> str:
    """One raw line (with or without its line end) as clean text."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    text = text.rstrip("\n").rstrip("\r")
    if "\r" in text:
        # A progress bar redrawn with \r: keep only the last state that has any text.
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    if "\x1b" in text or "\x9b" in text:
        text = _ESCAPES.sub("", text)
    return _CONTROLS.sub("", text)


class LineAssembler:
    """Splits a stream of byte chunks into complete raw lines, holding at most one partial line.

    A line longer than ``max_bytes`` keeps its first ``max_bytes`` bytes plus a marker; the bytes
    after that, up to the next newline, are counted and dropped, so memory stays bounded.
    """

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._partial = bytearray()
        self._overflowed = False

    @property
    def pending(self) -> bytes:
        """The partial last line (no newline yet), as far as it is kept."""
        return bytes(self._partial)

    def feed(self, chunk: bytes) -> list[bytes]:
        lines: list[bytes] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                self._append(chunk[start:])
                return lines
            self._append(chunk[start:end])
            lines.append(self._take())
            start = end + 1

    def flush(self) -> bytes | None:
        """The partial last line as a line of its own (at end of file), or None if empty."""
        if not self._partial and not self._overflowed:
            return None
        return self._take()

    def reset(self) -> None:
        """Forget the partial line (the file was truncated or replaced)."""
        self._partial.clear()
        self._overflowed = False

    def _append(self, piece: bytes) -> None:
        room = self.max_bytes - len(self._partial)
        if len(piece) > room:
            self._partial += piece[: max(room, 0)]
            self._overflowed = True
        else:
            self._partial += piece

    def _take(self) -> bytes:
        line = bytes(self._partial)
        if self._overflowed:
            line += TRUNCATION_MARK.encode()
        self.reset()
        return line
