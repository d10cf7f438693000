"""Faults of round 3 (docs of the review: faults-round3-2026-11-25.md), each shown with real files,
real processes and real signals: a symlink loop in a folder (F11), a glob over symlink loops
(F21), an undecodable byte in a file name (F12), a non-UTF-8 byte in the job's argv (F15), and a
silent job that then exits well (F16)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.logs import sources
from monitor.logs.follow import Follower
from monitor.logs.sources import parse_source
from monitor.session.job_session import JobSession
from monitor.stacks import files
from monitor.stacks.model import Capture, Frame, ProcessStack, Thread
from monitor.text import safe_json, safe_text

from tests.clock_helpers import FakeClock
from test_session_stall import step, write
from test_stacks import needs_ptrace

ROOT = Path(__file__).resolve().parents[1]
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nValueError: bad batch\n'


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def monitor(*args: str, cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m monitor ARGS``, its output as bytes (a raw byte must be seen as it is)."""
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=cwd,
                          env={**os.environ, "COLUMNS": "400", "PYTHONPATH": str(ROOT)})


class Watch:
    """``monitor watch --headless ARGS`` in a process of its own (``script``: run before it), its
    stderr read on a thread so that a test waiting for a line never blocks past its time."""

    def __init__(self, *args: str, cwd: Path, script: str = "") -> None:
        code = f"{script}\nimport sys\nfrom monitor.cli import main\nsys.exit(main({['watch', '--headless', *args]!r}))"
        self.process = subprocess.Popen([sys.executable, "-c", code], cwd=cwd, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env={**os.environ, "COLUMNS": "400", "PYTHONPATH": str(ROOT)})
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.err = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.put(line)

    def wait_for(self, words: bytes, timeout: float = 20) -> bytes:
        """stderr up to the line holding ``words``."""
        deadline = time.monotonic() + timeout
        while words not in self.err:
            try:
                self.err += self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                self.process.kill()
                raise AssertionError(f"no line with {words!r} in {timeout} s: {self.err!r}") from None
        return self.err

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> tuple[int, bytes, bytes]:
        """Signal it; its exit code, stdout and all of its stderr."""
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"still running {timeout} s after signal {sig}") from None
        self._reader.join(5)
        while not self.lines.empty():
            self.err += self.lines.get()
        return self.process.returncode, self.process.stdout.read(), self.err


# -- F11: a symlink loop in a folder -------------------------------------------------------------
def _folder_with_a_self_link(tmp_path: Path) -> Path:
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "r.log").write_text(TRACEBACK)
    (folder / "self").symlink_to("self")
    return folder


def test_f11_diagnose_lists_a_self_link_under_problems(tmp_path: Path):
    folder = _folder_with_a_self_link(tmp_path)
    done = monitor("diagnose", str(folder))
    out, err = done.stdout.decode(), done.stderr.decode()
    assert "Traceback" not in err, err
    assert "ValueError: bad batch" in out
    problems = out.split("Problems reading the input", 1)[1]
    assert f"{folder}/self: cannot read: too many levels of symbolic links" in problems
    assert done.returncode == 2  # as a dangling log: an input not read


def test_f11_a_self_link_beside_several_runs(tmp_path: Path):
    folder = _folder_with_a_self_link(tmp_path)
    (folder / "r.log").rename(folder / "run-20260101-000000.log")
    (folder / "run-20260102-000000.log").write_text(TRACEBACK)
    done = monitor("diagnose", "--json", str(folder))
    assert done.returncode == 1 and not done.stderr, done.stderr
    assert json.loads(done.stdout)["root_cause"]["title"].startswith("ValueError")


def test_f11_watch_says_a_self_link_in_one_line(tmp_path: Path):
    folder = _folder_with_a_self_link(tmp_path)
    watch = Watch(str(folder), cwd=tmp_path)
    watch.wait_for(b"watching")
    time.sleep(1)
    rc, out, err = watch.stop()
    assert b"Traceback (most recent call last)" not in err, err
    assert f"{folder}/self: cannot read: too many levels of symbolic links".encode() in err.lower()
    assert rc == 1 and b"ValueError" in out


# -- F21: a glob over symlink loops ---------------------------------------------------------------
def _folder_with_loops(tmp_path: Path) -> Path:
    run = tmp_path / "d" / "run1"
    run.mkdir(parents=True)
    (run / "rank0.log").write_text("step 1\n")
    (run / "up").symlink_to("..")
    (run / "self").symlink_to(".")
    return tmp_path / "d"


