"""Regression trainer, 2 ranks, run under torchrun --max-restarts 1.

Rank 1 trains on an extra shard that a background sync thread copies into
./shared/ (a stand-in for a slow network filesystem). The trainer forgets to
wait for the sync: on the first attempt rank 1 opens shared/shard1.pt at step
2 before the copy has landed and dies with FileNotFoundError (the sync thread
still finishes before the process exits). torchrun restarts the workers; the
shard is there now and the second attempt trains to the end and exits 0.
"""
import logging
import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s trainer: %(message)s")
log = logging.getLogger("trainer")

SHARED = "shared"


def sync_shard(rank):
    """Copy this rank's extra shard to the shared folder (slow)."""
    dst = os.path.join(SHARED, f"shard{rank}.pt")
    if os.path.exists(dst):
        return
    os.makedirs(SHARED, exist_ok=True)
    g = torch.Generator().manual_seed(rank)
    data = {"x": torch.randn(64, 8, generator=g), "y": torch.randn(64, 1, generator=g)}
    time.sleep(10.0)  # network filesystem latency
    tmp = dst + ".part"
    torch.save(data, tmp)
    os.replace(tmp, dst)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    log.info("rank %d starting (restart count %d)", rank, attempt)
    if rank == 1:
        threading.Thread(target=sync_shard, args=(rank,)).start()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    extra = None
    for step in range(1, 7):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        if rank == 1 and step >= 2:
            if extra is None:
                extra = torch.load(os.path.join(SHARED, f"shard{rank}.pt"))
            i = (step - 2) * 16
            x, y = extra["x"][i:i + 16], extra["y"][i:i + 16]
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            log.info("step %d loss %.4f", step, loss.item())
        time.sleep(0.2)
    if rank == 0:
        log.info("training finished")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
