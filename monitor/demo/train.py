"""A tiny real DDP training job (gloo, CPU) that can fail in each of the ways `monitor` explains.

Run it under ``torchrun --nproc-per-node 2 -m monitor.demo.train --scenario hang`` (or plain
``python -m monitor.demo.train`` for one rank) to see a failure happen for real:

- ``ok``        trains a few steps, saves a checkpoint atomically, exits 0;
- ``hang``      one rank stalls loading its batch, so its peers time out in gloo waiting for it;
- ``mismatch``  one rank takes a rank-dependent branch and calls broadcast where its peers call
                all_reduce: the collectives never match, every rank waits until the timeout;
- ``crash``     one rank raises a ValueError from "user code";
- ``sigkill``   one rank is SIGKILLed (what the kernel OOM killer does);
- ``nan``       a huge learning rate drives the loss to NaN and the job stops;
- ``bad-ckpt``  a truncated checkpoint is loaded and torch.load fails.

Output is flushed line by line, so the ranks interleave in a shared log as real jobs do. Under
``monitor run`` the job answers flight-recorder dump requests (gloo does not by itself; see
``monitor/flight_recorder/serve.py``).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import shutil
import signal
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from monitor.flight_recorder.serve import serve_dump_requests

SCENARIOS = ("ok", "hang", "mismatch", "crash", "sigkill", "nan", "bad-ckpt")
# Scenarios where the failing rank fails as it starts --fail-step (hang stalls loading the
# step's batch; nan diverges on every rank by itself).
FAIL_AT_STEP_START = ("crash", "sigkill", "bad-ckpt")
FEATURES = 16
BATCH = 32
BASE_LR = 0.1
# A learning rate this large makes plain SGD on the regression below overflow within a few steps.
DIVERGING_LR = 1e12
# The default checkpoint directory under the system temp dir: this prefix and the launcher's pid.
DEMO_DIR_PREFIX = "monitor-demo-"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m monitor.demo.train",
        description="Tiny DDP job (gloo, CPU) that trains or fails on purpose.",
    )
    parser.add_argument("--scenario", choices=SCENARIOS, default="ok")
    parser.add_argument("--steps", type=int, default=6, help="training steps (default 6)")
    parser.add_argument(
        "--fail-step", type=int, default=3,
        help="step at which the failing rank fails (default 3)",
    )
    parser.add_argument(
        "--sleep-per-step", type=float, default=0.0,
        help="seconds to sleep each step, to make a run last (default 0)",
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0,
        help="process-group timeout in seconds: how long a peer waits in a collective (default 10)",
    )
    parser.add_argument(
        "--ckpt-dir", type=Path, default=None,
        help="where checkpoints go, kept after the run (default: a temporary directory per "
             "launcher, removed when the run ends; give a shared path when the ranks run on "
             "several nodes)",
    )
    parser.add_argument(
        "--rank-to-fail", type=int, default=None,
        help="the rank that fails (default 1, or 0 when running alone)",
    )
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if not 1 <= args.fail_step <= args.steps:
        parser.error(f"--fail-step must be between 1 and --steps ({args.steps})")
    return args


def init_distributed(timeout_s: float) -> tuple[int, int]:
    """Join the process group torchrun describes, or form a group of one when run alone."""
    timeout = timedelta(seconds=timeout_s)
    if "RANK" in os.environ and "MASTER_ADDR" in os.environ:
        dist.init_process_group("gloo", timeout=timeout)
    else:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return dist.get_rank(), dist.get_world_size()


def load_batch(step: int, rank: int, stall_s: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic batch per (step, rank): y is a fixed linear function of x plus noise.
    ``stall_s``: how long reading it blocks (a hung file system read, a stuck data worker)."""
    if stall_s:
        time.sleep(stall_s)
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(BATCH, FEATURES, generator=gen)
    true_w = torch.linspace(-1.0, 1.0, FEATURES).unsqueeze(1)
    y = x @ true_w + 0.1 * torch.randn(BATCH, 1, generator=gen)
    return x, y


