"""Bad input that broke `monitor` (issue #11): file names that take over the terminal, tracebacks too
long to keep, FIFOs and devices, symlink loops, unreadable files, rule files with a bad byte."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from monitor.diagnosis.catalogue import RuleError, load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.session.headless import watch_headless
from monitor.text import safe_text
from monitor.tui.findings_panel import describe

# OSC 0 (set the window title), BEL, CSI 2J (clear the screen), and a Unicode line separator.
EVIL = "evil\x1b]0;PWNED\x07\x1b[2J\u2028name.log"
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\nValueError: bad batch\n'


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def monitor(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    # Wide, so the report does not wrap the lines the tests look for.
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "400"})


def assert_no_control(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u2028" not in text, repr(text)


def test_safe_text_removes_escapes_controls_and_line_breaks():
    assert safe_text(EVIL) == "evilname.log"
    assert safe_text("a\nb") == "a b"
    assert safe_text("line 1\n\x1b[31mline 2", keep_newlines=True) == "line 1\nline 2"
    assert safe_text("plain [bold] text") == "plain [bold] text"


def test_a_file_name_with_escape_codes_never_reaches_the_terminal_raw(tmp_path: Path):
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / EVIL).write_text(TRACEBACK)
    for args in (("diagnose", str(folder)), ("diagnose", "--json", str(folder))):
        done = monitor(*args)
        assert done.returncode == 1, done.stderr
        assert_no_control(done.stdout + done.stderr)
    assert "ValueError" in monitor("diagnose", str(folder)).stdout
    missing = monitor("diagnose", str(folder / ("gone\x1b[2J.log")))
    assert missing.returncode == 2 and "gone.log" in missing.stderr
    assert_no_control(missing.stderr)


def test_watch_headless_and_the_tui_detail_clean_file_names(tmp_path: Path, catalogue):
    path = tmp_path / EVIL
    path.write_text(TRACEBACK + "step 2\n")
    out = _Capture()
    stop = threading.Event()
    threading.Timer(2.0, stop.set).start()
    code = watch_headless([str(tmp_path)], catalogue, out=out, stop=stop)
    assert code == 1
    assert "ValueError" in out.text
    assert_no_control(out.text)
    finding = diagnose_paths([path], catalogue).root_cause
    assert "\x1b" in finding.file  # the finding keeps the real path (to open the file)...
    assert_no_control(describe(finding, True, "").plain)  # ...the screen shows it clean


class _Capture:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


def _recursion_traceback(frames: int) -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for i in range(frames):
        lines += [f'  File "/work/train.py", line {10 + i % 3}, in step{i % 3}', "    return step(x)"]
    return lines + ["RecursionError: maximum recursion depth exceeded while calling a Python object"]


def _chain_of_long_tracebacks() -> list[str]:
    lines: list[str] = []
    for number, exception in enumerate(("KeyError: 'label'", "ValueError: bad batch", "RuntimeError: step failed")):
        if number:
            lines += ["", "During handling of the above exception, another exception occurred:", ""]
        lines.append("Traceback (most recent call last):")
        for i in range(70):
            lines += [f'  File "/work/train.py", line {i + 1}, in helper{i}', "    helper()"]
        lines.append(exception)
    return lines


@pytest.mark.parametrize("fast", [True, False])
def test_long_tracebacks_keep_their_exception_line(tmp_path: Path, catalogue, fast):
    deep = tmp_path / "deep.log"
    deep.write_text("\n".join(_recursion_traceback(1000)) + "\n")
    root = diagnose_paths([deep], catalogue, fast=fast).root_cause
    assert root is not None and root.fields["exc_type"] == "RecursionError"
    chained = tmp_path / "chained.log"
    chained.write_text("\n".join(_chain_of_long_tracebacks()) + "\n")
    root = diagnose_paths([chained], catalogue, fast=fast).root_cause
    assert root is not None and root.fields["exc_type"] == "RuntimeError"
    assert "ValueError: bad batch" in "\n".join(root.evidence) or root.fields["message"] == "step failed"


def test_a_fifo_or_a_device_is_skipped_with_one_line_and_the_rest_is_diagnosed(tmp_path: Path):
    folder = tmp_path / "logs"
    folder.mkdir()
    os.mkfifo(folder / "pipe.log")
    (folder / "rank0.log").write_text(TRACEBACK)
    done = monitor("diagnose", str(folder), timeout=30)
    assert "ValueError" in done.stdout
    assert "pipe.log: a FIFO, not a log file: skipped" in done.stdout
    assert done.returncode == 2  # an input that could not be read: exit 2, as grep
    zero = monitor("diagnose", "/dev/zero", str(folder / "rank0.log"), timeout=30)
    assert "/dev/zero: a character device, not a log file: skipped" in zero.stdout
    assert "ValueError" in zero.stdout and zero.returncode == 2


def test_a_symlink_loop_says_so(tmp_path: Path):
    loop = tmp_path / "loop.log"
    loop.symlink_to(loop)
    done = monitor("diagnose", str(loop))
    assert done.returncode == 2
    assert "too many levels of symbolic links" in done.stderr
    assert "no such file" not in done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_an_unreadable_file_next_to_clean_logs_is_exit_2(tmp_path: Path):
    (tmp_path / "ok.log").write_text("step 1 loss 0.5\n")
    secret = tmp_path / "secret.log"
    secret.write_text("step 1\n")
    secret.chmod(0)
    done = monitor("diagnose", str(tmp_path))
    assert done.returncode == 2 and "secret.log" in done.stdout


def test_an_unreadable_file_counts_as_unread(tmp_path: Path, catalogue, monkeypatch):
    """The same as above for root, who can read anything: a read error, made to happen."""
    (tmp_path / "ok.log").write_text("step 1 loss 0.5\n")
    (tmp_path / "bad.log").write_text("step 1\n")
    real_open = open

    def failing_open(path, *args, **kwargs):
        if str(path).endswith("bad.log"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", failing_open)
    diagnosis = diagnose_paths([tmp_path], catalogue)
    assert diagnosis.unread == [str(tmp_path / "bad.log")]
    assert any("bad.log: cannot read: permission denied" in p for p in diagnosis.problems)


def test_a_rule_file_with_a_bad_byte_names_its_line(tmp_path: Path):
    (tmp_path / "mine.toml").write_bytes(b'[[rule]]\nid = "x\xff"\n')
    with pytest.raises(RuleError, match=r"mine\.toml:2: rule file is not UTF-8 \(byte 0xff\)"):
        load_catalogue([tmp_path], include_user=False)
