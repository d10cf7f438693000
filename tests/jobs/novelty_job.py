"""A tiny real job for "new since the last good run" (tests/test_novelty_real.py), in three ways:

- ``python novelty_job.py [--fail]``: no torch; steps and losses, then with --fail a custom
  ``logging.error`` and ``sys.exit(1)``, a failure no rule knows;
- ``torchrun --nproc-per-node 2 novelty_job.py --gloo [--warn-hang]``: two gloo ranks all-reducing
  each step; with --warn-hang rank 1 first logs a warning no good run printed, then never joins the
  next collective, and the gloo timeout (5 s) ends the job.
"""
import argparse
import logging
import sys
import time

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
log = logging.getLogger("trainer")
parser = argparse.ArgumentParser()
parser.add_argument("--fail", action="store_true")
parser.add_argument("--gloo", action="store_true")
parser.add_argument("--warn-hang", action="store_true")
args = parser.parse_args()

if not args.gloo:
    for step in range(5):
        print(f"step {step} loss {2.0 / (step + 1):.4f} lr 3e-4", flush=True)
    if args.fail:
        log.error("shard %d checksum mismatch: expected %s got %s", 7, "a1b2c3d4", "ffee0011")
        sys.exit(1)
    print("training done", flush=True)
    sys.exit(0)

import datetime  # noqa: E402  (torch only for the gloo variant)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
rank = dist.get_rank()
for step in range(4):
    if args.warn_hang and rank == 1 and step == 2:
        log.warning("prefetch queue for shard %d is empty; waiting for the reader", 3)
        time.sleep(60)
    value = torch.ones(4) * step
    dist.all_reduce(value)
    print(f"[rank{rank}] step {step} loss {1.0 / (step + 1):.4f}", flush=True)
dist.destroy_process_group()
