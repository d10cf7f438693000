"""A checksum of each of the last lines read from a file, to find where a file cut short
(``truncate -s``) and maybe written again stops holding what was read.

The last raw bytes read (``FollowedFile.recent``, 4 KiB) tell that exactly for a cut close to
the end; these sums reach back ``SUMMED_LINES`` lines (12 bytes a line, 12 KiB at most per file)
for a cut further back, where the sparse line-end marks alone would read the lines since the
mark before the cut again. Each line is summed over its bytes as read (NUL bytes too), without
its newline; lines are told apart by newlines only, as the follower counts them.
"""

from __future__ import annotations

import os
import zlib
from array import array
from itertools import accumulate

SUMMED_LINES = 1024


class LineSums:
    def __init__(self, start: int) -> None:
        self.start = start  # where the first summed line starts
        self.ends = array("Q")  # the offset just after each summed line's newline
        self.sums = array("I")  # its CRC-32
        self._partial = 0  # the running sum of the line not ended yet

    def add(self, data: bytes, at: int) -> None:
        """Sum the lines ``data`` (read at offset ``at``) ends; only the last ones are kept."""
        pieces = data.split(b"\n")
        ended = len(pieces) - 1
        if not ended:
            self._partial = zlib.crc32(data, self._partial)
            return
        kept = min(ended, SUMMED_LINES)
        tail = pieces[ended - kept:]
        tail_start = at + len(data) - sum(map(len, tail)) - kept
        if kept == ended:  # the first goes on from the line the last data left open
            first = zlib.crc32(tail[0], self._partial)
        else:  # more lines than are kept: the older ones go
            self.ends, self.sums = array("Q"), array("I")
            first = zlib.crc32(tail[0])
            self.start = tail_start
        self.sums.append(first)
        self.sums.extend(map(zlib.crc32, tail[1:-1]))
        lengths = accumulate(map(len, tail[:-1]))
        self.ends.extend(tail_start + length + n + 1 for n, length in enumerate(lengths))
        self._partial = zlib.crc32(tail[-1])
        if len(self.ends) > SUMMED_LINES:
            drop = len(self.ends) - SUMMED_LINES
            self.start = self.ends[drop - 1]
            del self.ends[:drop]
            del self.sums[:drop]

    def kept_until(self, offset: int) -> LineSums:
        """These sums for a file that now ends at ``offset``, a line end."""
        kept = LineSums(min(self.start, offset))
        if self.start <= offset:
            count = sum(1 for end in self.ends if end <= offset)
            kept.ends, kept.sums = self.ends[:count], self.sums[:count]
        return kept

    def still_held(self, fd: int, size: int) -> tuple[int, int] | None:
        """(the end of the last summed line the file at ``fd``, now ``size`` bytes, still holds,
        how many summed lines follow it), or None if it holds none of them."""
        if not self.ends or self.start >= size:
            return None
        data = os.pread(fd, min(size, self.ends[-1]) - self.start, self.start)
        held, position = 0, self.start
        for piece, end, expected in zip(data.split(b"\n")[:-1], self.ends, self.sums):
            position += len(piece) + 1
            if position != end or zlib.crc32(piece) != expected:
                break
            held += 1
        if not held:
            return None
        return self.ends[held - 1], len(self.ends) - held
