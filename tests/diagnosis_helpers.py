"""Small rule packs and log texts shared by the diagnosis tests."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from pathlib import Path

import regex

from monitor.cli import main
from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.engine import Engine
from monitor.model import LogLine

RULES = r'''
[[rule]]
id = "cuda-oom"
category = "cuda_oom"
severity = "error"
role = "root"
title = "CUDA out of memory on rank {rank}"
patterns = [
  'CUDA out of memory\. Tried to allocate (?P<tried>[\d.]+ [KMGTP]?i?B)',
  '(?P<unallocated>[\d.]+ [KMGTP]?i?B) is reserved by PyTorch but unallocated',
]
remedy = """
Tried to allocate {tried}. Reduce the per-GPU micro-batch.
"""
[[rule.advice]]
text = "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: {unallocated} is reserved but unallocated."
when = "unallocated >= 0.25 * tried"
unless_log = 'PYTORCH_CUDA_ALLOC_CONF=\S*expandable_segments:True(?! to avoid)'

[rule.examples]
match = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.50 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 3.00 GiB is reserved by PyTorch but unallocated."]
no_match = ["If out-of-memory error occurs, reduce the batch size"]

[[rule]]
id = "nccl-watchdog-timeout"
category = "nccl_timeout"
severity = "error"
role = "cascade"
title = "NCCL collective timed out"
patterns = [
  'Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+).*?Timeout\(ms\)=(?P<timeout_ms>\d+)\)',
  'Rank (?P<rank>\d+)\]\s+failure detected by watchdog at work sequence id: (?P<wseq>\d+) PG status: last enqueued work: (?P<enq>-?\d+), last completed work: (?P<last_completed>-?\d+)',
]
remedy = "Collective {op} SeqNum={seq} timed out after {timeout_ms} ms: raise init_process_group(timeout=...) only for known-slow steps."

[[rule]]
id = "sigkill"
category = "host_oom"
severity = "error"
role = "cascade"
title = "Rank {rank} was killed (SIGKILL)"
patterns = ['Signal 9 \(SIGKILL\) received by PID (?P<pid>\d+)']
remedy = "Process {pid} got SIGKILL."

[[rule]]
id = "kernel-oom-kill"
category = "host_oom"
severity = "error"
role = "confirm"
title = "The kernel killed a process for lack of host memory"
patterns = ['(?i)out of memory: Killed process (?P<pid>\d+)']
remedy = "Raise host memory (--mem) or use fewer DataLoader workers."

[[rule]]
id = "distbackend-cascade"
category = "nccl_error"
severity = "error"
role = "cascade"
title = "NCCL communicator aborted"
patterns = ['NCCL communicator was aborted on rank (?P<rank>\d+)']
remedy = "Find the rank that failed first."
'''

OOM_TRACEBACK = """\
[rank3]: Traceback (most recent call last):
[rank3]:   File "/home/u/train.py", line 40, in <module>
[rank3]:     loss = model(batch)
[rank3]:   File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1736, in _wrapped_call_impl
[rank3]:     return self._call_impl(*args, **kwargs)
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.11 GiB of which 1.50 GiB is free. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 3.00 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."""

VALUE_ERROR_TRACEBACK = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/home/u/train.py", line 10, in <module>
[rank1]:     main()
[rank1]:   File "/home/u/train.py", line 7, in main
[rank1]:     loss = model(x)
[rank1]:   File "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1500, in _call_impl
[rank1]:     return forward_call(*args, **kwargs)
[rank1]: ValueError: shapes [bold]do not[/bold] match"""


