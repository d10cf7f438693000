import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

CKPT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ckpt")


def resolve_resume(rank, resume_step):
    path = os.path.join(CKPT_DIR, f"rank{rank}-step{resume_step}.pt")
    if not os.path.exists(path):
        sys.exit(f"resume requested from step {resume_step} but {path} is missing; "
                 f"pass --no-resume to start fresh")
    return path


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    os.makedirs(CKPT_DIR, exist_ok=True)
    for step in range(1, 7):
        x = torch.randn(16, 4)
        loss = nn.functional.mse_loss(model(x), x.mean(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
        if step == 3:
            # only rank 0 saves (the usual pattern) ...
            if rank == 0:
                torch.save(model.module.state_dict(), os.path.join(CKPT_DIR, f"rank0-step{step}.pt"))
                print(f"rank 0 saved checkpoint at step {step}", flush=True)
            # ... but the "reload to verify" block looks for a per-rank file
            path = resolve_resume(rank, step)
            model.module.load_state_dict(torch.load(path))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
