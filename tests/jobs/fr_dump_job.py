"""A real gloo job that leaves real flight-recorder dumps, then exits without waiting for the
gloo timeout. Run under torchrun with TORCH_FR_BUFFER_SIZE set; argv[1] is the scenario:

- ``missing``: rank 2 never reaches the 4th collective its peers wait in;
- ``op``: rank 1 calls broadcast where rank 0 calls all_reduce;
- ``size``: rank 1 all-reduces a 2x2 tensor where rank 0 all-reduces 4 numbers (the same bytes,
  so gloo does not notice; a different byte count it aborts on at once).

Each rank dumps its recorder (as NCCL's watchdog would) to ``$DUMP_DIR/dump-rank<rank>`` from a
thread while its main thread is blocked, then ends the process.
"""

import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist

SCENARIO = sys.argv[1]
DUMP_AFTER_S = 4.0


def dump_and_exit(rank: int) -> None:
    data = torch._C._distributed_c10d._dump_fr_trace()
    path = os.path.join(os.environ["DUMP_DIR"], f"dump-rank{rank}")
    with open(path + ".tmp", "wb") as out:
        out.write(data)
    os.replace(path + ".tmp", path)
    os._exit(0)


def load_batch() -> None:
    time.sleep(60)


dist.init_process_group("gloo", timeout=timedelta(seconds=60))
rank = dist.get_rank()
threading.Timer(DUMP_AFTER_S, dump_and_exit, args=(rank,)).start()
tensor = torch.ones(4)
for _ in range(3):
    dist.all_reduce(tensor)
if SCENARIO == "missing" and rank == 2:
    load_batch()
elif SCENARIO == "op" and rank == 1:
    dist.broadcast(tensor, src=1)
elif SCENARIO == "size" and rank == 1:
    dist.all_reduce(torch.ones(2, 2))
else:
    dist.all_reduce(tensor)
time.sleep(60)
