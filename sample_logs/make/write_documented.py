"""Write the sample logs of failures this machine cannot produce (GPUs, NCCL, SLURM, wandb...).

    python sample_logs/make/write_documented.py     # (re)writes sample_logs/documented/

The error texts are the documented ones, quoted from the projects' sources and from real logs
(see /work/shared/research/failure-diagnosis.md, sections 2.x, and the comment on each sample).
Around them is the noise real jobs print: NCCL INFO lines, tqdm bars redrawn with \\r, warnings,
colour codes, HF Trainer dicts, glog-prefixed C++ lines, interleaved ranks, and the launcher's
own prefixes: torchrun --tee (`[default3]:`), srun --label (`3: `), mpirun --tag-output
(`[1,3]<stderr>:`), or one file per rank in torchrun's --log-dir layout. Output is
deterministic (fixed seed), so rerunning the script leaves the files unchanged.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "documented"
TORCH_LIB = "/usr/local/lib/python3.10/dist-packages/torch"
TORCHRUN_HEADER = [
    "W0302 09:58:11.512000 139882 torch/distributed/run.py:793] ",
    "W0302 09:58:11.512000 139882 torch/distributed/run.py:793] *****************************************",
    "W0302 09:58:11.512000 139882 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system being overloaded, please further tune the variable for optimal performance in your application as needed. ",
    "W0302 09:58:11.512000 139882 torch/distributed/run.py:793] *****************************************",
]


class Log:
    """Lines of one log file; `add` puts a rank's line behind the launcher's prefix."""

    def __init__(self, style: str) -> None:
        self.style = style
        self.lines: list[str] = []

    def prefix(self, rank: int, stream: str = "stderr") -> str:
        return {
            "tee": f"[default{rank}]:",
            "srun": f"{rank}: ",
            "mpirun": f"[1,{rank}]<{stream}>:",
            "plain": "",
        }[self.style]

    def add(self, rank: int, *texts: str, stream: str = "stderr") -> None:
        for text in texts:
            self.lines.append(self.prefix(rank, stream) + text)

    def raw(self, *texts: str) -> None:
        self.lines.extend(texts)

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(("\n".join(self.lines) + "\n").encode("utf-8"))


def excepthook(rank: int, lines: list[str]) -> list[str]:
    """PyTorch's excepthook after init_process_group prefixes every traceback line."""
    return [f"[rank{rank}]: {line}" if line else f"[rank{rank}]:" for line in lines]


