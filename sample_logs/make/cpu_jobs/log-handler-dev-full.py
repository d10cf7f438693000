"""Train with rank 0 also logging to a file on the shared log volume.

The log volume is full; /dev/full stands in for it (every write fails with
ENOSPC). logging's FileHandler reports each failed write on stderr
('--- Logging error ---') and carries on, so training itself is unaffected.
"""
import argparse
import logging
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

log = logging.getLogger("trainer")


def setup_logging(rank, logfile):
    log.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    console = logging.StreamHandler()
    console.setFormatter(fmt)
    log.addHandler(console)
    if rank == 0:
        fh = logging.FileHandler(logfile)
        fh.setFormatter(fmt)
        log.addHandler(fh)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--logfile", default="/dev/full")
    args = p.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    setup_logging(rank, args.logfile)
    log.info("rank %d/%d up", rank, world)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    for step in range(1, 11):
        x = torch.randn(64, 10)
        y = x.sum(1, keepdim=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if rank == 0 and step % 3 == 0:
            log.info("step %d loss %.4f", step, loss.item())
    if rank == 0:
        log.info("training done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
