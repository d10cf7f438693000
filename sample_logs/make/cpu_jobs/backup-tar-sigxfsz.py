"""Train, checkpoint from rank 0 every 5 steps, and after each checkpoint
roll the checkpoint directory into a tar archive for the backup job.

Rank 0's host runs jobs under a per-process file size limit (ulimit -f
48 MiB, as the site's job wrapper sets it); set_site_limits() applies it to
rank 0's process, and child processes (tar) inherit it. One checkpoint
(~31 MB) fits; the archive of two does not.
"""
import logging
import os
import resource
import subprocess
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("trainer")
HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_DIR = os.path.join(HERE, "ckpt")
BACKUP = os.path.join(HERE, "backup", "ckpt.tar")


def set_site_limits(rank):
    if rank == 0:
        lim = 48 << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (lim, lim))


def backup_checkpoints():
    os.makedirs(os.path.dirname(BACKUP), exist_ok=True)
    log.info("archiving %s -> %s", CKPT_DIR, BACKUP)
    subprocess.run(["tar", "-cf", BACKUP, "-C", HERE, "ckpt"], check=True)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    set_site_limits(rank)
    if rank == 0:
        os.makedirs(CKPT_DIR, exist_ok=True)
        for f in os.listdir(CKPT_DIR):
            os.remove(os.path.join(CKPT_DIR, f))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1536), nn.ReLU(), nn.Linear(1536, 1536), nn.ReLU(), nn.Linear(1536, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=3e-4)
    for step in range(1, 16):
        x, y = torch.randn(32, 256), torch.randint(0, 10, (32,))
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        if rank == 0:
            log.info("step %d loss %.4f", step, loss.item())
        if step % 5 == 0 and rank == 0:
            path = os.path.join(CKPT_DIR, f"step{step}.pt")
            torch.save({"step": step, "model": model.state_dict(), "optim": opt.state_dict()}, path)
            log.info("saved %s (%.1f MB)", path, os.path.getsize(path) / 2**20)
            backup_checkpoints()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
