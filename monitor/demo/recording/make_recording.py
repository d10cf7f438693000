"""Make the bundled recording of `monitor demo` from a REAL run of the demo torch job.

    python -m monitor.demo.recording.make_recording [--out DIR]

Runs ``torchrun --nproc-per-node 4 --log-dir L --tee 3 -m monitor.demo.train --scenario crash``
(gloo on CPU: rank 2 raises a ValueError, the other ranks lose their peer, torchrun sends
SIGTERM and reports the failure) and records, while it runs:

- every line of every per-rank file torchrun writes (``attempt_0/<rank>/{stdout,stderr}.log``)
  and of the combined output, with its arrival time (seconds since the start), as one JSONL per
  file under ``lines/``: ``[t, "text"]`` per line, text exactly as written (no newline);
- host and job metrics once a second through the metrics SamplesFile (``metrics.jsonl``). The
  machine that made the recording has no GPU, and the recording says so (no GPU rows);
- ``meta.json``: the command, exit code, versions, which files the replay writes.

Needs torch; ``monitor demo`` (the replay) does not.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from monitor.logs.ranks import parse_prefix
from monitor.metrics.samples_file import SamplesFile
from monitor.metrics.sampler import Sampler

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "crash"
TRAIN_ARGS = ["--scenario", "crash", "--steps", "40", "--fail-step", "24", "--rank-to-fail", "2",
              "--sleep-per-step", "0.5", "--timeout", "20"]
POLL_S = 0.05


class Timeline:
    """Lines of several files with their arrival times, kept per file."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.lines: dict[str, list[tuple[float, str]]] = {}
        self._lock = threading.Lock()

    def add(self, name: str, text: str) -> None:
        with self._lock:
            self.lines.setdefault(name, []).append((round(time.monotonic() - self.start, 3), text))


def follow_tree(root: Path, timeline: Timeline, done: threading.Event) -> None:
    """Poll every file under ``root`` and time each complete line as it appears."""
    offsets: dict[Path, int] = {}
    partial: dict[Path, bytes] = {}
    while True:
        finished = done.is_set()
        for path in sorted(p for p in root.rglob("*.log") if p.is_file()):
            with open(path, "rb") as handle:
                handle.seek(offsets.get(path, 0))
                chunk = handle.read()
            offsets[path] = offsets.get(path, 0) + len(chunk)
            data = partial.pop(path, b"") + chunk
            *complete, rest = data.split(b"\n")
            if rest:
                partial[path] = rest
            name = replay_name(path.relative_to(root))
            for raw in complete:
                timeline.add(name, raw.decode("utf-8", "replace"))
        if finished:
            for path, rest in partial.items():
                timeline.add(replay_name(path.relative_to(root)), rest.decode("utf-8", "replace"))
            return
        time.sleep(POLL_S)


def replay_name(relative: Path) -> str:
    """``<run-id>/attempt_0/2/stderr.log`` -> ``logs/attempt_0/2/stderr.log`` (the run id is random)."""
    return str(Path("logs", *relative.parts[1:]))


def read_combined(stream, timeline: Timeline) -> None:
    for raw in iter(stream.readline, b""):
        timeline.add("combined.log", raw.rstrip(b"\n").decode("utf-8", "replace"))


def record_metrics(pid: int, log_dir: Path, out: Path, done: threading.Event) -> None:
    sampler = Sampler(job_pids=[pid], watch_dirs=[log_dir])
    recorder = SamplesFile(out)
    try:
        while not done.is_set():
            began = time.monotonic()
            recorder.write(sampler.sample())
            done.wait(max(0.0, 1.0 - (time.monotonic() - began)))
    finally:
        recorder.close()
        sampler.close()


def neutral_paths(text: str, work: str, project: str, prefix: str) -> str:
    """A recorded line with the recording machine's own paths made neutral, so the demo shows what
    a user's job would, not where this recording was made (the temporary folder, the checkout,
    the Python installation)."""
    for mine, shown in ((work, "/home/user/job"), (project, "/home/user/project"), (prefix, "/opt/venv")):
        text = text.replace(mine, shown)
    return text


def make(out: Path) -> int:
    import torch

    with tempfile.TemporaryDirectory(prefix="monitor-recording-") as work:
        log_dir = Path(work) / "torchrun-logs"
        log_dir.mkdir()
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
                   "--log-dir", str(log_dir), "--tee", "3", "--redirects", "3",
                   "-m", "monitor.demo.train", *TRAIN_ARGS]
        if out.exists():
            shutil.rmtree(out)
        (out / "lines").mkdir(parents=True)
        started_wall = time.time()
        timeline = Timeline(time.monotonic())
        done = threading.Event()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=work)
        threads = [
            threading.Thread(target=read_combined, args=(job.stdout, timeline)),
            threading.Thread(target=follow_tree, args=(log_dir, timeline, done)),
            threading.Thread(target=record_metrics, args=(job.pid, log_dir, out / "metrics.jsonl", done)),
        ]
        for thread in threads:
            thread.start()
        exit_code = job.wait(timeout=300)
        time.sleep(0.5)  # the last lines of the per-rank files
        done.set()
        for thread in threads:
            thread.join()

    # The launcher's own lines (no rank prefix) become torchrun.log; the ranks' lines are in
    # their per-rank files already, so the replay does not show them twice.
    combined = timeline.lines.pop("combined.log", [])
    timeline.lines["torchrun.log"] = [(t, text) for t, text in combined if parse_prefix(text).rank is None]
    replay = sorted(timeline.lines)
    timeline.lines["combined.log"] = combined
    project = str(Path(__file__).resolve().parents[3])
    for name, lines in timeline.lines.items():
        path = out / "lines" / (name + ".jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            for t, text in lines:
                text = neutral_paths(text, work, project, sys.prefix)
                handle.write(json.dumps([t, text], ensure_ascii=False) + "\n")
    meta = {
        "what": "torchrun, 4 ranks, gloo on CPU: rank 2 raises ValueError at step 24; the others lose their peer",
        "command": ["torchrun", *(("logs" if part == str(log_dir) else part) for part in command[3:])],
        "exit_code": exit_code,
        "started": started_wall,
        "duration_s": max(t for lines in timeline.lines.values() for t, _ in lines),
        "replay": replay,
        "gpu": "none: the machine that made this recording has no GPU (CPU-only torch, gloo backend)",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "made_by": "python -m monitor.demo.recording.make_recording",
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    print(f"recorded {sum(len(v) for v in timeline.lines.values())} lines, exit code {exit_code}, into {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m monitor.demo.recording.make_recording", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return make(parser.parse_args(argv).out)


if __name__ == "__main__":
    sys.exit(main())
