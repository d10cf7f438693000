import socket
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

METRICS_HOST, METRICS_PORT = "127.0.0.1", 9  # metrics collector (not running on this box)
CLASS_WEIGHTS = [1.0, 2.0, 0.5]  # written for the 3-class version of the dataset


def push_metrics(payload, retries=3):
    for attempt in range(1, retries + 1):
        try:
            with socket.create_connection((METRICS_HOST, METRICS_PORT), timeout=1.0) as s:
                s.sendall(payload.encode())
            return True
        except OSError:
            print(f"push_metrics: attempt {attempt}/{retries} failed:", file=sys.stderr, flush=True)
            traceback.print_exc()
            time.sleep(0.2)
    print("push_metrics: giving up, metrics for this step are dropped", file=sys.stderr, flush=True)
    return False


def sample_weights(labels):
    return torch.tensor([CLASS_WEIGHTS[int(c)] for c in labels])


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(6, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for step in range(8):
        x = torch.randn(12, 6, generator=g)
        # rank 1 holds the shard with the newly added 4th class, first seen at step 4
        num_classes = 4 if (rank == 1 and step >= 4) else 3
        y = torch.randint(0, num_classes, (12,), generator=g)
        if num_classes == 4:
            y[0] = 3
        w = sample_weights(y)
        loss = (nn.functional.cross_entropy(model(x), y, reduction="none") * w).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
        if rank == 0 and step == 1:
            push_metrics(f"step={step} loss={loss.item():.4f}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
