"""Resume training from per-rank checkpoints.

The previous run of this job was killed while rank 1 was still writing its
checkpoint, so ckpt/rank1.pt on disk holds only the first half of the file.
_previous_run() reproduces that state: it trains, saves each rank's
checkpoint with torch.save, and leaves rank 1's file cut in half.
"""
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("trainer")
CKPT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ckpt")


def make_model():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))


def _previous_run(rank):
    os.makedirs(CKPT_DIR, exist_ok=True)
    torch.manual_seed(rank)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        x = torch.randn(16, 32)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = os.path.join(CKPT_DIR, f"rank{rank}.pt")
    torch.save({"step": 300, "model": model.state_dict(), "optim": opt.state_dict(),
                "rng": torch.get_rng_state()}, path)
    if rank == 1:  # killed mid-write: only half of the bytes reached the disk
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.truncate(size // 2)


def main():
    rank = int(os.environ["RANK"])
    _previous_run(rank)

    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    world = dist.get_world_size()
    log.info("rank %d/%d: resuming from %s", rank, world, CKPT_DIR)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    state = torch.load(os.path.join(CKPT_DIR, f"rank{rank}.pt"), map_location="cpu")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    torch.set_rng_state(state["rng"])
    start = state["step"]
    log.info("rank %d: restored step %d", rank, start)

    ddp = nn.parallel.DistributedDataParallel(model)
    for step in range(start, start + 10):
        x = torch.randn(16, 32)
        loss = ddp(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            log.info("step %d loss %.5f", step, loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