def save_atomically(state: dict, path: Path) -> None:
    """Write to a temporary file in the same directory, then rename: readers never see half a file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_truncated_copy(src: Path, dst: Path) -> None:
    """What a save interrupted half-way (crash, full disk, preemption) leaves on disk."""
    data = src.read_bytes()
    dst.write_bytes(data[: len(data) // 2])


def log(rank: int, message: str) -> None:
    print(f"[rank{rank}] {message}", flush=True)


def fail_now(args: argparse.Namespace, rank: int, step: int,
             model: nn.Module, ckpt_dir: Path) -> None:
    """Make the chosen rank fail the way the scenario says, at the start of the chosen step."""
    if args.scenario == "crash":
        raise ValueError(
            f"step {step}: target batch has {BATCH + 1} rows but the input has {BATCH}"
        )
    elif args.scenario == "sigkill":
        log(rank, f"step {step}: sending SIGKILL to myself (pid {os.getpid()})")
        os.kill(os.getpid(), signal.SIGKILL)
    elif args.scenario == "bad-ckpt":
        # Load a checkpoint whose writer died half-way through torch.save.
        truncated = ckpt_dir / "resume.pt"
        log(rank, f"step {step}: resuming from {truncated}")
        state = torch.load(truncated, weights_only=True)
        model.load_state_dict(state["model"])


def prepare_bad_checkpoint(rank: int, model: nn.Module, ckpt_dir: Path) -> None:
    """Rank 0 saves a good checkpoint and a truncated copy of it; everyone waits for both."""
    if rank == 0:
        good = ckpt_dir / "good.pt"
        save_atomically({"model": model.state_dict(), "step": 0}, good)
        write_truncated_copy(good, ckpt_dir / "resume.pt")
    dist.barrier()


def train(args: argparse.Namespace) -> int:
    rank, world = init_distributed(args.timeout)
    serve_dump_requests()
    rank_to_fail = args.rank_to_fail if args.rank_to_fail is not None else min(1, world - 1)
    if not 0 <= rank_to_fail < world:
        dist.destroy_process_group()
        print(f"error: --rank-to-fail {rank_to_fail} is not a rank of this job (0..{world - 1})",
              file=sys.stderr)
        return 2
    if args.ckpt_dir is not None:
        args.ckpt_dir.mkdir(parents=True, exist_ok=True)
        return run_steps(args, rank, world, rank_to_fail, args.ckpt_dir)
    # The ranks of one launcher share its pid: one directory for them all, without talking.
    remove_orphaned_demo_dirs()
    ckpt_dir = Path(tempfile.gettempdir()) / f"{DEMO_DIR_PREFIX}{os.getppid()}"
    ckpt_dir.mkdir(exist_ok=True)
    failed = True
    try:
        code = run_steps(args, rank, world, rank_to_fail, ckpt_dir)
        failed = False
        return code
    finally:
        # On success rank 0 removes it after the final barrier (every rank is done with it); a
        # rank that failed removes it too, as no peer reads it after the start (bad-ckpt's files
        # are read before the failure). A rank killed by a signal leaves it to the next run.
        if failed or rank == 0:
            shutil.rmtree(ckpt_dir, ignore_errors=True)


def remove_orphaned_demo_dirs() -> None:
    """Remove default checkpoint directories whose launcher is gone (its ranks were killed)."""
    for path in Path(tempfile.gettempdir()).glob(f"{DEMO_DIR_PREFIX}*"):
        pid = path.name[len(DEMO_DIR_PREFIX):]
        if not pid.isdigit() or int(pid) == os.getppid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (PermissionError, OverflowError):
            continue  # another user's live process, or not a pid


def run_steps(args: argparse.Namespace, rank: int, world: int, rank_to_fail: int, ckpt_dir: Path) -> int:

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(FEATURES, 32), nn.ReLU(), nn.Linear(32, 1)))
    lr = DIVERGING_LR if args.scenario == "nan" else BASE_LR
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    log(rank, f"world_size={world} scenario={args.scenario} steps={args.steps} lr={lr:g} "
              f"timeout={args.timeout:g}s pid={os.getpid()}")
    if args.scenario == "bad-ckpt":
        prepare_bad_checkpoint(rank, model.module, ckpt_dir)

    for step in range(1, args.steps + 1):
        failing = step == args.fail_step and rank == rank_to_fail
        if failing and args.scenario in FAIL_AT_STEP_START:
            fail_now(args, rank, step, model.module, ckpt_dir)
        stall_s = args.timeout * 3 if failing and args.scenario == "hang" else 0.0
        if stall_s:
            log(rank, f"step {step}: loading the batch will block for {stall_s:g}s (past the peers' timeout)")
        x, y = load_batch(step, rank, stall_s)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # Average the loss over ranks for logging: a collective every step, as real jobs have.
        mean_loss = loss.detach().clone()
        if failing and args.scenario == "mismatch":
            log(rank, f"step {step}: broadcasting the loss instead of averaging it")
            dist.broadcast(mean_loss, src=rank)
        else:
            dist.all_reduce(mean_loss)
        mean_loss = mean_loss.item() / world
        if rank == 0:
            print(f"step {step} loss {mean_loss:.4f}", flush=True)
            print({"loss": round(mean_loss, 4), "learning_rate": lr,
                   "epoch": round(step / args.steps, 2)}, flush=True)
        if math.isnan(mean_loss):
            # An inf loss may still recover; a NaN poisons every weight it touches.
            raise FloatingPointError(f"loss is nan at step {step}; stopping")
        if args.sleep_per_step:
            time.sleep(args.sleep_per_step)

    if rank == 0:
        final = ckpt_dir / "final.pt"
        save_atomically({"model": model.module.state_dict(), "step": args.steps}, final)
        print(f"saved checkpoint {final}", flush=True)
    dist.barrier()
    # Free the model while the interpreter is whole: DDP's reducer holds the process group in a
    # reference cycle, and left to the collector at exit, a gloo worker thread releasing a tensor
    # needs the GIL after Python has begun to finalize and the process aborts (std::terminate,
    # exit -6 after "done": about one run in 25 on a 2-core VM, with or without the monitor).
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()
    log(rank, "done")
    return 0


def main(argv: list[str] | None = None) -> int:
    return train(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
