"""Inside a training job: answer flight-recorder dump requests for process groups that do not
answer them themselves (gloo), the way NCCL's watchdog does for NCCL jobs.

NCCL's watchdog reads ``$TORCH_NCCL_DEBUG_INFO_PIPE_FILE<rank>.pipe`` and dumps on request, and
on a timeout; gloo records its collectives too (``TORCH_FR_BUFFER_SIZE``) but dumps only when
asked from inside the process. One line after ``init_process_group`` gives a gloo job the same::

    from monitor.flight_recorder.serve import serve_dump_requests
    serve_dump_requests()

A daemon thread waits on the FIFO (no cost while nobody asks) and writes the dump atomically,
so a reader never sees half of it. It works while the main thread is blocked in a collective
or in user code (the dump is taken without the training loop's help).
"""

from __future__ import annotations

import os
import threading

from monitor.flight_recorder.variables import DUMP_FILE, PIPE_FILE, TORCH_DEFAULT_DUMP_FILE


def serve_dump_requests() -> str | None:
    """Start answering dump requests; returns the pipe's path, or None when there is nothing to
    do (no pipe file set, no process group, or an NCCL group that answers by itself)."""
    import torch.distributed as dist

    pipe_prefix = next((os.environ[n] for n in PIPE_FILE if os.environ.get(n)), None)
    if pipe_prefix is None or not dist.is_initialized() or dist.get_backend() == "nccl":
        return None
    dump_prefix = next((os.environ[n] for n in DUMP_FILE if os.environ.get(n)), TORCH_DEFAULT_DUMP_FILE)
    rank = dist.get_rank()
    pipe = f"{pipe_prefix}{rank}.pipe"
    try:
        if os.path.exists(pipe):
            os.unlink(pipe)  # a previous attempt's
        os.mkfifo(pipe, 0o600)
    except OSError:
        return None  # a read-only folder: the job runs as before, only without dumps on request
    threading.Thread(target=_answer, args=(pipe, f"{dump_prefix}{rank}"), daemon=True,
                     name="flight-recorder-pipe").start()
    return pipe


def _answer(pipe: str, dump_path: str) -> None:
    # A private binding that torch's stub (torch/_C/_distributed_c10d.pyi, 2.13) does not declare.
    from torch._C._distributed_c10d import _dump_fr_trace  # type: ignore[attr-defined]

    while True:
        try:
            with open(pipe, "rb") as requests:  # blocks until someone writes
                if not requests.read():
                    continue
            data = _dump_fr_trace()
            tmp = f"{dump_path}.tmp"
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, dump_path)
        except OSError:
            return  # the pipe was removed (the run's folder cleaned up): stop answering
