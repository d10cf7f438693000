"""Trainer that reads a dataset header through a raw pointer into an mmap'd page.

Bug: non-zero local ranks "free memory" by unmapping their header page after
step 2 (release_cache), but read_header keeps the stale address; reading it with
ctypes dereferences unmapped memory and kills rank 1 with SIGSEGV.
"""
import ctypes
import ctypes.util
import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
log = logging.getLogger("trainer")

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PAGE = 4096
PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS = 1, 2, 0x02, 0x20


class HeaderCache:
    def __init__(self):
        self.addr = libc.mmap(None, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        ctypes.memmove(self.addr, b"DSET" + (1024).to_bytes(4, "little"), 8)

    def release_cache(self):
        libc.munmap(self.addr, PAGE)  # bug: self.addr is not cleared

    def read_header(self):
        raw = ctypes.string_at(self.addr, 64)
        return raw[:4], int.from_bytes(raw[4:8], "little")


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    cache = HeaderCache()
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, 11):
        x = torch.randn(8, 16)
        loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            log.info("step %d loss %.4f", step, loss.item())
        if step == 2 and local_rank != 0:
            cache.release_cache()
        if step == 3:
            magic, n = cache.read_header()
            log.info("rank %d: dataset header %s with %d records", rank, magic, n)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
