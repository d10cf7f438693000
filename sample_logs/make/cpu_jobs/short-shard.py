"""Data-parallel classifier, each rank reads its own shard of a dataset."""
import logging
from datetime import timedelta

import torch
import torch.nn as nn
import torch.distributed as dist

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("trainer")

N_SAMPLES = 1000
BATCH = 64


def make_shard(rank, world):
    # naive sharding: rank r gets samples [r*per, (r+1)*per) -- last shard is whatever is left
    per = (N_SAMPLES + world - 1) // world  # 500 / ... but the dataset was filtered
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N_SAMPLES, 20, generator=g)
    y = (x[:, 0] + x[:, 1] > 0).long()
    keep = x[:, 2] > -1.0  # drop "bad" rows after sharding decision
    x, y = x[keep], y[keep]
    lo, hi = rank * per, min((rank + 1) * per, len(x))
    return x[lo:hi], y[lo:hi]


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, world = dist.get_rank(), dist.get_world_size()
    xs, ys = make_shard(rank, world)
    log.info("rank %d: shard has %d samples", rank, len(xs))
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for i in range(0, len(xs), BATCH):
            xb, yb = xs[i:i + BATCH], ys[i:i + BATCH]
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            log.info("rank %d epoch %d iter %d loss %.4f", rank, epoch, i // BATCH, loss.item())
    log.info("rank %d finished training", rank)


if __name__ == "__main__":
    main()
