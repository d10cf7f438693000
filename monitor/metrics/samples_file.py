"""Samples kept in a JSONL file beside the logs (``run-X.metrics.jsonl``), and read back.

The file is one JSON object per line: a header ``{"monitor_metrics": 1}`` and then one
``Sample.to_json()`` per sample. Each line is flushed as it is written, so a post-mortem
has the metrics up to the moment the monitor stopped; a last line cut short by a crash is
skipped on reading, any other bad line is an error naming the file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from monitor.files import create_new
from monitor.metrics.model import Sample

FORMAT_VERSION = 1


class SamplesFileError(Exception):
    """A recording that cannot be read: one line naming the file (and line)."""


def samples_path(log_path: str | os.PathLike) -> Path:
    """Where the metrics of a run are recorded: beside its log (``run-X.log`` ->
    ``run-X.metrics.jsonl``), so a post-mortem finds them with it."""
    log_path = Path(log_path)
    return log_path.with_name(f"{log_path.stem}.metrics.jsonl")


class SamplesFile:
    """Appends samples to ``path``; a write failure (disk full) stops recording, never the caller."""

    def __init__(self, path: str | os.PathLike, *, new: bool = False) -> None:
        """``new``: the file must not exist yet (a run's recording, in a folder others may write:
        created by ``files.create_new``, never through a link planted at its name); otherwise
        samples are appended to it. Raises OSError."""
        self.path = Path(path)
        # Why recording stopped, in one line; "" while it works.
        self.error = ""
        self._file = _open(self.path, new)
        if self._file.tell() == 0:
            self._write_line(json.dumps({"monitor_metrics": FORMAT_VERSION}))

    def write(self, sample: Sample) -> bool:
        """Append one sample; False once recording has failed (see ``error``)."""
        if self._file is None:
            return False
        return self._write_line(json.dumps(sample.to_json(), separators=(",", ":")))

    def _write_line(self, line: str) -> bool:
        try:
            self._file.write(line + "\n")
            self._file.flush()
        except (OSError, ValueError) as exc:
            self.error = f"{self.path}: recording stopped: {getattr(exc, 'strerror', None) or exc}"
            self.close()
            return False
        return True

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


def _open(path: Path, new: bool):
    """The recording open to append, mode 0600 when created here: readable by its owner only,
    like every file beside the log (samples name the job's processes and folders)."""
    if new:
        _, fd = create_new([path])
    else:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    return open(fd, "a", encoding="utf-8")  # noqa: SIM115 (kept open across writes)


def read_samples(path: str | os.PathLike) -> Iterator[Sample]:
    """The samples of a recording, in order. Raises ``SamplesFileError`` for an unreadable file."""
    path = Path(path)
    try:
        handle = open(path, "rb")  # noqa: SIM115 (a generator closes it below)
    except OSError as exc:
        raise SamplesFileError(f"{path}: {exc.strerror or exc}") from None
    with handle:
        pending: tuple[int, bytes] | None = None
        for number, raw in enumerate(handle, start=1):
            if pending is not None:
                yield from _parse(path, *pending)
            pending = (number, raw)
        if pending is None:
            return
        number, raw = pending
        if not raw.endswith(b"\n"):
            try:
                json.loads(raw)
            except ValueError:
                return  # the writer was stopped mid-line
        yield from _parse(path, number, raw)


def _parse(path: Path, number: int, raw: bytes) -> Iterator[Sample]:
    """The sample on one line (none for the header line)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SamplesFileError(f"{path}:{number}: not UTF-8 (is this a metrics recording?)") from None
    except ValueError as exc:
        # Not every ValueError of json.loads is a JSONDecodeError with a .msg: an int of more
        # digits than Python converts (sys.get_int_max_str_digits) is a plain ValueError.
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise SamplesFileError(f"{path}:{number}: not JSON ({reason})") from None
    if isinstance(data, dict) and "monitor_metrics" in data:
        if data["monitor_metrics"] != FORMAT_VERSION:
            raise SamplesFileError(f"{path}:{number}: recording format {data['monitor_metrics']!r} is not supported")
        return
    try:
        sample = Sample.from_json(data)
    except (KeyError, TypeError, AttributeError) as exc:
        raise SamplesFileError(f"{path}:{number}: not a metrics sample ({exc})") from None
    yield sample
