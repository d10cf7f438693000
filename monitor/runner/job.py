"""The job handle: starts the recorder (which starts the job) and answers questions about it.

This is the object the TUI and ``monitor run`` hold. The monitor is the recorder's parent, the
recorder is the job's parent: the job's output and exit status never depend on the monitor.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from itertools import chain, count
from pathlib import Path

from monitor.files import create_new
from monitor.runner import launchers
from monitor.runner.processes import become_subreaper, descendants, signal_job
from monitor.runner.recorder import open_output, open_pipe, write_state
from monitor.runner.takeover import record_rest

# How long the recorder may take to start the job before we call it broken.
START_TIMEOUT_S = 30.0
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# The recorder's command line names nothing of the monitor: `pkill -f monitor`, the natural way to
# end a stuck monitor, must not take the recorder too (with both gone nobody reads the job's
# output, and the job dies of SIGPIPE at its next write). Its Python is named by its real path
# (a virtual environment's folder is often named after the tool), and its boot code, with its
# options (the log's path), comes in this variable, which it removes before it starts the job;
# only the job's command is on its command line (what `ps` shows it records).
RECORDER_VARIABLE = "JOB_RECORDER_BOOT"
RECORDER_BOOT = f"import os; exec(os.environ.pop({RECORDER_VARIABLE!r}))"


class JobStartError(Exception):
    """The command could not be started (not found, not executable): one line, with a code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class CaptureOptions:
    """How the recorder handles the job's output and a stop request."""

    tee: bool = False         # copy the output to our stdout (headless)
    use_pty: bool = True      # give the job a pseudo-terminal (tqdm, colours)
    stdin: bool = False       # pass our stdin to the job (input(), a breakpoint); else /dev/null
    grace_s: float = 10.0     # from the first stop signal to SIGKILL
    linger_s: float = 5.0     # after the launcher exits, before leftovers are stopped


def new_log_path(log_dir: Path, now: datetime | None = None) -> Path:
    """A fresh ``run-YYYYmmdd-HHMMSS.log`` in ``log_dir`` (``-2``, ``-3``... if taken), created
    empty, mode 0600. Created exclusively (``files.create_new``): two runs starting in the same
    second never get one log, and a link planted at the name is passed over, never followed."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    log_dir.mkdir(parents=True, exist_ok=True)
    names = chain([log_dir / f"run-{stamp}.log"], (log_dir / f"run-{stamp}-{n}.log" for n in count(2)))
    path, fd = create_new(names)
    os.close(fd)
    return path


def recorder_process(options: list[str], command: list[str], env: dict[str, str] | None = None
                     ) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that start the recorder of ``command`` with ``options``
    (``--log PATH`` ...; ``env``: the job's environment, default ours)."""
    boot = (f"import sys; sys.path[:] = {_recorder_import_path()!r}; "
            f"from monitor.runner.recorder import main; sys.exit(main({options!r} + sys.argv[1:]))")
    return ([os.path.realpath(sys.executable), "-c", RECORDER_BOOT, "--", *command],
            {**(os.environ if env is None else env), RECORDER_VARIABLE: boot})


def _recorder_import_path() -> list[str]:
    """Where the recorder imports from: where we do (its Python, named by its real path, does
    not find a virtual environment's site-packages itself), less folders relative to the current
    directory (a training repo with its own ``monitor`` package, a common name, must not shadow
    this one), with this very package's folder after the standard library and before any stale
    install in site-packages (in a wheel install it is site-packages itself, where a module
    named like a stdlib one may lie)."""
    path = [folder for folder in sys.path if os.path.isabs(folder) and folder != PACKAGE_ROOT]
    at = next((n for n, folder in enumerate(path) if folder.endswith("-packages")), len(path))
    return [*path[:at], PACKAGE_ROOT, *path[at:]]


