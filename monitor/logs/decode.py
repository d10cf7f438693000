"""Turning raw log bytes into clean lines, the same way for files read whole and files followed.

Logs of real jobs hold terminal colour codes, tqdm's ``\\r`` progress updates, invalid UTF-8,
NUL bytes from preallocated files, Windows line ends and, now and then, one enormous line.
``LineAssembler`` splits a byte stream into lines with bounded memory; ``clean`` turns one raw
line into the text the engine and the UI read.
"""

from __future__ import annotations

import re

# Longest line kept, in bytes. Longer lines keep their head and their last ``TAIL_BYTES`` (an
# error printed after a dumped tensor or a never-ended bar ends the line), marked where they were
# cut with how many bytes were left out (``TRUNCATION_MARK``, read back by ``left_out``); the
# middle is skipped without being held in memory.
MAX_LINE_BYTES = 64 * 1024
TAIL_BYTES = 16 * 1024
TRUNCATION_MARK = " …[line cut: {left_out:,} bytes left out]"
_MARK_START = TRUNCATION_MARK[:TRUNCATION_MARK.index("{")].encode()
_MARK_COUNT = re.compile(rb"[\d,]+")

# How much of a file's start is looked at to tell a binary file from a log, and the starts of
# binary formats people point a log tool at by mistake (ELF, zip/torch.save, PNG, PDF, pickle, .npy).
SNIFF_BYTES = 8192
_BINARY_MAGIC = (b"\x7fELF", b"PK\x03\x04", b"\x89PNG", b"%PDF", b"\x80\x02", b"\x93NUMPY")
# NUL: holes of preallocated or truncated files; backspace: progress bars redrawn in place (Keras'
# Progbar writes "\b" * its width, then "\r", to a file too).
_TEXT_CONTROLS = frozenset(b"\x00\x08\t\n\x0c\r\x1b")


def looks_binary(head: bytes) -> bool:
    """Whether a file starting with ``head`` is binary rather than a log: a known binary format,
    or more than a tenth control bytes (other than tab, line ends, escape, backspace and NUL) and bytes that
    are not UTF-8. Random bytes hold about a tenth control bytes, so those alone would let one
    such file in three pass for a log; half their bytes are not UTF-8. The one test for
    ``diagnose`` and ``watch``, so both read the same files."""
    if head.startswith(_BINARY_MAGIC):
        return True
    text = len(head) - head.count(0)
    controls = sum(head.count(b) for b in range(0x20) if b not in _TEXT_CONTROLS)
    not_utf8 = head.decode("utf-8", "replace").count("\ufffd") - head.decode("utf-8", "ignore").count("\ufffd")
    return (controls + not_utf8) * 10 > text


def _from_a_character(tail: bytes) -> bytes:
    """A tail cut from a longer line, starting at a character: UTF-8 continuation bytes at its
    start (the rest of a character cut in two) are dropped."""
    start = 0
    while start < min(len(tail), 3) and 0x80 <= tail[start] < 0xC0:
        start += 1
    return tail[start:]


def left_out(raw: bytes) -> int:
    """How many bytes ``LineAssembler`` (at its default length) left out of the middle of ``raw``,
    a line it returned: read from its mark, right after the kept head of the line's last state
    (where a line merely quoting the mark has it only by chance); 0 for a line kept whole."""
    if len(raw) <= MAX_LINE_BYTES - TAIL_BYTES:
        return 0
    head = raw.rfind(b"\r") + 1 + MAX_LINE_BYTES - TAIL_BYTES
    if not raw.startswith(_MARK_START, head):
        return 0
    count = _MARK_COUNT.match(raw, head + len(_MARK_START))
    return int(count[0].replace(b",", b"")) if count else 0


class LineAssembler:
    """Splits a stream of byte chunks into complete raw lines, holding at most one partial line.

    A line longer than ``max_bytes`` keeps its first ``max_bytes - TAIL_BYTES`` bytes, a marker
    saying how many bytes were left out, and its last ``TAIL_BYTES``; the bytes between are
    dropped as they come, so memory stays bounded.
    A line redrawn with ``\\r`` (a progress bar) keeps only its last non-blank state and the state
    being drawn now, so that ``clean()`` of the result equals ``clean()`` of the whole line while a
    bar that never ends its line stays small.
    """

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._partial = bytearray()
        self._overflowed = False
        self._tail = bytearray()  # of an overflowed line: its newest TAIL_BYTES
        self._length = 0  # bytes of the state being assembled, kept or not
        # A line redrawn with \r: how many \r it had (counted up to 2), its first state and
        # its last non-blank state. One \r may be a Windows line end, so it keeps the line whole.
        self._redraws = 0
        self._first_state = b""
        self._last_state = b""

    @property
    def has_partial(self) -> bool:
        """Whether a partial last line is held (cheap: ``pending`` copies it)."""
        return bool(self._partial or self._overflowed or self._redraws)

    @property
    def pending(self) -> bytes:
        """The partial last line (no newline yet), as far as it is kept."""
        return self._with_states(bytes(self._partial))

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
        return self._take() if self.has_partial else None

    def reset(self) -> None:
        """Forget the partial line (the file was truncated or replaced)."""
        self._partial.clear()
        self._overflowed = False
        self._tail.clear()
        self._length = 0
        self._redraws = 0
        self._first_state = self._last_state = b""

    def _append(self, piece: bytes) -> None:
        if b"\r" in piece:
            states = piece.split(b"\r")
            self._append_capped(states[0])
            for state in states[1:]:
                # The state drawn so far is complete: keep it only if it shows something.
                done = self._current()
                if not self._redraws:
                    self._first_state = done
                if done.strip():
                    self._last_state = done
                self._redraws = min(self._redraws + 1, 2)
                self._partial.clear()
                self._overflowed = False
                self._tail.clear()
                self._length = 0
                self._append_capped(state)
        else:
            self._append_capped(piece)

    def _append_capped(self, piece: bytes) -> None:
        self._length += len(piece)
        if self._overflowed:
            self._tail += piece[-self._tail_bytes:]
            del self._tail[:-self._tail_bytes]
            return
        room = self.max_bytes - len(self._partial)
        if len(piece) > room:
            self._partial += piece[: max(room, 0)]
            # Past the limit: the head stays, what came after it is the tail so far.
            head = self.max_bytes - self._tail_bytes
            self._tail += (bytes(self._partial[head:]) + piece[max(room, 0):])[-self._tail_bytes:]
            del self._partial[head:]
            self._overflowed = True
        else:
            self._partial += piece

    @property
    def _tail_bytes(self) -> int:
        return min(TAIL_BYTES, self.max_bytes // 4)

    def _current(self) -> bytes:
        line = bytes(self._partial)
        if self._overflowed:
            tail = _from_a_character(bytes(self._tail))
            line += TRUNCATION_MARK.format(left_out=self._length - len(line) - len(tail)).encode() + tail
        return line

    def _with_states(self, current: bytes) -> bytes:
        if self._redraws == 0:
            return current
        if self._redraws == 1:
            return self._first_state + b"\r" + current
        # Two \r or more: clean() keeps the last non-blank state, which this form preserves.
        return self._last_state + b"\r\r" + current

    def _take(self) -> bytes:
        line = self._with_states(self._current())
        self.reset()
        return line
