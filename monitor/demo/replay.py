"""Replaying a recorded job: its log lines written into a directory with their original timing.

The replay writes files the way the job did, so the live pipeline (follower, engine) reads
them exactly as it would read a real job; only the clock can run faster (``speed``). Metrics
are handed out by ``RecordedMetrics`` at the matching moment of the recording. Plain Python:
no torch, no GPU, no textual.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from monitor.metrics.model import Sample
from monitor.metrics.samples_file import read_samples

BUNDLED = Path(__file__).with_name("recording") / "crash"
# A silence longer than this in the recording (recorded seconds) is cut to it, as asciinema's
# idle time limit does: the bundled job's 11 s of torch start-up would hold its failure back.
IDLE_LIMIT_S = 2.0


class RecordingFormatError(Exception):
    """A recording that cannot be replayed: one line naming the file (and line)."""


@dataclass(frozen=True)
class Recording:
    root: Path
    meta: dict
    # replayed file (relative path) -> [(seconds since start, text)], in order
    streams: dict[str, list[tuple[float, str]]]
    # (seconds since start, sample)
    samples: list[tuple[float, Sample]]

    @property
    def duration(self) -> float:
        ends = [lines[-1][0] for lines in self.streams.values() if lines]
        return max(ends, default=0.0)

    @property
    def line_count(self) -> int:
        return sum(len(lines) for lines in self.streams.values())


def load_recording(root: str | os.PathLike = BUNDLED) -> Recording:
    root = Path(root)
    meta_path = root / "meta.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RecordingFormatError(f"{meta_path}: cannot read the recording's meta data: {exc}") from None
    streams = {name: _read_lines(root / "lines" / (name + ".jsonl")) for name in meta.get("replay", [])}
    samples: list[tuple[float, Sample]] = []
    metrics = root / "metrics.jsonl"
    if metrics.exists():
        started = float(meta.get("started", 0.0))
        samples = [(sample.time - started, sample) for sample in read_samples(metrics)]
    return Recording(root=root, meta=meta, streams=streams, samples=samples)


def _read_lines(path: Path) -> list[tuple[float, str]]:
    lines = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    t, text = json.loads(raw)
                    lines.append((float(t), str(text)))
                except (ValueError, TypeError):
                    raise RecordingFormatError(f"{path}:{number}: not a [time, text] pair") from None
    except OSError as exc:
        raise RecordingFormatError(f"{path}: {exc.strerror or exc}") from None
    return lines


class Replayer:
    """Writes a recording's lines into ``target`` at their recorded times divided by ``speed``,
    every silence longer than ``idle_limit`` recorded seconds cut to it.

    All files are created (empty) by ``start()`` so a follower sees them from the beginning;
    ``done`` is set once the last line is written. Times handed out (``elapsed``, ``line_time``)
    are the recording's own: a cut silence is a jump in them, as in a log's stamps.
    """

    def __init__(self, recording: Recording, target: str | os.PathLike, speed: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, idle_limit: float = IDLE_LIMIT_S) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.recording = recording
        # (recorded time a cut silence ends at, recorded seconds cut up to there), in order.
        self._cuts: list[tuple[float, float]] = []
        cut, previous = 0.0, 0.0
        for t in sorted({t for lines in recording.streams.values() for t, _ in lines}):
            if t - previous > idle_limit:
                cut += t - previous - idle_limit
                self._cuts.append((t, cut))
            previous = t
        self.target = Path(target)
        self.speed = speed
        self._clock = clock
        self._started: float | None = None
        self._stop = threading.Event()
        self.done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def paths(self) -> list[Path]:
        return [self.target / name for name in self.recording.streams]

    def line_time(self, file: str, line: int) -> float | None:
        """When the recorded job wrote line ``line`` (1-based) of a replayed ``file``, in seconds
        since its start; None for a file or line that is not part of the recording."""
        try:
            name = Path(file).relative_to(self.target).as_posix()
        except ValueError:
            name = Path(file).as_posix()
        lines = self.recording.streams.get(name)
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1][0]

    @property
    def duration(self) -> float:
        """How long the whole replay takes at ×1 (the recording with its long silences cut)."""
        return self.replayed(self.recording.duration)

    def replayed(self, recorded: float) -> float:
        """The moment of the replay (seconds at ×1) a recorded time is written at."""
        cut = next((total for end, total in reversed(self._cuts) if end <= recorded), 0.0)
        return recorded - cut

    def written_at(self, start: str) -> float | None:
        """Seconds after the replay's start, at its speed, at which it writes the first line
        beginning with ``start`` (None: the recording has none): when the screen can first show it."""
        times = [recorded for lines in self.recording.streams.values() for recorded, text in lines
                 if text.startswith(start)]
        return self.replayed(min(times)) / self.speed if times else None

    def elapsed(self) -> float:
        """Seconds of the recording replayed so far (its own time: past a cut silence's end,
        the seconds cut count as gone)."""
        if self._started is None:
            return 0.0
        replayed = (self._clock() - self._started) * self.speed
        cut = next((total for end, total in reversed(self._cuts) if end - total <= replayed), 0.0)
        return replayed + cut

    def start(self) -> None:
        for path in self.paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        self._started = self._clock()
        self._thread = threading.Thread(target=self._write_all, name="monitor-replay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _write_all(self) -> None:
        started = self._started
        assert started is not None  # start() sets it before it starts this thread
        events = sorted(
            (t, order, name, text)
            for name, lines in self.recording.streams.items()
            for order, (t, text) in enumerate(lines)
        )
        handles = {name: open(self.target / name, "ab") for name in self.recording.streams}  # noqa: SIM115
        try:
            position = 0
            while position < len(events) and not self._stop.is_set():
                due = self.replayed(events[position][0])
                wait = due / self.speed - (self._clock() - started)
                if wait > 0 and self._stop.wait(wait):
                    break
                touched = set()
                # Everything due by now goes out in one go, then each touched file is flushed.
                now = (self._clock() - started) * self.speed
                while position < len(events) and self.replayed(events[position][0]) <= now:
                    _, _, name, text = events[position]
                    handles[name].write(text.encode("utf-8") + b"\n")
                    touched.add(name)
                    position += 1
                for name in touched:
                    handles[name].flush()
        finally:
            for handle in handles.values():
                handle.close()
            self.done.set()


class RecordedMetrics:
    """A metrics feed for the replay: the recorded sample for the replay's current moment."""

    def __init__(self, recording: Recording, replayer: Replayer) -> None:
        self._samples = recording.samples
        self._replayer = replayer

    def sample(self) -> Sample:
        elapsed = self._replayer.elapsed()
        chosen = self._samples[0][1] if self._samples else None
        for t, sample in self._samples:
            if t > elapsed:
                break
            chosen = sample
        if chosen is None:
            raise RecordingFormatError("the recording holds no metrics samples")
        if self._replayer.done.is_set() and chosen.job is not None:
            chosen = replace(chosen, job=replace(chosen.job, alive=False))  # the recorded job has ended
        # Shown as happening now, like the lines being written now.
        return replace(chosen, time=time.time())