def side_file(log_path: Path, kind: str) -> Path:
    """``run-X.log`` -> ``run-X.<kind>.json`` (job, meta, diagnosis)."""
    return log_path.with_name(f"{log_path.stem}.{kind}.json")


def _terminal_size() -> str | None:
    try:
        size = os.get_terminal_size(sys.stdout.fileno())
    except OSError:
        return None
    return f"{size.lines}x{size.columns}"


class Job:
    """A running (or finished) job started through the recorder."""

    def __init__(self, command: list[str], log_path: Path, recorder: subprocess.Popen,
                 state: dict, status_fd: int | None = None) -> None:
        self.command = list(command)
        self.log_path = log_path
        self.state_path = side_file(log_path, "job")
        self.pid: int = state["job_pid"]
        self.started: float = state["started"]
        self._recorder = recorder
        self._exit_code: int | None = None
        # Set once stop() was called: the job is on its way out, wait for it.
        self.stop_requested = False
        # True when the recorder died before it could write the job's exit status.
        self.recorder_lost = False
        self._status_fd = status_fd
        self._final: dict | None = None  # the recorder's last word, from the status pipe
        self._guard: threading.Thread | None = None
        # Set when the recorder died before the job ended and we recorded the rest: what it would
        # have written (exit code, recorder_killed).
        self._taken_over: dict = {}
        self._stops = 0
        self._status_lock = threading.Lock()  # state() is read by the guard and the monitor alike

    @classmethod
    def start(cls, command: list[str], log_path: Path, options: CaptureOptions = CaptureOptions(),
              env: dict[str, str] | None = None) -> Job:
        """Start ``command`` under a recorder writing ``log_path``; ``env``: the job's environment
        (default: ours). Raises JobStartError."""
        state_path = side_file(log_path, "job")
        args = ["--log", str(log_path), "--state", str(state_path), "--grace", str(options.grace_s),
                "--linger", str(options.linger_s)]
        if options.tee:
            args.append("--tee")
        if options.use_pty:
            args.append("--pty")
        # We open the job's output channel and keep a copy of its read end: if the recorder is
        # killed, we record the rest (takeover.py) instead of the job dying of SIGPIPE. As a
        # subreaper we become the orphaned job's parent then, and get its exit status.
        become_subreaper()
        output_read, output_write = open_output(options.use_pty, _terminal_size() if options.use_pty else None)
        # The output passes through a holding pipe into the log (log_writer.py): we keep its read
        # end too, so what the recorder held is there for us.
        hold_read, hold_write = open_pipe()
        # The recorder's final state also comes down this pipe: the exit code reaches us even
        # when the disk is too full for the state file.
        status_read, status_write = os.pipe()
        recorder_command, recorder_env = recorder_process(
            [*args, "--status-fd", str(status_write), "--output-fds", f"{output_read},{output_write}",
             "--hold-fds", f"{hold_read},{hold_write}"], command, env)
        try:
            recorder = subprocess.Popen(
                recorder_command, stdin=None if options.stdin else subprocess.DEVNULL, env=recorder_env,
                stdout=None if options.tee else subprocess.DEVNULL,
                pass_fds=(status_write, output_read, output_write, hold_read, hold_write),
                start_new_session=True,  # our terminal's Ctrl-C and hang-up must not reach it directly
            )
        except OSError:
            for fd in (status_read, output_read, hold_read):
                os.close(fd)
            raise
        finally:
            os.close(status_write)
            os.close(output_write)
            os.close(hold_write)
        state = cls._await_start(recorder, state_path)
        if "job_pid" not in state:
            recorder.wait()
            state = _read_state(state_path) or _read_status(status_read) or state
            for fd in (status_read, output_read, hold_read):
                os.close(fd)
            raise JobStartError(state.get("error", "the job did not start"), state.get("exit_code", 127))
        job = cls(command, log_path, recorder, state, status_read)
        job._guard = threading.Thread(target=job._guard_output, args=(output_read, hold_read), daemon=True,
                                      name="recorder-guard")
        job._guard.start()
        return job

    @staticmethod
    def _await_start(recorder: subprocess.Popen, state_path: Path) -> dict:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            state = _read_state(state_path)
            if "job_pid" in state or "error" in state:
                return state
            if recorder.poll() is not None:
                return _read_state(state_path) or {
                    "error": f"the recorder exited with {recorder.returncode} before starting the job"}
            time.sleep(0.01)
        recorder.kill()
        return {"error": "the recorder did not start the job in time"}

    # -- the API for the TUI ----------------------------------------------------------------
    def pids(self) -> list[int]:
        """The job's live processes: the launcher and everything under it."""
        tree = descendants(self._recorder.pid)
        if tree or self._recorder.poll() is None:
            return tree
        # Recorder gone: fall back to what is still under the job itself.
        return ([self.pid] + descendants(self.pid)) if _exists(self.pid) else []

    def extra_log_paths(self) -> list[Path]:
        """Per-rank files the launcher writes itself (torchrun --log-dir), oldest first."""
        return launchers.rank_log_files(self.command, since=self.started)

    def exit_code(self) -> int | None:
        """The job's exit code (128+N for signal N) once the log is complete; None before."""
        if self._exit_code is None and self._recorder.poll() is not None:
            if self._guard is not None and self._guard.is_alive():
                return None  # deciding, or recording what the job writes after its recorder died
            state = self.state()
            if "exit_code" in state:
                self._exit_code = int(state["exit_code"])
            else:
                self.recorder_lost = True
                code = self._recorder.returncode
                self._exit_code = 128 - code if code < 0 else code
        return self._exit_code

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the job ended and its output is recorded (or ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._recorder.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._guard is not None:
            self._guard.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.exit_code()

    def _guard_output(self, output_read: int, hold_read: int) -> None:
        """Waits for the recorder. If it ended normally, lets go of our copies of the job's output
        and the holding pipe; if it died before the job ended, records the rest of the output
        (what it held first) and reaps the job."""
        self._recorder.wait()
        if "exit_code" in self.state():
            os.close(output_read)
            os.close(hold_read)
            return
        code = self._recorder.returncode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code} before the job ended"
        self._taken_over = record_rest(self.log_path, output_read, self.pid, self._recorder.pid, how, hold_read,
                                       may_miss="log_fallback" in self.state())
        if "exit_code" in self._taken_over:
            write_state(self.state_path, {**_read_state(self.state_path), **self._taken_over})

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the job to stop: ``signum`` to every process now, SIGKILL after the grace period.

        Calling it a second time kills at once. Returns immediately.
        """
        self.stop_requested = True
        self._stops += 1
        if self._recorder.poll() is None:
            os.kill(self._recorder.pid, signum)  # the recorder passes it on and escalates
        elif _exists(self.pid):  # the recorder is gone: signal the job ourselves
            signal_job(self.pid, descendants(self.pid), signum if self._stops == 1 else signal.SIGKILL)

    def state(self) -> dict:
        """What the recorder wrote about the job (pids, times, exit code, dropped tee bytes). Once
        it has exited, its last word from the status pipe where the file lacks it (a full disk)."""
        state = {**_read_state(self.state_path), **self._taken_over}
        if "exit_code" in state or self._recorder.poll() is None:
            return state
        with self._status_lock:
            if self._final is None and self._status_fd is not None:
                self._final = _read_status(self._status_fd)
                os.close(self._status_fd)
                self._status_fd = None
        return {**state, **(self._final or {})}


def _read_status(fd: int) -> dict:
    """The final state the recorder sent down the status pipe ({} if it sent none: it died)."""
    data = b""
    try:
        while chunk := os.read(fd, 1 << 16):
            data += chunk
        return json.loads(data.decode().splitlines()[-1]) if data.strip() else {}
    except (OSError, ValueError, UnicodeDecodeError):
        return {}


def _read_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