def test_f21_a_recursive_glob_does_not_follow_symlink_loops(tmp_path: Path):
    _folder_with_loops(tmp_path)
    # In a process of its own: an expansion that follows the loops never ends.
    code = "from monitor.logs.sources import parse_source; print(parse_source('d/**/*.log').expand())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout == "['d/run1/rank0.log']\n", done.stderr


def test_f21_the_glob_names_what_glob_names(tmp_path: Path, monkeypatch):
    """Outside ``**`` a glob still goes through a symlinked folder (``logs/latest``), hidden
    names are left out unless named, and ``**`` matches no folder as well as many."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "rank0.log").write_text("x\n")
    logs = tmp_path / "logs"
    (logs / "a" / "b").mkdir(parents=True)
    (logs / ".hidden").mkdir()
    (logs / "latest").symlink_to(real)
    for name in ("top.log", "a/one.log", "a/b/two.log", ".hidden/three.log", "a/.dot.log", "a/notes.md"):
        (logs / name).write_text("x\n")
    monkeypatch.chdir(tmp_path)
    assert parse_source("logs/*/rank0.log").expand() == ["logs/latest/rank0.log"]
    assert parse_source("logs/**/*.log").expand() == ["logs/a/b/two.log", "logs/a/one.log", "logs/top.log"]
    assert parse_source("logs/.hidden/*.log").expand() == ["logs/.hidden/three.log"]
    assert parse_source(str(logs / "a" / "**" / "*.log")).expand() == [str(logs / "a/b/two.log"),
                                                                         str(logs / "a/one.log")]
    monkeypatch.chdir(logs / "a")
    assert parse_source("**/*.log").expand() == ["b/two.log", "one.log"]


def test_f21_a_glob_too_wide_is_cut_and_said_once(tmp_path: Path, monkeypatch):
    for index in range(30):
        folder = tmp_path / "wide" / f"n{index:02d}"
        folder.mkdir(parents=True)
        (folder / "rank.log").write_text("x\n")
    monkeypatch.setattr(sources, "GLOB_MAX_ENTRIES", 40)  # the 30 folders, and 10 of their files
    clock = FakeClock()
    follower = Follower([str(tmp_path / "wide" / "**" / "*.log")], poll=True, poll_interval=0.01, clock=clock)
    try:
        assert 0 < len(follower.files) < 30
        said = follower.read(timeout=0.05).problems
        assert len(said) == 1 and "more than 40" in said[0] and "narrower" in said[0], said
        clock.advance(0.05)
        assert not follower.read(timeout=0.05).problems  # not walked and said again at each rescan
    finally:
        follower.close()


def test_f21_watch_over_symlink_loops_starts_and_stops(tmp_path: Path):
    _folder_with_loops(tmp_path)
    watch = Watch("d/**/*.log", cwd=tmp_path)
    assert b"watching 1 file(s)" in watch.wait_for(b"watching", timeout=15)
    rc, out, _ = watch.stop(signal.SIGINT)
    assert rc == 0 and b"No failure found" in out


# Start-up made slow as a huge tree would make it (the walk itself is bounded).
SLOW_START = textwrap.dedent("""\
    import time
    from monitor.logs import sources
    def slow(self):
        print("expanding", file=__import__("sys").stderr, flush=True)
        time.sleep(30)
        return []
    sources.Source.expand = slow
