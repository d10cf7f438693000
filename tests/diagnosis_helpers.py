"""Small rule packs and log texts shared by the diagnosis tests."""

from __future__ import annotations

from pathlib import Path

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.engine import Engine
from monitor.diagnosis.model import LogLine

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