def traceback(frames: list[tuple[str, int, str, str]], *final: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for file, line, func, code in frames:
        out.append(f'  File "{file}", line {line}, in {func}')
        out.append(f"    {code}")
    return out + list(final)


TRAIN_FRAMES = [
    ("/home/alice/llm/train.py", 412, "<module>", "main()"),
    ("/home/alice/llm/train.py", 388, "main", "trainer.fit(model, loader)"),
    ("/home/alice/llm/trainer.py", 201, "fit", "loss = self.training_step(batch)"),
]
BACKWARD_FRAMES = TRAIN_FRAMES + [
    ("/home/alice/llm/trainer.py", 164, "training_step", "self.scaler.scale(loss).backward()"),
    (f"{TORCH_LIB}/_tensor.py", 581, "backward", "torch.autograd.backward("),
    (f"{TORCH_LIB}/autograd/__init__.py", 347, "backward", "_engine_run_backward("),
    (f"{TORCH_LIB}/autograd/graph.py", 825, "_engine_run_backward", "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass"),
]


def nccl_init(log: Log, rank: int, world: int, host: str = "gpu-node-04", pid: int = 0,
              version: str = "2.21.5+cuda12.4") -> None:
    pid = pid or 51200 + rank
    dev = rank % 8
    tag = f"{host}:{pid}:{pid} [{dev}]"
    if rank == 0:
        log.add(rank, f"{tag} NCCL INFO Bootstrap : Using ib0:10.0.3.{15 + rank // 8}<0>",
                f"{tag} NCCL INFO NCCL version {version}")
    log.add(rank,
            f"{tag} NCCL INFO cudaDriverVersion 12040",
            f"{tag} NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.3.15<0>",
            f"{host}:{pid}:{pid + 98} [{dev}] NCCL INFO Setting affinity for GPU {dev} to ffff,ffffffff",
            f"{host}:{pid}:{pid + 98} [{dev}] NCCL INFO comm 0x55d4c8a0 rank {rank} nranks {world} cudaDev {dev} nvmlDev {dev} busId {0x18 + 0x10 * dev:x}000 commId 0x8f2a7c01d3e4b5a6 - Init COMPLETE")


def tqdm_line(total: int, upto: int, rate: float) -> str:
    parts = []
    for done in range(0, upto + 1, max(1, upto // 4)):
        pct = done * 100 // total
        bar = ("█" * (pct // 10)).ljust(10)
        parts.append(f"{pct:3d}%|{bar}| {done}/{total} [00:{done // 60:02d}<1:21:10, {rate:5.2f}it/s]")
    return "\r" + "\r".join(parts)


def hf_logs(log: Log, rank: int, start: float, steps: int, rng: random.Random, epoch0: float = 0.0) -> None:
    loss = start
    for i in range(steps):
        loss = max(0.05, loss * (0.97 + 0.02 * rng.random()))
        log.add(rank, f"{{'loss': {loss:.4f}, 'grad_norm': {0.8 + rng.random():.4f}, 'learning_rate': {5e-05 * (1 - i / 100):.4e}, 'epoch': {epoch0 + 0.01 * (i + 1):.2f}}}", stream="stdout")


def torchrun_summary(entry: str, failures: list[tuple[int, int, int, str]], host: str = "gpu-node-04",
                     when: str = "2024-03-02_10:21:44") -> list[str]:
    """torchelastic's ChildFailedError block; failures: (rank, exitcode, pid, traceback text)."""
    root, others = failures[0], failures[1:]
    out = [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{TORCH_LIB}/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper',
        "    return f(*args, **kwargs)",
        f'  File "{TORCH_LIB}/distributed/run.py", line 919, in main',
        "    run(args)",
        f'  File "{TORCH_LIB}/distributed/launcher/api.py", line 263, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60,
        f"{entry} FAILED",
        "-" * 60,
        "Failures:",
    ]

    def block(index: int, failure: tuple[int, int, int, str]) -> list[str]:
        rank, code, pid, tb = failure
        signame = {-6: "  (SIGABRT)", -9: "  (SIGKILL)", -11: "  (SIGSEGV)", -15: "  (SIGTERM)"}.get(code, " ")
        return [
            f"[{index}]:",
            f"  time      : {when}",
            f"  host      : {host}",
            f"  rank      : {rank} (local_rank: {rank % 8})",
            f"  exitcode  : {code} (pid: {pid}){signame}",
            "  error_file: <N/A>",
            f"  traceback : {tb}",
        ]

    if not others:
        out.append("  <NO_OTHER_FAILURES>")
    for i, failure in enumerate(others, start=1):
        out.extend(block(i, failure))
    out += ["-" * 60, "Root Cause (first observed failure):"]
    out.extend(block(0, root))
    out.append("=" * 60)
    return out


NO_TB = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def sig_tb(code: int, pid: int) -> str:
    names = {-6: "SIGABRT", -9: "SIGKILL", -11: "SIGSEGV", -15: "SIGTERM"}
    return f"Signal {-code} ({names[code]}) received by PID {pid}"


def watchdog_timeout_lines(rank: int, seq: int, op: str, numel: int, timeout_ms: int, ran_ms: int,
                           enqueued: int, completed: int, stamp: str, era: str = "2.5") -> list[str]:
    """ProcessGroupNCCL's watchdog lines for one rank, as 2.4 or 2.5+ print them (all prefixed)."""
    work = f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={timeout_ms})"
    g = f"[rank{rank}]:[E{stamp}"
    if era == "2.5":
        pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
        lines = [
            f"{g}.118034521 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran_ms} milliseconds before timing out.",
            f"{g}.118301876 ProcessGroupNCCL.cpp:2271] {pg}  failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {enqueued}, last completed work: {completed}",
            f"{g}.118321470 ProcessGroupNCCL.cpp:670] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
            f"{g}.118330112 ProcessGroupNCCL.cpp:684] {pg} First PG on this rank to signal dumping.",
        ]
    else:
        pg = f"[PG 0 (default_pg) Rank {rank}]"
        lines = [
            f"{g}.832146912 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran_ms} milliseconds before timing out.",
            f"{g}.833575187 ProcessGroupNCCL.cpp:1664] {pg} Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {enqueued}, last completed NCCL work: {completed}.",
            f"{g}.833621509 ProcessGroupNCCL.cpp:1709] {pg} Timeout at NCCL work: {seq}, last enqueued NCCL work: {enqueued}, last completed NCCL work: {completed}.",
        ]
    lines += [
        f"{g}.833637681 ProcessGroupNCCL.cpp:621] [Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
        f"{g}.833650825 ProcessGroupNCCL.cpp:627] [Rank {rank}] To avoid data inconsistency, we are taking the entire process down.",
        f"{g}.838048403 ProcessGroupNCCL.cpp:1515] {pg} Process group watchdog thread terminated with exception: [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran_ms} milliseconds before timing out.",
    ]
    cpp = [
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:609 (most recent call first):",
        f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7fbeb989ef86 in {TORCH_LIB}/lib/libc10.so)",
        f"frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x7fbebab8bf22 in {TORCH_LIB}/lib/libtorch_cuda.so)",
        f"frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x233 (0x7fbebab92963 in {TORCH_LIB}/lib/libtorch_cuda.so)",
        f"frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10c (0x7fbebab94d4c in {TORCH_LIB}/lib/libtorch_cuda.so)",
        "frame #4: <unknown function> + 0xdc253 (0x7fbf1d214b75 in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        "frame #5: <unknown function> + 0x94ac3 (0x7fbf2c4b0ea5 in /lib/x86_64-linux-gnu/libc.so.6)",
        "frame #6: clone + 0x44 (0x7fbf2bad0b0d in /lib/x86_64-linux-gnu/libc.so.6)",
        "",
    ]
    lines += [f"[rank{rank}]:{line}" for line in cpp]
    lines += [
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {pg} Process group watchdog thread terminated with exception: [Rank {rank}] Watchdog caught collective operation timeout: {work} ran for {ran_ms} milliseconds before timing out.",
    ]
    return lines


# --------------------------------------------------------------------------------------------
# The samples. Each function writes one file or directory under OUT.


def cuda_oom_tee_8ranks() -> None:
    """PyTorch 2.4 wording (c10/cuda/CUDACachingAllocator.cpp, research 2.1); torchrun --tee 3."""
    rng = random.Random(1)
    log = Log("tee")
    log.raw(*TORCHRUN_HEADER)
    for r in range(8):
        nccl_init(log, r, 8)
    log.add(0, "/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:1399: FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', args...)` instead.",
            "  with device_autocast_ctx, torch.cpu.amp.autocast(**cpu_autocast_kwargs), recompute_context:  # type: ignore[attr-defined]")
    log.add(0, tqdm_line(5000, 1200, 1.02))
    hf_logs(log, 0, 2.9, 6, rng)
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.15 GiB "
           "of which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.02 GiB memory in use. Of the allocated "
           "memory 70.01 GiB is allocated by PyTorch, and 6.31 GiB is reserved by PyTorch but unallocated. If reserved but "
           "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
           "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    log.add(3, *excepthook(3, traceback(BACKWARD_FRAMES, oom)))
    log.add(1, f"{tqdm_line(5000, 1201, 1.01)}")
    for r in (0, 1, 2, 4, 5, 6, 7):
        log.add(r, *watchdog_timeout_lines(r, 14417, "ALLREDUCE", 26214400, 600000, 600081 + r, 14417, 14416, "0302 10:21:43", era="2.4"))
    log.raw("W0302 10:21:44.001000 139882 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 140001 closing signal SIGTERM",
            "E0302 10:21:44.310000 139882 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 3 (pid: 140003) of binary: /usr/bin/python3")
    log.raw(*torchrun_summary("train.py", [(3, 1, 140003, NO_TB), (0, -6, 140000, sig_tb(-6, 140000)), (1, -6, 140001, sig_tb(-6, 140001))]))
    log.write(OUT / "cuda-oom-tee-8ranks.log")


def cuda_oom_expandable_already_set() -> None:
    """The job sets expandable_segments (bash -x echo) and still OOMs: the hint must not repeat.
    PyTorch prints its hint even when the setting is on (pytorch/pytorch#173049)."""
    log = Log("plain")
    log.raw("+ export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "+ export NCCL_DEBUG=WARN",
            "+ accelerate launch --num_processes 2 --mixed_precision bf16 finetune.py --model llama-7b --per_device_train_batch_size 8")
    log.raw("The following values were not passed to `accelerate launch` and had defaults used instead:",
            "\t`--num_machines` was set to a value of `1`",
            "\t`--dynamo_backend` was set to a value of `'no'`",
            "To avoid this warning pass in values for each of the problematic parameters or run `accelerate config`.")
    log.raw("Loading checkpoint shards: 100%|██████████| 2/2 [00:04<00:00,  2.21s/it]",
            "Loading checkpoint shards: 100%|██████████| 2/2 [00:04<00:00,  2.24s/it]")
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 1 has a total capacity of 79.15 GiB of "
           "which 1.40 GiB is free. Including non-PyTorch memory, this process has 77.74 GiB memory in use. Of the allocated memory "
           "68.90 GiB is allocated by PyTorch, and 7.02 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
           "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
           "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    frames = [("/home/bob/ft/finetune.py", 233, "<module>", "train()"),
              ("/home/bob/ft/finetune.py", 201, "train", "outputs = model(**batch)"),
              (f"{TORCH_LIB}/nn/modules/module.py", 1736, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)")]
    log.raw(*excepthook(1, traceback(frames, oom)))
    log.raw("W0302 11:02:13.110000 2231 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 2290 closing signal SIGTERM",
            "E0302 11:02:13.375000 2231 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 2291) of binary: /usr/bin/python3")
    log.write(OUT / "cuda-oom-expandable-already-set.log")


def cuda_oom_7b_ddp_accelerate() -> None:
    """A 7B model under DDP on 2 x 48 GB GPUs (user report, shared/seeds/003): one allocation is
    model-sized, so sharding (FSDP) is the fix, not a smaller batch."""
    log = Log("plain")
    log.raw("Loading checkpoint shards: 100%|██████████| 3/3 [00:07<00:00,  2.41s/it]",
            "Loading checkpoint shards: 100%|██████████| 3/3 [00:07<00:00,  2.44s/it]",
            "You are attempting to use Flash Attention 2.0 with a model not initialized on GPU. Make sure to move the model to GPU after initializing it on CPU with `model.to('cuda')`.")
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 26.01 GiB. GPU 0 has a total capacity of 44.43 GiB "
           "of which 18.00 GiB is free. Including non-PyTorch memory, this process has 26.42 GiB memory in use. Of the allocated "
           "memory 25.13 GiB is allocated by PyTorch, and 832.00 MiB is reserved by PyTorch but unallocated. If reserved but "
           "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
           "See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
    frames = [("/home/nan/sft7b/train.py", 144, "<module>", "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)"),
              ("/usr/local/lib/python3.10/dist-packages/accelerate/accelerator.py", 1497, "prepare_model", "model = torch.nn.parallel.DistributedDataParallel("),
              (f"{TORCH_LIB}/nn/parallel/distributed.py", 835, "__init__", "self._ddp_init_helper(")]
    log.raw(*excepthook(0, traceback(frames, oom)))
    log.raw("W0302 15:10:02.301000 880 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 891 closing signal SIGTERM",
            "E0302 15:10:02.522000 880 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 890) of binary: /usr/bin/python3")
    log.raw(*traceback([("/usr/local/bin/accelerate", 8, "<module>", "sys.exit(main())"),
                        ("/usr/local/lib/python3.10/dist-packages/accelerate/commands/launch.py", 1168, "launch_command", "multi_gpu_launcher(args)")],
                       "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "))
    log.raw("=" * 54, "train.py FAILED", "-" * 54, "Failures:", "  <NO_OTHER_FAILURES>", "-" * 54,
            "Root Cause (first observed failure):", "[0]:", "  time      : 2024-03-02_15:10:02", "  host      : ws-48g",
            "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 890)", "  error_file: <N/A>",
            f"  traceback : {NO_TB}", "=" * 54)
    log.write(OUT / "cuda-oom-7b-ddp-accelerate.log")


def checkpoint_read_while_written() -> None:
    """Rank 1 resumes from a checkpoint rank 0 is still writing (user report, shared/seeds/004):
    the truncated zip, then rank 0 waiting 30 min in gloo for rank 1, which went another way."""
    log = Log("plain")
    log.raw("[rank0]: saving checkpoint to output/last.pth",
            "[rank1]: resuming from output/last.pth")
    frames = [("/home/oli/det/tools/train.py", 88, "<module>", "solver.fit()"),
              ("/home/oli/det/engine/solver/_solver.py", 131, "load_resume_state", "state = torch.load(path, map_location='cpu')"),
              (f"{TORCH_LIB}/serialization.py", 1072, "load", "with _open_zipfile_reader(opened_file) as opened_zipfile:")]
    log.raw(*traceback(frames, "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"))
    log.raw("[rank1]: could not resume, starting from scratch")
    log.raw(*excepthook(0, traceback([("/home/oli/det/engine/solver/_solver.py", 212, "train_one_epoch", "dist.all_reduce(loss_value)"),
                                      (f"{TORCH_LIB}/distributed/distributed_c10d.py", 2288, "all_reduce", "work.wait()")],
                                     "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete")))
    log.write(OUT / "checkpoint-read-while-written.log")


def cuda_oom_srun_torch113() -> None:
    """PyTorch <= 2.0 wording (research 2.1) and 1.x watchdog text without NumelIn; srun --label."""
    log = Log("srun")
    for r in range(4):
        log.add(r, f"| distributed init (rank {r}): env://")
    for step in range(3):
        log.add(0, f"Epoch: [3]  [{100 * step:4d}/5004]  eta: 1:02:11  lr: 0.400000  loss: {6.9 - step * 0.01:.4f} (6.9012)  acc1: 0.0000 (0.0781)  time: 0.7412  data: 0.0012  max mem: 14012")
    oom = ("RuntimeError: CUDA out of memory. Tried to allocate 392.00 MiB (GPU 2; 15.77 GiB total capacity; 13.91 GiB "
           "already allocated; 255.12 MiB free; 14.46 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
           "memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and "
           "PYTORCH_CUDA_ALLOC_CONF")
    frames = [("references/classification/train.py", 518, "<module>", "main(args)"),
              ("references/classification/train.py", 348, "main", "train_one_epoch(model, criterion, optimizer, data_loader, device, epoch, args, model_ema, scaler)"),
              ("references/classification/train.py", 36, "train_one_epoch", "output = model(image)")]
    log.add(2, *traceback(frames, oom))
    for r in (0, 1, 3):
        log.add(r, f"[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=48211, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800532 milliseconds before timing out.",
                "[E ProcessGroupNCCL.cpp:414] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data. To avoid this inconsistency, we are taking the entire process down.")
    log.raw("srun: error: gpu-node-02: task 2: Exited with exit code 1",
            "srun: error: gpu-node-02: tasks 0-1,3: Aborted (core dumped)")
    log.write(OUT / "cuda-oom-srun-torch113.out")


def xla_oom_jax_srun() -> None:
    """JAX multi-process on SLURM; XLA's RESOURCE_EXHAUSTED text (research 2.1)."""
    log = Log("srun")
    for r in range(2):
        log.add(r, f"I0302 10:00:0{r}.118000 140211 distributed.py:90] Starting JAX distributed service on 10.0.3.15:1234" if r == 0 else
                f"I0302 10:00:0{r}.201000 140377 distributed.py:102] Connecting to JAX distributed service on 10.0.3.15:1234")
        log.add(r, f"jax.devices(): {[f'cuda({i})' for i in range(8 * r, 8 * r + 8)]}".replace("'", ""))
    log.add(0, "step 0: loss=10.8231 tokens/s=0")
    final = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 33762398024 bytes."
    frames = [("/home/carol/jaxlm/main.py", 97, "<module>", "app.run(main)"),
              ("/home/carol/jaxlm/main.py", 81, "main", "state, metrics = p_train_step(state, batch)")]
    log.add(1, *traceback(frames, final))
    log.add(1, "--------------------",
            "For simplicity, JAX has removed its internal frames from the traceback of the following exception. Set JAX_TRACEBACK_FILTERING=off to include these.")
    log.raw("srun: error: gpu-node-09: task 1: Exited with exit code 1",
            "slurmstepd: error: *** STEP 77102.0 ON gpu-node-08 CANCELLED AT 2024-03-02T10:03:55 ***")
    log.write(OUT / "xla-oom-jax-srun.out")


def host_oom_slurm() -> None:
    """SLURM >= 23.02 cgroup OOM text and srun's task line (SchedMD/slurm, research 2.8)."""
    log = Log("srun")
    for r in range(4):
        log.add(r, f"[rank {r}] loading dataset shard /data/tok/shard-{r:03d}.arrow into memory (41.2 GB)")
    log.add(0, "epoch 0 step 10 loss 7.1142 lr 3.0e-05")
    log.raw("slurmstepd: error: Detected 1 oom_kill event in StepId=81234.0. Some of the step tasks have been OOM Killed.",
            "srun: error: gpu-node-07: task 3: Out Of Memory",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            "slurmstepd: error: *** STEP 81234.0 ON gpu-node-07 CANCELLED AT 2024-03-02T10:15:07 ***",
            "srun: error: gpu-node-07: tasks 0-2: Killed")
    log.write(OUT / "host-oom-slurm.out")


def host_oom_dmesg() -> None:
    """A torchrun job whose rank 5 is SIGKILLed, and the node's kernel log naming the OOM kill."""
    target = OUT / "host-oom-dmesg"
    shutil.rmtree(target, ignore_errors=True)
    log = Log("plain")
    log.raw(*TORCHRUN_HEADER)
    log.raw("step 400 loss 3.1022", "step 410 loss 3.0871")
    log.raw("W0302 10:44:02.101000 7001 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 7010 closing signal SIGTERM",
            "E0302 10:44:02.633000 7001 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 7015) of binary: /usr/bin/python3")
    log.raw(*torchrun_summary("train.py", [(5, -9, 7015, sig_tb(-9, 7015)), (0, -15, 7010, sig_tb(-15, 7010))], when="2024-03-02_10:44:02"))
    log.write(target / "torchrun.log")
    kern = Log("plain")
    kern.raw("Mar 02 10:43:58 gpu-node-04 kernel: python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
             "Mar 02 10:43:58 gpu-node-04 kernel: Mem-Info:",
             "Mar 02 10:44:01 gpu-node-04 kernel: Out of memory: Killed process 7015 (python3) total-vm:212841116kB, anon-rss:198234520kB, file-rss:81920kB, shmem-rss:0kB, UID:1001 pgtables:401204kB oom_score_adj:0",
             "Mar 02 10:44:01 gpu-node-04 kernel: oom_reaper: reaped process 7015 (python3), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB")
    kern.write(target / "kern.log")


def nccl_timeout_hang_tee_8ranks() -> None:
    """Rank 7 never reaches the all_reduce (stuck reading data); the others time out (2.5+ texts)."""
    rng = random.Random(7)
    log = Log("tee")
    log.raw(*TORCHRUN_HEADER)
    for r in range(8):
        nccl_init(log, r, 8, version="2.21.5+cuda12.4")
    hf_logs(log, 0, 2.4, 4, rng)
    log.add(7, "[data] fetching shard 17/64 from s3://corpus/tok/shard-0017.bin", stream="stdout")
    for r in range(7):
        log.add(r, *watchdog_timeout_lines(r, 2816, "ALLREDUCE", 26214400, 600000, 600034 + r, 2816, 2815, "1121 10:40:02", era="2.5"))
    log.raw("W1121 10:40:03.001000 139882 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 140007 closing signal SIGTERM",
            "E1121 10:40:03.510000 139882 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 0 (pid: 140000) of binary: /usr/bin/python3")
    log.raw(*torchrun_summary("pretrain.py", [(0, -6, 140000, sig_tb(-6, 140000)), (1, -6, 140001, sig_tb(-6, 140001))], when="2024-11-21_10:40:03"))
    log.write(OUT / "nccl-timeout-hang-tee-8ranks.log")


def nccl_timeout_rank0_checkpoint_logdir() -> None:
    """Rank 0 saves a big checkpoint while ranks 1-3 wait in the next all_reduce (2.4 texts);
    one file per rank in torchrun's --log-dir layout."""
    target = OUT / "nccl-timeout-rank0-saving-logdir"
    shutil.rmtree(target, ignore_errors=True)
    base = target / "none_8ylk2r1c" / "attempt_0"
    for r in range(4):
        out = Log("plain")
        err = Log("plain")
        if r == 0:
            out.raw("step 2990 loss 1.9021", "step 3000 loss 1.8977")
            out.raw("saving checkpoint to /shared/ckpt/step_3000 (fp32 weights + optimizer state, 58 GB)")
        else:
            err.raw(*watchdog_timeout_lines(r, 9001, "ALLREDUCE", 1, 600000, 600017, 9001, 9000, "0302 11:12:41", era="2.4"))
        out.write(base / str(r) / "stdout.log")
        err.write(base / str(r) / "stderr.log")
    launcher = Log("plain")
    launcher.raw(*TORCHRUN_HEADER)
    launcher.raw("W0302 11:12:42.001000 9100 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 9110 closing signal SIGTERM",
                 "E0302 11:12:42.310000 9100 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) local_rank: 1 (pid: 9111) of binary: /usr/bin/python3")
    launcher.raw(*torchrun_summary("train.py", [(1, -6, 9111, sig_tb(-6, 9111)), (0, -15, 9110, sig_tb(-15, 9110))], when="2024-03-02_11:12:42"))
    launcher.write(target / "torchrun.log")


def nccl_timeout_flight_recorder_srun() -> None:
    """The job already runs with the flight recorder and desync debug on (bash -x echoes them), so
    the remedy must not suggest them again; rank 3 never reaches the collective (2.5+ texts)."""
    log = Log("srun")
    log.raw("+ export TORCH_NCCL_TRACE_BUFFER_SIZE=2000",
            "+ export TORCH_NCCL_DUMP_ON_TIMEOUT=1",
            "+ export TORCH_NCCL_DESYNC_DEBUG=1",
            "+ srun --label python pretrain.py --config cfg/7b.yaml")
    for r in range(4):
        log.add(r, f"[rank{r}] dataset ready: 1024 batches per epoch")
    log.add(0, "iter 500 loss 2.3391 grad_norm 0.88 lr 2.9e-04")
    log.add(3, "[rank3] evaluating on 20000 held-out samples (rank 3 only)")
    for r in range(3):
        lines = watchdog_timeout_lines(r, 501, "ALLREDUCE", 1, 600000, 600044, 501, 500, "0302 19:40:11", era="2.5")
        lines[2] = f"[rank{r}]:[E0302 19:40:11.118321470 ProcessGroupNCCL.cpp:801] Stack trace of the failed collective: "
        lines[3:3] = [f"#0 all_reduce from {TORCH_LIB}/distributed/distributed_c10d.py:2501",
                      "#1 train_step from /home/kim/pretrain.py:212"]
        log.add(r, *lines)
    log.raw("srun: error: gpu-node-05: tasks 0-2: Aborted (core dumped)",
            "srun: error: gpu-node-05: task 3: Terminated")
    log.write(OUT / "nccl-timeout-flight-recorder-srun.out")


def nccl_unique_id_wait_srun() -> None:
    """Rank 0 evaluates alone before the first collective; the others wait for its NCCL id in the
    store and give up (ProcessGroupNCCL.cpp's broadcastUniqueNCCLID text)."""
    log = Log("srun")
    for r in range(4):
        log.add(r, f"[rank{r}] model ready")
    log.add(0, "[rank0] running the baseline evaluation on 50000 samples before training")
    for r in (2, 1, 3):
        log.add(r, *excepthook(r, traceback(TRAIN_FRAMES + [(f"{TORCH_LIB}/distributed/distributed_c10d.py", 2501, "all_reduce", "work = group.allreduce([tensor], opts)")],
                                            f"torch.distributed.DistBackendError: [{r}] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: wait timeout after 600000ms, keys: /default_pg/0//cuda//0",
                                            "Exception raised from recvBytes at ../torch/csrc/distributed/c10d/Utils.hpp:671 (most recent call first):",
                                            f"frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3c6e1a1f86 in {TORCH_LIB}/lib/libc10.so)")))
    log.raw("srun: error: gpu-node-02: tasks 1-3: Exited with exit code 1",
            "srun: error: gpu-node-02: task 0: Terminated")
    log.write(OUT / "nccl-unique-id-wait-srun.out")


def cuda_illegal_access_mpirun() -> None:
    """Newest wording (torch.AcceleratorError, research 2.9); mpirun --tag-output; peers' NCCL errors."""
    log = Log("mpirun")
    for r in range(4):
        log.add(r, f"rank {r}/4 on gpu-node-11 local_rank={r}", stream="stdout")
    final = [
        "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
        "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    ]
    frames = [("/opt/app/train_moe.py", 301, "<module>", "main()"),
              ("/opt/app/train_moe.py", 274, "main", "out = fused_moe(hidden, router_logits, experts)"),
              ("/opt/app/kernels/moe.py", 88, "fused_moe", "torch.cuda.synchronize()")]
    log.add(2, *excepthook(2, traceback(frames, *final)))
    for r in (0, 1, 3):
        log.add(r, *excepthook(r, traceback(TRAIN_FRAMES + [(f"{TORCH_LIB}/distributed/distributed_c10d.py", 2501, "all_reduce", "work = group.allreduce([tensor], opts)")],
                                            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2042, remote process exited or there was a network error, NCCL version 2.26.2",
                                            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
                                            "Last error:",
                                            "socketProgress: Connection closed by remote peer gpu-node-11<33412>")))
    log.raw("--------------------------------------------------------------------------",
            "Primary job  terminated normally, but 1 process returned",
            "a non-zero exit code. Per user-direction, the job has been aborted.",
            "--------------------------------------------------------------------------",
            "--------------------------------------------------------------------------",
            "mpirun detected that one or more processes exited with non-zero status, thus causing",
            "the job to be terminated. The first process to do so was:",
            "",
            "  Process name: [[41822,1],2]",
            "  Exit code:    1",
            "--------------------------------------------------------------------------")
    log.write(OUT / "cuda-illegal-access-mpirun.log")


def cuda_device_assert_tee() -> None:
    """nll_loss kernel assert printed per thread, then the CUDA error (research 2.9)."""
    log = Log("tee")
    log.raw(*TORCHRUN_HEADER)
    for r in range(8):
        nccl_init(log, r, 8)
    for t in range(24, 32):
        log.add(6, f"../aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [{t},0,0] Assertion `t >= 0 && t < n_classes` failed.")
    final = [
        "RuntimeError: CUDA error: device-side assert triggered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        "",
    ]
    frames = TRAIN_FRAMES + [("/home/alice/llm/trainer.py", 150, "training_step", "loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))")]
    log.add(6, *excepthook(6, traceback(frames, *final)))
    for r in (0, 2):
        log.add(r, *watchdog_timeout_lines(r, 771, "ALLREDUCE", 26214400, 600000, 600012, 771, 770, "0302 12:01:10", era="2.5"))
    log.raw("E0302 12:01:11.300000 777 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 6 (pid: 7806) of binary: /usr/bin/python3")
    log.raw(*torchrun_summary("train.py", [(6, 1, 7806, NO_TB)], when="2024-03-02_12:01:11"))
    log.write(OUT / "cuda-device-assert-tee-8ranks.log")


def nccl_ib_error_srun() -> None:
    """IB completion error on task 9 (NVIDIA/nccl net_ib, research 2.3); peers see ncclRemoteError."""
    log = Log("srun")
    for r in (0, 9):
        nccl_init(log, r, 16, host="gpu-node-0" + ("1" if r < 8 else "2"))
    log.add(0, "iteration     1200/  100000 | consumed samples:      1228800 | elapsed time per iteration (ms): 912.4 | learning rate: 2.999E-04 | lm loss: 2.811834E+00 | loss scale: 1.0 | grad norm: 0.412 |")
    log.add(9, "gpu-node-02:88121:88390 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.3.17<39914> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.3.16 remoteGids::ffff:10.0.3.17 hca mlx5_2",
            "gpu-node-02:88121:88390 [1] NCCL INFO transport/net.cc:1293 -> 6")
    for r in (1, 4, 12):
        log.add(r, *excepthook(r, traceback(TRAIN_FRAMES + [(f"{TORCH_LIB}/distributed/distributed_c10d.py", 2288, "all_reduce", "work.wait()")],
                                            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5",
                                            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
                                            "Last error:",
                                            "NET/IB : Got completion from peer 10.0.3.16<53112> with status=IBV_WC_WR_FLUSH_ERR(5) opcode=0 len=0 vendor err 244 (Recv)")))
    log.raw("srun: error: gpu-node-01: tasks 1,4: Exited with exit code 1",
            "srun: error: gpu-node-02: task 12: Exited with exit code 1")
    log.write(OUT / "nccl-ib-error-srun.out")


def nccl_duplicate_gpu() -> None:
    """Two ranks on one GPU: NCCL's invalid usage (research 2.3)."""
    log = Log("plain")
    log.raw(*TORCHRUN_HEADER)
    log.raw("gpu-ws:4410:4410 [0] NCCL INFO NCCL version 2.20.5+cuda12.4",
            "gpu-ws:4411:4488 [0] init.cc:871 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000")
    for r in (1, 0):
        log.raw(*excepthook(r, traceback([("/home/dan/ddp.py", 41, "<module>", "model = DDP(model, device_ids=[0])"),
                                           (f"{TORCH_LIB}/nn/parallel/distributed.py", 825, "__init__", "_verify_param_shape_across_processes(self.process_group, parameters)")],
                                          "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5",
                                          "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
                                          "Last error:",
                                          "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000")))
    log.raw("E0302 09:12:01.100000 4400 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 4410) of binary: /usr/bin/python3")
    log.write(OUT / "nccl-duplicate-gpu.log")


def libuv_windows() -> None:
    """libuv missing on Windows wheels (pytorch tutorials TCPStore_libuv_backend, research 2.4)."""
    log = Log("plain")
    log.raw("PS C:\\Users\\erin\\proj> torchrun --nproc-per-node 2 train.py",
            "W0302 14:01:11.219000 11820 Lib\\site-packages\\torch\\distributed\\elastic\\multiprocessing\\redirects.py:29] NOTE: Redirects are currently not supported in Windows or MacOs.")
    log.raw(*traceback([("C:\\Users\\erin\\AppData\\Local\\Programs\\Python\\Python311\\Scripts\\torchrun.exe\\__main__.py", 7, "<module>", "sys.exit(main())"),
                        ("C:\\Users\\erin\\AppData\\Local\\Programs\\Python\\Python311\\Lib\\site-packages\\torch\\distributed\\elastic\\rendezvous\\static_tcp_rendezvous.py", 55, "next_rendezvous", "self._store = TCPStore(  # type: ignore[call-arg]")],
                       "torch.distributed.DistStoreError: use_libuv was requested but PyTorch was build without libuv support"))
    log.write(OUT / "libuv-windows-torch24.log")
    log = Log("plain")
    log.raw("C:\\work> set MASTER_ADDR=localhost& set MASTER_PORT=29501& python train.py")
    log.raw(*traceback([("C:\\work\\train.py", 18, "<module>", 'dist.init_process_group("gloo", rank=rank, world_size=world_size)'),
                        ("C:\\Python312\\Lib\\site-packages\\torch\\distributed\\rendezvous.py", 189, "_create_c10d_store", "return TCPStore(")],
                       "torch.distributed.DistStoreError: use_libuv was requested but PyTorch was built without libuv support, run with USE_LIBUV=0 to disable it."))
    log.write(OUT / "libuv-windows-init.log")


def port_in_use_legacy() -> None:
    """PyTorch <= 2.3 TCPStore texts (socket.cpp, research 2.4)."""
    log = Log("plain")
    log.raw("[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
            "[W socket.cpp:436] [c10d] The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use).",
            "[E socket.cpp:472] [c10d] The server socket has failed to listen on any local network address.")
    log.raw(*traceback([("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())"),
                        (f"{TORCH_LIB}/distributed/elastic/rendezvous/static_tcp_rendezvous.py", 55, "next_rendezvous", "self._store = TCPStore(  # type: ignore[call-arg]")],
                       "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use). The server socket has failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use)."))
    log.write(OUT / "port-in-use-torch21.log")


WANDB = "\x1b[34m\x1b[1mwandb\x1b[0m"


def wandb_no_api_key() -> None:
    """wandb <= 0.23 no-tty login error (wandb/sdk/wandb_login.py, research 2.6) on rank 0 of 4."""
    log = Log("tee")
    log.raw(*TORCHRUN_HEADER)
    for r in range(4):
        log.add(r, "/usr/local/lib/python3.10/dist-packages/transformers/training_args.py:1525: FutureWarning: `evaluation_strategy` is deprecated and will be removed in version 4.46 of 🤗 Transformers. Use `eval_strategy` instead",
                "  warnings.warn(")
    log.add(0, f"{WANDB}: WARNING The `run_name` is currently set to the same value as `TrainingArguments.output_dir`. If this was not intended, please specify a different run name by setting the `TrainingArguments.run_name` parameter.")
    log.add(0, *excepthook(0, traceback([("/home/fay/sft/run_sft.py", 140, "<module>", "trainer.train()"),
                                         ("/usr/local/lib/python3.10/dist-packages/transformers/integrations/integration_utils.py", 780, "setup", "self._wandb.init("),
                                         ("/usr/local/lib/python3.10/dist-packages/wandb/sdk/wandb_login.py", 298, "_login", "wlogin.prompt_api_key()")],
                                        "wandb.errors.UsageError: api_key not configured (no-tty). call wandb.login(key=[your_api_key])")))
    log.raw("W0302 08:30:12.000000 601 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 611 closing signal SIGTERM",
            "E0302 08:30:12.400000 601 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 610) of binary: /usr/bin/python3")
    log.raw(*torchrun_summary("run_sft.py", [(0, 1, 610, NO_TB)], host="sft-box", when="2024-03-02_08:30:12"))
    log.write(OUT / "wandb-no-api-key-tee.log")


def wandb_init_timeout() -> None:
    """wandb 0.14.1-0.28.1 init timeout (sdk/wandb_run.py, research 2.6), single process, colour codes."""
    log = Log("plain")
    log.raw(f"{WANDB}: Currently logged in as: \x1b[33mgus\x1b[0m (\x1b[33mlab\x1b[0m). Use \x1b[1m`wandb login --relogin`\x1b[0m to force relogin",
            f"{WANDB}: Network error (ConnectTimeout), entering retry loop.",
            f"{WANDB}: ERROR Run initialization has timed out after 90.0 sec. Please try increasing the timeout with the `init_timeout` setting: `wandb.init(settings=wandb.Settings(init_timeout=120))`.")
    log.raw(*traceback([("/home/gus/cls/train.py", 52, "<module>", 'run = wandb.init(project="cls", config=cfg)'),
                        ("/usr/lib/python3.11/site-packages/wandb/sdk/wandb_init.py", 1266, "init", "wandb._sentry.reraise(e)")],
                       "wandb.errors.errors.CommError: Run initialization has timed out after 90.0 sec. Please try increasing the timeout with the `init_timeout` setting: `wandb.init(settings=wandb.Settings(init_timeout=120))`."))
    log.write(OUT / "wandb-init-timeout.log")


def gpu_xid79_dir() -> None:
    """GPU 5 falls off the bus (driver Xid 79, research 2.9): kernel log plus the job's log."""
    target = OUT / "gpu-xid79-node"
    shutil.rmtree(target, ignore_errors=True)
    log = Log("srun")
    for r in range(8):
        log.add(r, f"[rank{r}] step 8800 tokens/s 1.21e5")
    for r in (0, 1, 2, 3, 4, 6, 7):
        log.add(r, *watchdog_timeout_lines(r, 88021, "ALLREDUCE", 1, 600000, 600020, 88021, 88020, "0304 02:21:09", era="2.5"))
    log.raw("srun: error: gpu-node-04: tasks 0-4,6-7: Aborted (core dumped)",
            "srun: error: gpu-node-04: task 5: Killed")
    log.write(target / "slurm-90211.out")
    kern = Log("plain")
    kern.raw("[Mon Mar  4 02:11:09 2024] NVRM: GPU at PCI:0000:ab:00: GPU-5c3c0d5f-1b2e-8e4f-9a6c-0d1e2f3a4b5c",
             "[Mon Mar  4 02:11:09 2024] NVRM: Xid (PCI:0000:ab:00): 79, pid=1523, name=python, GPU has fallen off the bus.",
             "[Mon Mar  4 02:11:09 2024] NVRM: GPU 0000:ab:00.0: GPU has fallen off the bus.")
    kern.write(target / "dmesg-gpu-node-04.txt")


def gpu_ecc_mpirun() -> None:
    log = Log("mpirun")
    for r in range(4):
        log.add(r, f"[{r}] epoch 12 iter 400 loss 0.{3120 + r}", stream="stdout")
    log.add(2, *excepthook(2, traceback(BACKWARD_FRAMES, "RuntimeError: CUDA error: uncorrectable ECC error encountered",
                                        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
                                        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1")))
    log.raw("--------------------------------------------------------------------------",
            "mpirun detected that one or more processes exited with non-zero status, thus causing",
            "the job to be terminated. The first process to do so was:",
            "",
            "  Process name: [[5012,1],2]",
            "  Exit code:    1",
            "--------------------------------------------------------------------------")
    log.write(OUT / "gpu-ecc-mpirun.log")


def nan_deepspeed_fp16() -> None:
    """DeepSpeed fp16 loss scaler (deepspeed/runtime/fp16/loss_scaler.py, research 2.10)."""
    log = Log("plain")
    log.raw("[2024-03-02 10:00:00,001] [INFO] [launch.py:146:main] WORLD INFO DICT: {'localhost': [0, 1]}")
    scale = 65536
    second = 0
    while scale > 1:
        for r in (0, 1):
            log.raw(f"[2024-03-02 10:0{second // 60}:{second % 60:02d},{100 + r}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank {r} Skipping step. Attempted loss scale: {scale}, reducing to {scale // 2}")
        scale //= 2
        second += 3
    final = "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
    frames = [("/home/hal/ds/train.py", 180, "<module>", "engine.step()"),
              ("/usr/local/lib/python3.10/dist-packages/deepspeed/runtime/fp16/loss_scaler.py", 175, "update_scale", 'raise Exception(')]
    for r in (0, 1):
        log.raw(*excepthook(r, traceback(frames, final)))
    log.raw("[2024-03-02 10:00:51,900] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 3012",
            "[2024-03-02 10:00:52,100] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', '--local_rank=1', '--deepspeed', 'ds_fp16.json'] exits with return code = 1")
    log.write(OUT / "nan-deepspeed-fp16.log")


def shm_dataloader_docker() -> None:
    """DataLoader SIGBUS in a container with the default 64 MB /dev/shm (torch/csrc/DataLoader.cpp)."""
    log = Log("plain")
    log.raw("Epoch 1:   3%|▎         | 41/1250 [00:12<06:01,  3.34it/s, loss=0.912]")
    log.raw("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
            "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).")
    log.raw(*traceback([("/workspace/train.py", 88, "<module>", "for images, labels in loader:"),
                        ("/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", 1133, "_try_get_data", "data = self._data_queue.get(timeout=timeout)"),
                        ("/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/signal_handling.py", 66, "handler", "_error_if_any_worker_fails()")],
                       "RuntimeError: DataLoader worker (pid 3147) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory. Please try to raise your shared memory limit."))
    log.write(OUT / "shm-dataloader-docker.log")


def shm_nccl_container() -> None:
    """NCCL cannot create its /dev/shm segment (observed text, research 2.3)."""
    log = Log("tee")
    log.raw(*TORCHRUN_HEADER)
    for r in range(4):
        nccl_init(log, r, 4, host="trainer-7d9f")
    log.add(1, "trainer-7d9f:812:901 [1] include/shm.h:28 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-PzqV6t (size 9637888)",
            "trainer-7d9f:812:901 [1] NCCL INFO transport/shm.cc:114 -> 2")
    log.add(1, *excepthook(1, traceback(TRAIN_FRAMES + [(f"{TORCH_LIB}/distributed/distributed_c10d.py", 2288, "all_reduce", "work = group.allreduce([tensor], opts)")],
                                        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2027, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
                                        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
                                        "Last error:",
                                        "Error while creating shared memory segment /dev/shm/nccl-PzqV6t (size 9637888)")))
    log.raw("E0302 10:00:31.100000 700 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 812) of binary: /usr/bin/python3")
    log.write(OUT / "shm-nccl-container-tee.log")


def disk_full_hf_trainer() -> None:
    log = Log("tee")
    log.raw(*TORCHRUN_HEADER)
    rng = random.Random(3)
    hf_logs(log, 0, 1.4, 3, rng, epoch0=2.0)
    log.add(0, "Saving model checkpoint to /scratch/run7/checkpoint-3000")
    log.add(0, *excepthook(0, traceback([("/home/ivy/run_clm.py", 655, "<module>", "main()"),
                                         ("/usr/local/lib/python3.10/dist-packages/transformers/trainer.py", 3095, "_save_optimizer_and_scheduler", "torch.save(self.optimizer.state_dict(), os.path.join(output_dir, OPTIMIZER_NAME))"),
                                         (f"{TORCH_LIB}/serialization.py", 652, "save", "with _open_zipfile_writer(f) as opened_zipfile:")],
                                        "OSError: [Errno 28] No space left on device: '/scratch/run7/checkpoint-3000/optimizer.pt'")))
    log.raw("E0302 16:40:02.100000 300 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 310) of binary: /usr/bin/python3")
    log.write(OUT / "disk-full-hf-trainer-tee.log")


def disk_full_torch_save_srun() -> None:
    """torch.save's writer failing mid-file (caffe2/serialize/inline_container.cc, research 2.7)."""
    log = Log("srun")
    log.add(0, "[ckpt] writing /lustre/proj/ckpt/iter_0042000/model_optim_rng.pt")
    first = [
        "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 2178837952 vs 2178837840",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
    ]
    frames = [("/home/jo/megatron/training.py", 1021, "save_checkpoint", "torch.save(state_dict, checkpoint_name)"),
              (f"{TORCH_LIB}/serialization.py", 652, "save", "with _open_zipfile_writer(f) as opened_zipfile:")]
    log.add(0, *traceback(frames, *first))
    log.add(0, *traceback(frames[1:], "RuntimeError: [enforce fail at inline_container.cc:603] . PytorchStreamWriter failed writing file data/63: file write failed"))
    log.raw("srun: error: gpu-node-01: task 0: Exited with exit code 1")
    log.write(OUT / "disk-full-torch-save-srun.out")


def checkpoint_lfs_pointer_srun() -> None:
    """Every rank loads a "checkpoint" that is a git-lfs pointer file (pickle's invalid load key
    'v', research 2.7): the clone was made without git lfs pull."""
    log = Log("srun")
    frames = [("/home/lee/ft/train.py", 61, "<module>", 'state = torch.load("weights/base.pt", map_location="cpu", weights_only=False)'),
              (f"{TORCH_LIB}/serialization.py", 1384, "load", "return _legacy_load("),
              (f"{TORCH_LIB}/serialization.py", 1628, "_legacy_load", "magic_number = pickle_module.load(f, **pickle_load_args)")]
    for r in range(4):
        log.add(r, f"[rank{r}] loading weights/base.pt")
    for r in (2, 0, 3, 1):
        log.add(r, *traceback(frames, "_pickle.UnpicklingError: invalid load key, 'v'."))
    log.raw("srun: error: gpu-node-03: tasks 0-3: Exited with exit code 1")
    log.write(OUT / "checkpoint-lfs-pointer-srun.out")


def store_wait_timeout_srun() -> None:
    """A 16-rank job where one node's 8 ranks never started: rank 0's store gives up
    (DistStoreError, research 2.4)."""
    log = Log("srun")
    for r in range(8):
        log.add(r, f"[rank{r}] MASTER_ADDR=gpu-node-01 MASTER_PORT=29500 WORLD_SIZE=16")
    frames = [("/home/max/pretrain.py", 30, "<module>", 'dist.init_process_group("nccl")'),
              (f"{TORCH_LIB}/distributed/rendezvous.py", 189, "_create_c10d_store", "return TCPStore(")]
    log.add(0, *traceback(frames, "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 8/16 clients joined."))
    log.raw("srun: error: gpu-node-01: task 0: Exited with exit code 1",
            "srun: error: gpu-node-01: tasks 1-7: Killed")
    log.write(OUT / "store-wait-timeout-srun.out")


def slurm_time_limit() -> None:
    """slurmstepd's cancel line (src/slurmd/slurmstepd/req.c, research 2.8)."""
    log = Log("srun")
    for i in range(3):
        log.add(0, f"epoch 41 step {9000 + 100 * i} loss 1.{402 - i} lr 1.2e-04 ({11.8 + i / 10:.1f} it/s)")
    log.raw("slurmstepd: error: *** JOB 81299 ON gpu-node-12 CANCELLED AT 2024-03-02T23:59:59 DUE TO TIME LIMIT ***",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
            "slurmstepd: error: *** STEP 81299.0 ON gpu-node-12 CANCELLED AT 2024-03-02T23:59:59 DUE TO TIME LIMIT ***",
            "srun: error: gpu-node-12: tasks 0-7: Terminated")
    log.write(OUT / "slurm-time-limit.out")


def slurm_node_failure() -> None:
    log = Log("srun")
    log.add(3, "[rank3] step 1200 loss 2.117")
    log.raw("srun: error: Node failure on gpu-node-08",
            "slurmstepd: error: *** STEP 81300.0 ON gpu-node-07 CANCELLED AT 2024-03-03T04:12:31 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
            "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    log.write(OUT / "slurm-node-failure.out")


def preempted_torchrun_sbatch() -> None:
    """SLURM preempts a torchrun job: torchrun gets SIGTERM (Python 3.10 logs the enum as
    `Signals.SIGTERM`, agent/server/api.py), stops its workers and dies of SignalException;
    slurmstepd's cancel line lands after torchrun's first lines (research 2.8)."""
    log = Log("plain")
    log.raw(*TORCHRUN_HEADER)
    for i in range(4):
        log.raw(f"{{'loss': {1.9120 - i / 100:.4f}, 'grad_norm': 0.{412 + i}, 'learning_rate': 2e-05, 'epoch': {1.20 + i / 100:.2f}}}")
    log.raw("W0303 02:10:44.120000 139882 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM death signal, shutting down workers",
            *(f"W0303 02:10:44.121000 139882 torch/distributed/elastic/multiprocessing/api.py:897] Sending process {139900 + r} closing signal SIGTERM"
              for r in range(8)),
            "slurmstepd: error: *** JOB 81311 ON gpu-node-12 CANCELLED AT 2024-03-03T02:10:44 DUE TO PREEMPTION ***",
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            f'  File "{TORCH_LIB}/distributed/elastic/multiprocessing/errors/__init__.py", line 355, in wrapper',
            "    return f(*args, **kwargs)",
            f'  File "{TORCH_LIB}/distributed/run.py", line 919, in main',
            "    run(args)",
            f'  File "{TORCH_LIB}/distributed/launcher/api.py", line 254, in launch_agent',
            "    result = agent.run()",
            f'  File "{TORCH_LIB}/distributed/elastic/agent/server/api.py", line 696, in run',
            "    result = self._invoke_run(role)",
            f'  File "{TORCH_LIB}/distributed/elastic/agent/server/api.py", line 855, in _invoke_run',
            "    time.sleep(monitor_interval)",
            f'  File "{TORCH_LIB}/distributed/elastic/multiprocessing/api.py", line 84, in _terminate_process_handler',
            '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
            "torch.distributed.elastic.multiprocessing.api.SignalException: Process 139882 got signal: 15")
    log.write(OUT / "preempted-torchrun-sbatch.out")


def segfault_torchrun() -> None:
    """A rank dies of SIGSEGV without printing anything: only torchrun's lines say so."""
    log = Log("plain")
    log.raw(*TORCHRUN_HEADER)
    log.raw("step 10 loss 4.0012", "step 20 loss 3.8821")
    log.raw("W0302 13:05:22.001000 5500 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 5510 closing signal SIGTERM",
            "E0302 13:05:22.220000 5500 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -11) local_rank: 1 (pid: 5511) of binary: /usr/bin/python3")
    log.raw(*torchrun_summary("train.py", [(1, -11, 5511, sig_tb(-11, 5511)), (0, -15, 5510, sig_tb(-15, 5510))], when="2024-03-02_13:05:22"))
    log.write(OUT / "segfault-torchrun.log")


def clean_tee_8ranks() -> None:
    """A successful run full of harmless lines that look like trouble."""
    rng = random.Random(11)
    log = Log("tee")
    log.raw(*TORCHRUN_HEADER)
    for r in range(8):
        nccl_init(log, r, 8)
    log.add(0, "If out-of-memory error occurs, reduce --per_device_train_batch_size or enable --gradient_checkpointing.",
            "Environment: TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 NCCL_DEBUG=INFO PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
            "/usr/local/lib/python3.10/dist-packages/torch/utils/checkpoint.py:295: FutureWarning: `torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', args...)` instead.",
            "  with torch.enable_grad(), device_autocast_ctx, torch.cpu.amp.autocast(**ctx.cpu_autocast_kwargs):  # type: ignore[attr-defined]",
            f"{WANDB}: Tracking run with wandb version 0.17.0",
            f"{WANDB}: W&B syncing is set to \x1b[1m`offline`\x1b[0m in this directory.  ",
            "[rank0]:[W302 10:00:01.000000000 ProcessGroupNCCL.cpp:4115] [PG ID 0 PG GUID 0 Rank 0]  using GPU 0 to perform barrier as devices used by this process are currently unknown. This can potentially cause a hang if this rank to GPU mapping is incorrect.Specify device_ids in barrier() to force use of a particular device,or call init_process_group() with a device_id.")
    log.add(0, tqdm_line(1000, 1000, 3.3))
    hf_logs(log, 0, 2.0, 8, rng)
    log.add(0, "nan iterations: 0 | skipped iterations: 0 | inf grad norms: 0",
            "{'train_runtime': 305.1, 'train_samples_per_second': 104.9, 'train_steps_per_second': 3.28, 'train_loss': 1.2093, 'epoch': 1.0}",
            "Saving model checkpoint to /scratch/run9/checkpoint-1000",
            f"{WANDB}: Run history:",
            f"{WANDB}:          train/loss ▇▆▅▄▃▂▂▁",
            f"{WANDB}: You can sync this run to the cloud by running:",
            f"{WANDB}: \x1b[1mwandb sync /scratch/run9/wandb/offline-run-20240302_100001-a1b2c3\x1b[0m")
    for r in range(8):
        log.add(r, f"gpu-node-04:{51200 + r}:{51300 + r} [{r}] NCCL INFO comm 0x55d4c8a0 rank {r} nranks 8 cudaDev {r} busId {0x18 + 0x10 * r:x}000 - Destroy COMPLETE")
    log.write(OUT / "clean-tee-8ranks.log")


def clean_srun_fp16() -> None:
    """Successful DeepSpeed fp16 run whose first steps overflow, as fp16 warm-up does."""
    log = Log("srun")
    for r in range(2):
        log.add(r, f"[2024-03-02 10:00:00,{r:03d}] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank {r} Skipping step. Attempted loss scale: 65536, reducing to 32768")
    for i in range(5):
        log.add(0, f"[2024-03-02 10:0{i}:00,500] [INFO] [logging.py:96:log_dist] [Rank 0] step={100 * (i + 1)}, skipped=1, lr=[2.9e-05], mom=[(0.9, 0.95)]",
                f"steps: {100 * (i + 1)} loss: {2.2 - 0.1 * i:.4f} iter time (s): 0.412 samples/sec: 310.2")
    log.add(0, "[2024-03-02 10:06:00,000] [INFO] [engine.py:3488:save_checkpoint] Saving model checkpoint: /ckpt/global_step500/mp_rank_00_model_states.pt")
    log.write(OUT / "clean-srun-fp16.out")


def clean_multinode_retries_srun() -> None:
    """A healthy 2-node start: node 2's ranks retry the store until rank 0 listens (warnings only),
    wandb retries once, fp16 skips a step; then training runs to the end."""
    log = Log("srun")
    for r in (8, 9):
        log.add(r, f"[W302 08:00:0{r - 7}.000000000 socket.cpp:752] [c10d] TCP client failed to connect/validate to host gpu-node-01:29500 - retrying (try=0, timeout=600000ms, delay=1320ms): Connection refused")
    log.add(0, "[I302 08:00:03.000000000 socket.cpp:480] [c10d] The server socket has started to listen on [::]:29500.")
    for r in (0, 8):
        nccl_init(log, r, 16, host="gpu-node-0" + ("1" if r < 8 else "2"))
    log.add(0, f"{WANDB}: Network error (ReadTimeout), entering retry loop.",
            f"{WANDB}: Tracking run with wandb version 0.17.0",
            "[2024-03-02 08:01:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768")
    for i in range(4):
        log.add(0, f" iteration {100 * (i + 1):8d}/     400 | lm loss: {3.2 - 0.3 * i:.6E} | loss scale: 32768.0 | grad norm: {0.9 - 0.1 * i:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")
    log.add(0, "[after training is done] datetime: 2024-03-02 08:40:12",
            "saving checkpoint at iteration     400 to /ckpt/run3",
            "  successfully saved checkpoint at iteration     400 to /ckpt/run3")
    log.write(OUT / "clean-multinode-retries-srun.out")


SAMPLES = [
    cuda_oom_tee_8ranks, cuda_oom_expandable_already_set, cuda_oom_7b_ddp_accelerate, checkpoint_read_while_written,
    cuda_oom_srun_torch113, xla_oom_jax_srun,
    host_oom_slurm, host_oom_dmesg, nccl_timeout_hang_tee_8ranks, nccl_timeout_rank0_checkpoint_logdir,
    nccl_timeout_flight_recorder_srun, nccl_unique_id_wait_srun,
    cuda_illegal_access_mpirun, cuda_device_assert_tee, nccl_ib_error_srun, nccl_duplicate_gpu,
    libuv_windows, port_in_use_legacy, wandb_no_api_key, wandb_init_timeout, gpu_xid79_dir,
    gpu_ecc_mpirun, nan_deepspeed_fp16, shm_dataloader_docker, shm_nccl_container,
    disk_full_hf_trainer, disk_full_torch_save_srun, checkpoint_lfs_pointer_srun, store_wait_timeout_srun,
    slurm_time_limit, slurm_node_failure, preempted_torchrun_sbatch,
    segfault_torchrun, clean_tee_8ranks, clean_srun_fp16, clean_multinode_retries_srun,
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for write in SAMPLES:
        write()


if __name__ == "__main__":
    main()
