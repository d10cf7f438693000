"""A synchronous gloo job (run it under torchrun) whose ranks do the same work each step, then
all-reduce their "gradients"; rank ``SLOW_RANK`` does ``EXTRA`` times more work each step (a real
straggler: more data on one rank). ``SLOW_RANK=-1``: a balanced job. Each rank prints its step
and loss, as training scripts do; ``STEPS`` steps, then a clean exit.

A unit of work is a small matmul and a wait of ``UNIT_S`` (as for data or a device): the ranks'
time is what the straggler scores measure, and a job that keeps every core busy for a minute
would instead measure the machine's other load (two cores, the suite's other tests beside it).

Environment: SLOW_RANK (-1), EXTRA (1.0: twice the work), WORK (units a step, 40), UNIT_S (0.0005),
STEPS (300).
"""
import os
import time

import torch
import torch.distributed as dist

torch.set_num_threads(1)  # one core each: the ranks share a small machine fairly
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
slow_rank = int(os.environ.get("SLOW_RANK", "-1"))
extra = float(os.environ.get("EXTRA", "1.0"))
work = int(os.environ.get("WORK", "40"))
steps = int(os.environ.get("STEPS", "300"))
unit_s = float(os.environ.get("UNIT_S", "0.0005"))
weights = torch.randn(64, 64)
batch = torch.randn(64, 64)
gradient = torch.zeros(1 << 16)


def compute(count: int) -> float:
    out = batch
    for _ in range(count):
        out = torch.tanh(out @ weights)
        time.sleep(unit_s)
    return float(out.mean())


for step in range(1, steps + 1):
    started = time.perf_counter()
    loss = compute(work + (int(work * extra) if rank == slow_rank else 0))
    gradient.fill_(loss)
    dist.all_reduce(gradient)
    print(f"[rank{rank}]: step {step} loss {abs(loss):.4f} step_time {time.perf_counter() - started:.3f}", flush=True)
dist.destroy_process_group()
