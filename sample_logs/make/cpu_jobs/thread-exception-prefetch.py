import queue
import threading
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


class Prefetcher:
    """Loads batches in a background thread so the training loop never waits on I/O."""

    def __init__(self, rank, num_batches, bs=16):
        self.q = queue.Queue(maxsize=2)
        self.rank, self.num_batches, self.bs = rank, num_batches, bs
        self.t = threading.Thread(target=self._worker, name=f"prefetch-{rank}", daemon=True)
        self.t.start()

    def _load(self, i):
        g = torch.Generator().manual_seed(1000 * self.rank + i)
        x = torch.randn(self.bs, 10, generator=g)
        # shard 1 was exported with a variable-length last column from batch 5 on
        cols = 10 if not (self.rank == 1 and i >= 5) else 9
        y = x[:, :cols].sum(1, keepdim=True)
        return torch.cat([x, y.view(self.bs, -1, 1).squeeze(-1)], dim=1) if cols == 10 else torch.stack([x, y])

    def _worker(self):
        for i in range(self.num_batches):
            self.q.put(self._load(i))
        self.q.put(None)

    def __iter__(self):
        while True:
            item = self.q.get()
            if item is None:
                return
            yield item[:, :10], item[:, 10:]


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(10, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    print(f"[rank {rank}] starting prefetcher", flush=True)
    for step, (x, y) in enumerate(Prefetcher(rank, num_batches=10)):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