def write_rules(directory: Path, text: str = RULES, name: str = "rules.toml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


def catalogue_from(tmp_path: Path, text: str = RULES):
    return load_catalogue([write_rules(tmp_path / "rules", text).parent], include_user=False, include_shipped=False)


def run_lines(engine: Engine, text: str, file: str = "job.log") -> Engine:
    for number, line in enumerate(text.splitlines(), start=1):
        engine.feed(LogLine(file, number, line))
    engine.flush()
    return engine


def tricky_log(seed: int = 7, lines: int = 3000) -> bytes:
    """A log that exercises every corner of line reading: interleaved ranks, NCCL INFO noise,
    tqdm carriage returns, colour codes inside a matched phrase, CRLF, invalid UTF-8, lines
    far over the length cap (with matches before and after the cut), a rank that goes silent
    in the middle of its traceback, and no newline at the end."""
    import random

    rng = random.Random(seed)
    out: list[bytes] = []
    # Ranks 11, 13 and 15 print only tracebacks (a process writes its traceback in one go).
    tracebacks = [OOM_TRACEBACK.replace("rank3", f"rank{r}") for r in (13, 15)] + [VALUE_ERROR_TRACEBACK.replace("rank1", "rank11")]
    for n in range(lines):
        r = rng.randrange(8)
        kind = rng.random()
        if kind < 0.4:
            out.append(f"node1:{1000 + r}:{1000 + r} [{r}] NCCL INFO Channel {n % 32:02d}/32 : {r}[{r}] -> {(r + 1) % 8}".encode())
        elif kind < 0.55:
            out.append(f"[rank{r}]: step {n} loss {rng.random():.4f}\r[rank{r}]: step {n} loss {rng.random():.4f}".encode())
        elif kind < 0.6:
            out.append(b"[rank%d]: \x1b[31mCUDA out of \x1b[0mmemory. Tried to allocate 1.00 GiB. \xff\xfe bad utf8\r" % r)
        elif kind < 0.62:
            out.append(WATCHDOG_LINE.format(r=r).encode() + b"\r")
        elif kind < 0.63:
            out.append(b"x" * 70000 + b" CUDA out of memory. Tried to allocate 9.00 GiB")
        elif kind < 0.64:
            out.append(b"CUDA out of memory. Tried to allocate 8.00 GiB " + b"y" * 70000)
        elif kind < 0.645:
            # A whole traceback, with other ranks' lines slipping in between its lines.
            for line in tracebacks[rng.randrange(len(tracebacks))].splitlines():
                out.append(line.encode())
                if rng.random() < 0.3:
                    out.append(f"[rank{r}]: step {n} interleaved".encode())
        else:
            out.append(f"[rank{r}]: {{'loss': {rng.random():.3f}, 'grad_norm': 1.0}} [bold]markup[/bold]".encode())
    # Rank 6 starts a traceback, then 300 lines of other ranks, then its stream moves on.
    out.append(b"[rank6]: Traceback (most recent call last):")
    out.append(b'[rank6]:   File "/home/u/train.py", line 3, in <module>')
    out.extend(f"[rank1]: step {i}".encode() for i in range(300))
    out.append(b"[rank6]: KeyError: 'labels'")
    out.append(b"z" * 80000 + b" CUDA out of memory. Tried to allocate 7.00 GiB")
    return b"\n".join(out)


WATCHDOG_LINE = (
    "[rank{r}]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
    "ran for 600010 milliseconds before timing out."
)


def diagnose_json(*args: str) -> dict:
    """`monitor diagnose --json ARGS` through the command's own entry (``cli.main``) in this
    process: the report. A process of its own costs ~1 s of CPU to start; the command in a process of
    its own is tested where that matters (test_runs, test_knobs, the real jobs)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["diagnose", "--json", *args])
    assert code in (0, 1), err.getvalue()
    return json.loads(out.getvalue())


def diagnose_run(*args: str, columns: int | None = None) -> subprocess.CompletedProcess:
    """`monitor diagnose ARGS` through ``cli.main`` in this process, as the process would have
    ended: its exit code and output; the text report wrapped at ``columns`` ($COLUMNS), else not
    at all, as a file or a pipe gets it."""
    out, err = io.StringIO(), io.StringIO()
    saved = os.environ.pop("COLUMNS", None)
    if columns is not None:
        os.environ["COLUMNS"] = str(columns)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["diagnose", *args])
    finally:
        os.environ.pop("COLUMNS", None)
        if saved is not None:
            os.environ["COLUMNS"] = saved
    return subprocess.CompletedProcess(["monitor", "diagnose", *args], code, out.getvalue(), err.getvalue())


def diagnosed(tmp_path: Path, text: str) -> dict:
    """The report `monitor diagnose --json` gives for a log holding ``text``."""
    log = tmp_path / "job.log"
    log.write_text(text)
    return diagnose_json(str(log))


def diagnosed_root(tmp_path: Path, text: str) -> dict | None:
    """The root cause `monitor diagnose --json` reports for a log holding ``text``."""
    return diagnosed(tmp_path, text)["root_cause"]


# A template left in a title or remedy ("{name}", "{name|fallback}"); a remedy may quote a config's own
# braces ('"bf16": {"enabled": true}'), which this does not take for one.
_TEMPLATE = regex.compile(r"\{\w+(?:\|[^{}]*)?\}")


def assert_root_named(tmp_path: Path, text: str, rule: str, category: str, rank: int | None) -> dict:
    """That the root cause of a log holding ``text`` is ``rule``'s, in ``category``, on ``rank``,
    with every field its title and remedy name found; the root cause, for more checks."""
    root = diagnosed_root(tmp_path, text)
    assert root is not None and (root["rule"], root["category"], root["rank"]) == (rule, category, rank)
    assert not any(_TEMPLATE.search(root[part]) for part in ("title", "remedy"))
    return root
