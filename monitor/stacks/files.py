"""A capture on disk, beside the run's log: ``run-X.stacks.json`` (every capture of the run,
the newest last, each with the finding it made) and ``run-X.stacks.txt`` (the same captures, to read).

``diagnose`` reads the JSON back (``read``) so that a hang diagnosed from the run's folder names
the rank the live run named.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from monitor.files import replace_file
from monitor.model import Finding
from monitor.stacks.compare import is_user_code, place_of, source_line
from monitor.stacks.model import Capture, Frame, ProcessStack, Thread

KEPT_CAPTURES = 10
SUFFIX = ".stacks.json"


class StacksFileError(Exception):
    """A stacks file that cannot be read (one line naming it)."""


def stacks_paths(log_path: Path) -> tuple[Path, Path]:
    """``run-X.log`` -> (``run-X.stacks.json``, ``run-X.stacks.txt``)."""
    return log_path.with_name(log_path.stem + SUFFIX), log_path.with_name(log_path.stem + ".stacks.txt")


def capture_to_json(capture: Capture, finding: Finding | None) -> dict:
    data = asdict(capture)
    data["finding"] = finding.to_json() if finding is not None else None
    return data


def capture_from_json(data: dict) -> tuple[Capture, Finding | None]:
    processes = [
        ProcessStack(pid=p["pid"], rank=p["rank"], command=p["command"], error=p["error"],
                     error_kind=p["error_kind"], took_s=p["took_s"],
                     threads=[Thread(t["name"], t["thread_id"], [Frame(**f) for f in t["frames"]])
                              for t in p["threads"]])
        for p in data["processes"]
    ]
    log_bytes = data.get("log_bytes")  # absent from the files of earlier versions
    capture = Capture(taken=data["taken"], trigger=data["trigger"], host=data["host"], processes=processes,
                      world_size=data["world_size"], took_s=data["took_s"], problem=data["problem"],
                      log_bytes=log_bytes if isinstance(log_bytes, int) and not isinstance(log_bytes, bool)
                      and 0 <= log_bytes < 1 << 62 else None)
    finding = Finding(**data["finding"]) if data.get("finding") else None
    return capture, finding


def updated_json(previous: bytes | None, capture: Capture, finding: Finding | None) -> bytes:
    """The stacks file with ``capture`` added (the oldest dropped past ``KEPT_CAPTURES``)."""
    captures = []
    if previous:
        try:
            captures = json.loads(previous).get("captures", [])
        except (ValueError, AttributeError):
            captures = []
    captures = (captures + [capture_to_json(capture, finding)])[-KEPT_CAPTURES:]
    return json.dumps({"captures": captures}, indent=1).encode()


def save(log_path: Path, capture: Capture, finding: Finding | None) -> str | None:
    """Add ``capture`` to the stacks files beside ``log_path`` (both written whole); None, or
    one line saying why they could not be written."""
    json_path, text_path = stacks_paths(log_path)
    try:
        previous = json_path.read_bytes()
    except OSError:
        previous = None
    data = updated_json(previous, capture, finding)
    # A command line with bytes that are not UTF-8 (a Latin-1 file name) holds lone surrogates:
    # the JSON escapes them, the text to read shows them as "?".
    return replace_file(json_path, data) or replace_file(text_path, render_all(data).encode(errors="replace"))


def read(path: Path) -> list[tuple[Capture, Finding | None]]:
    """Every capture in a stacks file; raises StacksFileError."""
    try:
        data = json.loads(path.read_bytes())
        return [capture_from_json(entry) for entry in data["captures"]]
    except OSError as exc:
        raise StacksFileError(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StacksFileError(f"{path}: not a stacks file of monitor ({type(exc).__name__}: {exc})") from None


def render_all(data: bytes) -> str:
    """Every capture of a stacks file (``updated_json``'s bytes) as text, oldest first."""
    captures = [capture_from_json(entry) for entry in json.loads(data)["captures"]]
    return "\n".join(render(capture, finding) for capture, finding in captures)


def render(capture: Capture, finding: Finding | None) -> str:
    """The capture as text: the conclusion, then each rank's main thread (the frame that places
    it marked ``>``), then the other threads and what could not be taken."""
    when = _clock(capture.taken)
    out = [f"Stacks of the job's ranks on {capture.host} at {when} ({capture.trigger}; "
           f"py-spy took {capture.took_s:.2f} s)"]
    if finding is not None:
        out += ["", finding.title]
    if capture.problem:
        out += ["", capture.problem]
    for stack in capture.ranked():
        place = place_of(stack)
        label = f"rank {stack.rank}" if stack.rank is not None else "process"
        out += ["", f"== {label} (pid {stack.pid}): {place.describe() if place else 'no Python frames'}",
                f"   {stack.command}"]
        main = stack.main_thread()
        for thread in [main] + [t for t in stack.threads if t is not main]:
            if thread is None:
                continue
            if thread is not main:
                out.append(f"   thread {thread.name or thread.thread_id}:")
            for frame in thread.frames:
                mark = ">" if place is not None and thread is main and frame == place.frame else " "
                own = "" if is_user_code(frame.file) else "  (library)"
                out.append(f" {mark}   {frame.function} ({frame.file}:{frame.line}){own}")
                if mark == ">" and (code := source_line(frame)):
                    out.append(f"          {code}")
    for stack in capture.processes:
        if stack.error:
            out += ["", stack.error_line()]
    return "\n".join(out) + "\n"


def _clock(seconds: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))
