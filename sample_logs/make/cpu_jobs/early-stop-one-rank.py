"""DDP trainer with early stopping on the (local) validation loss."""
import logging
from datetime import timedelta

import torch
import torch.nn as nn
import torch.distributed as dist

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
log = logging.getLogger("train")


class EarlyStopping:
    def __init__(self, patience=2, min_delta=1e-3):
        self.best, self.bad, self.patience, self.min_delta = float("inf"), 0, patience, min_delta

    def __call__(self, val):
        if val < self.best - self.min_delta:
            self.best, self.bad = val, 0
        else:
            self.bad += 1
        return self.bad >= self.patience


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(400, 8, generator=g)
    # rank 1's labels are pure noise, so its validation loss stops improving quickly
    y = x[:, :1] * 2 if rank == 0 else torch.randn(400, 1, generator=g)
    xtr, ytr, xva, yva = x[:320], y[:320], x[320:], y[320:]
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    stopper = EarlyStopping()
    for epoch in range(30):
        for i in range(0, 320, 64):
            loss = nn.functional.mse_loss(model(xtr[i:i + 64]), ytr[i:i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            val = nn.functional.mse_loss(model.module(xva), yva).item()
        log.info("rank %d epoch %d train_loss %.4f val_loss %.4f", rank, epoch, loss.item(), val)
        if stopper(val):
            log.info("rank %d: early stopping at epoch %d (best val %.4f)", rank, epoch, stopper.best)
            dist.destroy_process_group()
            return


if __name__ == "__main__":
    main()