""")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_f21_a_signal_stops_the_start_up(tmp_path: Path, sig):
    _folder_with_loops(tmp_path)
    watch = Watch("d/**/*.log", cwd=tmp_path, script=SLOW_START)
    watch.wait_for(b"expanding")
    started = time.monotonic()
    rc, _, err = watch.stop(sig, timeout=10)
    assert time.monotonic() - started < 5
    assert rc == (130 if sig == signal.SIGINT else -signal.SIGTERM), err
    assert b"Traceback" not in err


# -- F12: an undecodable byte in a file name ------------------------------------------------------
def test_f12_safe_text_shows_undecodable_bytes_escaped():
    name = os.fsdecode(b"r\x9b2Jx.log")
    assert safe_text(name) == "r\\x9b2Jx.log"
    assert safe_text("lone \ud800 surrogate") == "lone \ufffd surrogate"
    assert "\\udc9b" in safe_json({"file": name})  # JSON keeps the data, escaped


def test_f12_a_c1_byte_in_a_file_name_never_reaches_the_terminal(tmp_path: Path):
    folder = tmp_path / "d2"
    folder.mkdir()
    with open(os.path.join(os.fsencode(folder), b"r\x9b2Jx.log"), "wb") as handle:
        handle.write(TRACEBACK.encode())
    # The report shows the byte as \x9b; the JSON keeps the name's data, escaped (\udc9b).
    for args, shown in ((("diagnose", str(folder)), b"r\\x9b2Jx.log:3"),
                        (("diagnose", "--json", str(folder)), b"r\\udc9b2Jx.log")):
        done = monitor(*args)
        assert done.returncode == 1, done.stderr
        assert b"\x9b" not in done.stdout + done.stderr
        assert shown in done.stdout
    watch = Watch(str(folder), cwd=tmp_path)
    watch.wait_for(b"watching")
    time.sleep(1)
    rc, out, err = watch.stop()
    assert rc == 1 and b"\x9b" not in out + err and b"r\\x9b2Jx.log:3" in out


# -- F15: a non-UTF-8 byte in the job's argv --------------------------------------------------------
def _capture(command: str) -> Capture:
    frames = [Frame("load_batch", "/work/job/train.py", 4), Frame("<module>", "/work/job/train.py", 7)]
    return Capture(taken=1.0, trigger="stall", host="h", processes=[
        ProcessStack(pid=7, rank=0, command=command, threads=[Thread("MainThread", 7, frames)])])


def test_f15_stacks_files_are_written_for_a_command_that_is_not_utf8(tmp_path: Path):
    log = tmp_path / "run-1.log"
    command = "python3 job.py " + os.fsdecode(b"data/caf\xe9.txt")
    assert files.save(log, _capture(command), None) is None
    json_path, text_path = files.stacks_paths(log)
    assert files.read(json_path)[0][0].processes[0].command == command  # the data, whole
    assert "python3 job.py data/caf" in text_path.read_text()


@needs_ptrace
def test_f15_the_hang_probe_keeps_its_finding_for_a_job_with_a_latin1_argument(tmp_path: Path):
    from monitor.session.hang_probe import HangProbe

    script = tmp_path / "job.py"
    script.write_text("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    job = subprocess.Popen([sys.executable, str(script), b"data/caf\xe9.txt"], stdout=subprocess.PIPE)
    posted = []
    try:
        assert job.stdout.readline() == b"ready\n"
        probe = HangProbe(lambda: [job.pid], tmp_path / "run-1.log", posted.extend)
        assert probe.trigger("stall")
        probe.join(30)
    finally:
        job.kill()
        job.wait()
    assert [f.rule for f in posted] == ["stacks"], [f.title for f in posted]
    assert "every rank is in <module> (job.py:3)" in posted[0].title
    assert "job.py data/caf" in (tmp_path / "run-1.stacks.txt").read_text()


def test_f15_a_side_file_that_fails_never_takes_the_finding_with_it(tmp_path: Path, monkeypatch):
    from monitor.session import hang_probe

    def broken_save(*args):
        raise UnicodeEncodeError("utf-8", "\udce9", 0, 1, "surrogates not allowed")

    taken = object()

    class Look:
        capture, finding, dumps_asked = _capture("python3 job.py"), taken, []

        def __init__(self, *args) -> None:
            pass

    monkeypatch.setattr(hang_probe, "Look", Look)
    monkeypatch.setattr(hang_probe.files, "save", broken_save)
    posted = []
    probe = hang_probe.HangProbe(lambda: [1], tmp_path / "run-1.log", posted.extend)
    probe.trigger("stall")
    probe.join(10)
    assert posted[0] is taken
    (warning,) = posted[1:]
    assert warning.fields["kind"] == "not-saved" and "UnicodeEncodeError" in warning.title


# -- F16: a silent job that then exits well -------------------------------------------------------
def test_f16_a_clean_exit_clears_the_stall(tmp_path: Path, catalogue):
    log = tmp_path / "job.log"
    log.touch()
    clock = FakeClock(wall=5000.0)
    session = JobSession([str(log)], catalogue, stall_after=3, clock=clock)
    write(log, "start")
    step(session, clock, 0.1)
    stall = next(f for f in step(session, clock, 4).new_findings if f.rule == "possible-hang")
    session.close()
    session.job_ended(None)
    assert session.stall.active is None and stall not in session.findings
    (note,) = session.findings
    assert note.rule == "possible-hang-passed" and "then the job exited well" in note.title
    assert session.diagnosis().root_cause is None


def test_f16_monitor_run_saves_no_hang_for_a_silent_job_that_succeeds(tmp_path: Path):
    done = monitor("run", "--headless", "--no-preflight", "--stall-after", "1", "--",
                   sys.executable, "-c", "import time; print('start', flush=True); time.sleep(3)", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (saved,) = (tmp_path / "logs").glob("*.diagnosis.json")
    diagnosis = json.loads(saved.read_text())
    assert diagnosis["root_cause"] is None
    assert [f["rule"] for f in diagnosis["findings"]] == ["possible-hang-passed"]
