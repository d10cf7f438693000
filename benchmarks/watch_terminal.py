"""CPU of `monitor watch` in a real terminal while a job writes 1,000 (or 10,000) lines a second.

    python benchmarks/watch_terminal.py [--seconds 30] [--rate 1000] [--files 8] [--size 200x50]

A writer process (the one of ``tui_overhead.py``) appends training lines to ``--files`` per-rank
files; each tool runs in a tmux session of its own at ``--size``, one after the other on the
same files, and is measured over the same ``--seconds``: the CPU time of its whole process tree
(user + system, children included, from psutil) divided by the wall time. Baseline in the same
run: ``tail -f`` of the same files in the same kind of terminal (and lnav where it is installed).
"Keeping up": after the writer stops, how long until the screen shows the last line written.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tui_overhead import start_writer  # noqa: E402  (the same writer, the same lines)


def tree_cpu(pid: int) -> float:
    """User + system seconds of ``pid`` and every descendant alive now (and the children it waited for)."""
    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def pane_pid(tmux: list[str], session: str) -> int:
    out = subprocess.run([*tmux, "display-message", "-p", "-t", session, "#{pane_pid}"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def screen(tmux: list[str], session: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def last_written(folder: Path, files: int) -> str:
    """The last line of the file written last (the writer goes round the files in order)."""
    lines = [(f.stat().st_mtime_ns, f.read_text().rstrip("\n").rsplit("\n", 1)[-1])
             for f in (folder / f"rank{r}.log" for r in range(files))]
    return max(lines)[1]


def measure(name: str, command: str, folder: Path, args, width: int, height: int) -> dict:
    for old in folder.glob("rank*.log"):
        old.unlink()
    sock = folder / f"{name}.sock"
    tmux = ["tmux", "-S", str(sock)]
    for rank in range(args.files):
        (folder / f"rank{rank}.log").touch()
    subprocess.run([*tmux, "new-session", "-d", "-s", name, "-x", str(width), "-y", str(height), command], check=True)
    try:
        time.sleep(3.0)  # start-up (imports, first frame) is not what is measured
        pid = pane_pid(tmux, name)
        writer = start_writer(folder, args.files, args.rate, args.seconds)
        wall0, cpu0 = time.monotonic(), tree_cpu(pid)
        writer.wait()
        wall, cpu = time.monotonic() - wall0, tree_cpu(pid) - cpu0
        # Keeping up: the last line written (its step number) on screen within how long.
        marker = last_written(folder, args.files).split(" loss")[0].split("step ")[-1].split("/")[0]
        caught = None
        deadline = time.monotonic() + 20
        stopped = time.monotonic()
        while time.monotonic() < deadline:
            if f"step {marker}/" in screen(tmux, name):
                caught = time.monotonic() - stopped
                break
            time.sleep(0.05)
        return {"name": name, "cpu": cpu / wall, "wall": wall, "caught_up_s": caught}
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--size", default="200x50")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        logs = " ".join(str(folder / f"rank{r}.log") for r in range(args.files))
        runs = [("tail", f"tail -q -f {logs}"),
                ("watch", f"{sys.executable} -m monitor watch {folder}")]
        if shutil.which("lnav"):
            runs.insert(1, ("lnav", f"lnav {logs}"))
        print(f"{args.rate:.0f} lines/s into {args.files} files for {args.seconds:.0f} s, tmux {width}x{height}")
        for name, command in runs:
            result = measure(name, command, folder, args, width, height)
            caught = "never (20 s)" if result["caught_up_s"] is None else f"{result['caught_up_s']:.2f} s"
            print(f"{name:6} CPU {100 * result['cpu']:5.1f}% of one core; last line on screen after {caught}")


if __name__ == "__main__":
    main()
