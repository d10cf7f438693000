"""The classes of misses on real logs (issue #34), each with a case written from the library's own
format strings, not from a corpus log: pastes that lost the traceback header, an exception's last
line alone, a handled traceback before the real failure, prefixes behind a timestamp or a pdsh host,
and other frameworks' and older versions' wordings of known failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from diagnosis_helpers import diagnose_json, diagnosed, diagnosed_root


def test_a_traceback_cut_before_its_header_is_still_read(tmp_path: Path) -> None:
    """CPython's frame format ('  File "{}", line {}, in {}'): the first frame starts the record."""
    result = diagnosed(tmp_path, (
        '[rank2]:   File "/home/u/train.py", line 88, in <module>\n'
        "[rank2]:     main()\n"
        '[rank2]:   File "/home/u/train.py", line 61, in main\n'
        "[rank2]:     batch = collate(items)\n"
        "[rank2]: KeyError: 'input_ids'\n"
    ))
    root = result["root_cause"]
    assert (root["category"], root["rank"], root["confidence"]) == ("python_exception", 2, "likely")
    assert root["fields"]["exc_type"] == "KeyError" and root["fields"]["frame_line"] == "61"


def test_faulthandler_frames_are_no_traceback_of_an_exception(tmp_path: Path) -> None:
    """faulthandler prints 'line {} in {}' (no comma); a bare word after its frames is no exception."""
    result = diagnosed(tmp_path, (
        'Thread 0x00007f (most recent call first):\n'
        '  File "/usr/lib/python3.10/threading.py", line 320 in wait\n'
        '  File "/home/u/train.py", line 12 in loop\n'
        "Aborted\n"
    ))
    assert result["root_cause"] is None


def test_an_exception_line_alone_is_a_weak_python_exception(tmp_path: Path) -> None:
    """The last line of a traceback with nothing around it (a rich box drew the rest, or it was cut)."""
    result = diagnosed(tmp_path, (
        "Epoch 3: 41%|████      | 410/1000\n"
        "[rank1]: ValueError: Trying to set a tensor of shape torch.Size([256]) in \"bias\" (which has shape torch.Size([4096])), this looks incorrect.\n"
    ))
    root = result["root_cause"]
    assert (root["category"], root["rank"], root["confidence"]) == ("python_exception", 1, "weak")
    assert "no traceback" in root["confidence_note"]
    assert root["fields"]["exc_type"] == "ValueError"


# rich's traceback as rich/traceback.py draws it (Traceback._render_stack: "{filename}:{lineno} in
# {name}" inside a panel titled "Traceback (most recent call last)"; the exception line below it;
# a chain with "The above exception was the direct cause of the following exception:").
RICH_TRACEBACK = """\
╭───────────────────── Traceback (most recent call last) ──────────────────────╮
│ /home/u/llm-foundry/scripts/train/train.py:412 in main                       │
│                                                                              │
│   409 │   for batch in loader:                                               │
│ ❱ 412 │   │   tokens = tokenizer.encode(batch["text"])                       │
│                                                                              │
│ /opt/conda/lib/python3.10/site-packages/composer/trainer/trainer.py:2012 in  │
│ fit                                                                          │
╰──────────────────────────────────────────────────────────────────────────────╯
KeyError: 'text'

The above exception was the direct cause of the following exception:

╭───────────────────── Traceback (most recent call last) ──────────────────────╮
│ /home/u/llm-foundry/scripts/train/train.py:640 in <module>                   │
│                                                                              │
│   639 if __name__ == '__main__':                                             │
│ ❱ 640 │   main(cfg)                                                          │
│                                                                              │
│ /home/u/llm-foundry/llmfoundry/data/text_data.py:97 in build_batch           │
│                                                                              │
│ ❱  97 │   │   raise ValueError(f'no text column in {split}') from err        │
╰──────────────────────────────────────────────────────────────────────────────╯
ValueError: no text column in train
"""


def test_a_traceback_rich_drew_is_a_traceback_with_its_users_frame(tmp_path: Path) -> None:
    text = "".join(f"[rank3]: {line}\n" for line in RICH_TRACEBACK.splitlines()) + (
        "[rank0]:[E1120 10:11:12.000000 123 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
        "ran for 600012 milliseconds before timing out.\n")
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["category"], root["rank"], root["confidence"]) == ("python_exception", 3, "likely")
    fields = root["fields"]
    assert (fields["exc_type"], fields["message"]) == ("ValueError", "no text column in train")
    assert (fields["frame_file"], fields["frame_line"], fields["frame_func"]) == \
        ("/home/u/llm-foundry/llmfoundry/data/text_data.py", "97", "build_batch")
    # Unprefixed, as a single process prints it, the same.
    root = diagnosed(tmp_path, RICH_TRACEBACK)["root_cause"]
    assert (root["fields"]["exc_type"], root["fields"]["frame_line"], root["confidence"]) == ("ValueError", "97", "likely")


def test_a_rich_panel_that_is_no_traceback_starts_none(tmp_path: Path) -> None:
    result = diagnosed(tmp_path, (
        "╭──────────────── Config ────────────────╮\n"
        "│ /home/u/run/config.yaml:12 in model     │\n"
        "│ lr: 0.0003                              │\n"
        "╰─────────────────────────────────────────╯\n"
        "step 10 loss 2.31\n"
    ))
    assert result["root_cause"] is None


@pytest.mark.parametrize("line", [
    "wandb: Network error (ConnectionError), entering retry loop.",
    "UserWarning: TypedStorage is deprecated. It will be removed in the future",
    "[W socket.cpp:663] [c10d] The client socket cannot be initialized to connect to [localhost]:29500 (errno: 97 - Address family not supported by protocol).",
    "INFO: Error: this is not the start of a line",
])
def test_lines_that_only_mention_an_error_are_not_exceptions(tmp_path: Path, line: str) -> None:
    assert diagnosed(tmp_path, line + "\n")["root_cause"] is None


def test_a_librarys_own_message_outranks_an_earlier_handled_traceback(tmp_path: Path) -> None:
    """A retry loop logged a traceback no rule names, then the job died of a known failure."""
    result = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/data.py", line 40, in fetch\n'
        "    return session.get(url, timeout=5)\n"
        "ConnectionResetError: [Errno 104] Connection reset by peer\n"
        "retrying in 5s\n"
        "step 10 loss 2.31\n"
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.15 GiB of which 1.12 GiB is free.\n"
    ))
    assert result["root_cause"]["category"] == "cuda_oom"
    assert result["root_cause"]["confidence"] == "certain"


def test_a_rank_prefix_behind_a_timestamp_is_the_lines_rank(tmp_path: Path) -> None:
    result = diagnosed(tmp_path, (
        "2024-11-20 14:37:16 [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 132.00 MiB. "
        "GPU 3 has a total capacity of 79.10 GiB of which 98.00 MiB is free.\n"
        "2024-11-20 14:37:16 DEBUG:filelock:Lock 140341412642880 released\n"
    ))
    assert (result["root_cause"]["rule"], result["root_cause"]["rank"]) == ("cuda-oom", 3)


def test_pdsh_host_prefixes_keep_each_nodes_traceback_apart(tmp_path: Path) -> None:
    """DeepSpeed's multi-node runner (pdsh) puts 'host: ' before every line of every node."""
    result = diagnosed(tmp_path, (
        "node-01: Traceback (most recent call last):\n"
        "node-02: Traceback (most recent call last):\n"
        'node-01:   File "/home/u/train.py", line 30, in <module>\n'
        'node-02:   File "/home/u/train.py", line 30, in <module>\n'
        "node-01:     build_dataset()\n"
        "node-02:     build_dataset()\n"
        "node-01: FileNotFoundError: [Errno 2] No such file or directory: '/data/index-cache/doc_idx.npy'\n"
        "node-02: FileNotFoundError: [Errno 2] No such file or directory: '/data/index-cache/doc_idx.npy'\n"
    ))
    root = result["root_cause"]
    assert (root["category"], root["confidence"], root["fields"]["exc_type"]) == ("python_exception", "likely", "FileNotFoundError")
    assert root["count"] == 2


@pytest.mark.parametrize(("text", "rule"), [
    # Ray: ray/exceptions.py OutOfMemoryError and the raylet's summary (node_manager.cc).
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.\n", "host-alloc-failed"),
    ("(raylet) node_manager.cc:3040: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node\n", "host-alloc-failed"),
    # c10/core/impl/alloc_cpu.cpp.
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)\n", "host-alloc-failed"),
    # DeepSpeed's launcher, torch.multiprocessing.spawn, CPython's CalledProcessError.
    ("[ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=3'] exits with return code = -9\n", "sigkill"),
    ("torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with signal SIGKILL\n", "sigkill"),
    # TensorFlow's allocator, torch < 1.5 (THC).
    ("ResourceExhaustedError: OOM when allocating tensor with shape[64,1024,1024] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc\n", "cuda-oom-raw"),
    ("RuntimeError: cuda runtime error (2) : out of memory at /opt/conda/conda-bld/pytorch/work/aten/src/THC/THCCachingAllocator.cpp:510\n", "cuda-oom-raw"),
    ("RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered at /pytorch/aten/src/THC/THCGeneral.cpp:844\n", "gpu-ecc"),
    ("slurmstepd: error: NVML: Failed to get usage(15): GPU is lost\n", "gpu-lost"),
    ("RuntimeError: Address already in use\n", "port-in-use"),
    ("wandb.errors.CommError: Error while calling W&B API: permission denied (<Response [403]>)\n", "wandb-permission"),  # a 403: the key was accepted, the entity or project refused
    ("RuntimeError: unexpected EOF, expected 1048576 more bytes. The file might be corrupted.\n", "checkpoint-corrupt"),
    # detectron2's train loop, GPT-NeoX's overflow monitor.
    ("FloatingPointError: Loss became infinite or NaN at iteration=2041!\n", "nan-detected-by-framework"),
    ("Exception: Skipped 50 iterations in a row due to Overflow - Exiting training.\n", "fp16-loss-scale-at-minimum"),
    # c10d socket.cpp.
    ("[W socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=11, addr=[n1]:38674, remote=[n0]:29500) timed out after 1800000ms\n", "store-wait-timeout"),
    ("torch.distributed.DistNetworkError: The client socket has failed to connect to any network address of (10.1.2.3, 29500).\n", "store-connect-timeout"),
])
def test_other_wordings_of_known_failures(tmp_path: Path, text: str, rule: str) -> None:
    result = diagnosed(tmp_path, text)
    assert result["root_cause"]["rule"] == rule


SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


@pytest.mark.parametrize(("sample", "rank", "source"), [
    ("demo/crash-2ranks.log", 1, "prefix"),          # [rank1]: before the traceback
    ("demo/hang-gloo-2ranks.log", 1, "hang"),        # the rank the others waited for
    ("demo/sigkill-2ranks.log", 1, "launcher"),      # torchrun's record of the pid it lost
])
def test_the_report_says_which_evidence_named_the_rank(sample: str, rank: int, source: str) -> None:
    root = diagnose_json(str(SAMPLES / sample))["root_cause"]
    assert (root["rank"], root["rank_source"]) == (rank, source)


def test_a_root_cause_whose_lines_name_no_rank_takes_the_launchers_first_failure(tmp_path: Path) -> None:
    """A worker's traceback without a prefix, then torchrun's summary: the rank is the summary's,
    said to be the launcher's view (it is the first failure torchrun observed, not proof)."""
    result = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 12, in <module>\n'
        "    check(batch)\n"
        "ValueError: empty batch\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-11-21_10:10:35\n"
        "  host      : node1\n"
        "  rank      : 3 (local_rank: 3)\n"
        "  exitcode  : 1 (pid: 4242)\n"
        "  error_file: <N/A>\n"
        "============================================================\n"
    ))
    root = result["root_cause"]
    assert (root["category"], root["rank"], root["rank_source"]) == ("python_exception", 3, "summary")
    text = subprocess.run([sys.executable, "-m", "monitor", "diagnose", str(tmp_path / "job.log")],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"}).stdout
    assert "rank 3 (from the launcher's summary: the first failure it observed)" in text


def test_mp_spawns_header_names_the_process_of_the_traceback_that_follows(tmp_path: Path) -> None:
    """torch.multiprocessing.spawn (ProcessRaisedException): "-- Process {index} terminated with the
    following error:" before the child's own traceback, which carries no rank."""
    result = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        "    mp.spawn(worker, nprocs=4)\n"
        "torch.multiprocessing.spawn.ProcessRaisedException: \n"
        "\n"
        "-- Process 2 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 90, in _wrap\n'
        "    fn(i, *args)\n"
        '  File "/home/u/train.py", line 22, in worker\n'
        "    batch = next(loader)\n"
        "KeyError: 'labels'\n"
    ))
    root = result["root_cause"]
    assert (root["fields"]["exc_type"], root["rank"], root["rank_source"]) == ("KeyError", 2, "launcher")


def test_mp_spawns_report_of_a_process_whose_traceback_was_cut_names_that_process(tmp_path: Path) -> None:
    """The child's traceback cut before its exception (a paste that stops there): what failed is
    unknown, but spawn's own header says which process it was."""
    result = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        "    mp.spawn(worker, nprocs=4)\n"
        '  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 160, in join\n'
        "    raise ProcessRaisedException(msg, error_index, failed_process.pid)\n"
        "torch.multiprocessing.spawn.ProcessRaisedException: \n"
        "\n"
        "-- Process 3 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 69, in _wrap\n'
        "    fn(i, *args)\n"
    ))
    root = result["root_cause"]
    assert (root["category"], root["rank"], root["rank_source"], root["confidence"]) == \
        ("python_exception", 3, "launcher", "weak")


def test_mp_spawns_own_exception_names_the_process_it_reports(tmp_path: Path) -> None:
    """The parent's ProcessRaisedException where the child's traceback is cut at its header (a
    paste that stops there): a report of another process's failure, which says which one failed."""
    raised = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 137, in launch_training\n'
        "    mp.spawn(main, args=(args, world_size), nprocs=world_size, join=True)\n"
        '  File "/usr/lib/python3/site-packages/torch/multiprocessing/spawn.py", line 188, in join\n'
        "    raise ProcessRaisedException(msg, error_index, failed_process.pid)\n"
        "torch.multiprocessing.spawn.ProcessRaisedException: \n"
        "\n"
        "-- Process 1 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
    ))["root_cause"]
    assert (raised["fields"]["exc_type"], raised["rank"], raised["rank_source"]) == \
        ("torch.multiprocessing.spawn.ProcessRaisedException", 1, "launcher")


def test_an_exception_line_a_terminal_wrapped_keeps_its_ranks_prefix_and_its_place(tmp_path: Path) -> None:
    """The rest of a wrapped "[rank4]: ...OutOfMemoryError" line comes without the prefix: the rule
    matches it alone, at once, while rank 4's traceback is read to its end; the traceback's match,
    above it in the file, is the finding's first occurrence (with no times, the file's order), its
    place among the findings too: rank 2's error, printed inside rank 4's traceback, came after it."""
    head = (
        "[rank4]: Traceback (most recent call last):\n"
        "[rank4]:   File \"/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/zero/partition_parameters.py\","
        " line 1810, in _allgather_params_coalesced\n"
        "[rank4]:     flat_tensor = torch.empty(tensor_size, dtype=param_list[0].ds_tensor.dtype,\n"
        "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "[rank4]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 462.00 MiB. GPU 4 has a total"
        " capacity of 79.11 GiB of which 462.56 MiB is free. Of the allocated memor"
    )
    rest = ("y 74.57 GiB is allocated by PyTorch, and 92.46 MiB is reserved by PyTorch but unallocated. If reserved"
            " but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n")
    whole = diagnosed(tmp_path, head + rest)["root_cause"]
    wrapped = diagnosed(tmp_path, head + "\n" + rest)["root_cause"]
    assert (whole["rule"], whole["rank"], whole["line"]) == (wrapped["rule"], wrapped["rank"], wrapped["line"]) == \
        ("cuda-oom", 4, 5)
    # With a time before each prefix, the wrapped rest has none: no two times to compare, the file's order.
    stamped = "".join(f"2026-11-28 10:00:0{i} {line}\n" for i, line in enumerate(head.split("\n")))
    timed = diagnosed(tmp_path, stamped + rest)["root_cause"]
    assert (timed["rule"], timed["rank"], timed["line"]) == ("cuda-oom", 4, 5)


def test_an_error_at_the_end_of_a_50_mb_line_is_found_and_the_cut_is_shown(tmp_path: Path) -> None:
    """A dumped tensor and then, on the same line, the error: lines over 64 KiB keep their head and
    their last 16 KiB, marked where they were cut (#31: the error was lost with the rest)."""
    log = tmp_path / "job.log"
    with log.open("wb") as stream:
        stream.write(b"step 1 loss 2.0\n[rank1]: tensor([")
        for _ in range(50):
            stream.write(b"0.1234, " * 131072)  # 1 MiB
        stream.write(b"]) RuntimeError: CUDA error: an illegal memory access was encountered\n")
    root = diagnose_json(str(log))["root_cause"]
    assert (root["rule"], root["rank"]) == ("cuda-illegal-access", 1)
    assert "…[line cut: 52,363," in root["evidence"][0] and root["evidence"][0].endswith("was encountered")


def test_an_exception_python_ignored_is_information_not_the_cause(tmp_path: Path) -> None:
    """CPython's PyErr_WriteUnraisable ("Exception ignored in: %R") and then the traceback: the
    program went on, so the job's later failure (here: none) is what counts."""
    result = diagnosed(tmp_path, (
        "Epoch 1: 100%|##########| 50/50 [00:10<00:00, 4.90it/s, loss=0.31]\n"
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f2a1c3b8d30>\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 1479, in __del__\n'
        "    self._shutdown_workers()\n"
        "AssertionError: can only test a child process\n"
        "Epoch 2: 100%|##########| 50/50 [00:10<00:00, 4.91it/s, loss=0.28]\n"
    ))
    assert result["root_cause"] is None
    (ignored,) = result["findings"]
    assert (ignored["rule"], ignored["severity"]) == ("python-exception-ignored", "info")
    assert ignored["evidence"][0].startswith("Exception ignored in:")


def test_a_horovod_stall_report_names_the_missing_rank_and_the_bare_warning_says_nothing(tmp_path: Path) -> None:
    """Horovod's stall_inspector.cc: the warning, then "Missing ranks:" and one line per rank; before
    0.20 a "[missing ranks: N]" per tensor. The warning alone (it can pass) is no failure."""
    warning = ("[2021-04-10 21:28:20.658706: W horovod/common/stall_inspector.cc:105] One or more tensors were "
               "submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder "
               "of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit "
               "different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. \n")
    assert diagnosed(tmp_path, warning)["root_cause"] is None
    old = diagnosed(tmp_path, "[1,0]<stderr>:[2019-04-13 13:53:31.851506: W horovod/common/operations.cc:588] "
                              "HorovodBroadcast_global_step_0 [missing ranks: 3]\n")["root_cause"]
    # A symptom named as the cause because nothing else was: weak, and it says why.
    assert (old["category"], old["rank"], old["confidence"]) == ("hang", 3, "weak")
    new = diagnosed(tmp_path, warning + "Missing ranks:\n1: [DistributedGradientTape_Allreduce/cond_1/HorovodAllreduce_AddN_0]\n")
    assert new["root_cause"]["category"] == "hang"


def test_a_stall_report_gives_way_to_a_rank_s_own_error_and_to_timeouts(tmp_path: Path) -> None:
    """A stall report or a stack dump is a symptom: an OOM on a rank, or the collective timeouts
    the stall ended in, say more."""
    stall = "[1,0]<stderr>:HorovodAllreduce_grad_0 [missing ranks: 1]\n"
    oom = ("[1,1]<stderr>:2019-08-26 18:41:15.943905: E tensorflow/stream_executor/cuda/cuda_driver.cc:828] "
           "failed to allocate 2.96G (3173555200 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n")
    root = diagnosed(tmp_path, stall + oom)["root_cause"]
    assert (root["category"], root["rank"], root["confidence"]) == ("cuda_oom", 1, "likely")
    dump = 'Thread 4886 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2501)\n'
    timeout = ("[rank3]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 3] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=2816, OpType=ALLREDUCE, NumelIn=26214400, NumelOut=26214400, "
               "Timeout(ms)=600000) ran for 600034 milliseconds before timing out.\n")
    assert diagnosed(tmp_path, dump)["root_cause"]["category"] == "hang"
    assert diagnosed(tmp_path, dump + timeout)["root_cause"]["category"] == "nccl_timeout"


def test_rank_0_names_the_rank_that_missed_the_monitored_barrier(tmp_path: Path) -> None:
    """ProcessGroupGloo::monitoredBarrier: rank 0 names the rank that did not arrive; the other
    ranks only report that rank 0 gave up."""
    root = diagnosed(tmp_path, (
        "[E ProcessGroupGloo.cpp:137] Rank 1 successfully reached monitoredBarrier, but received errors while "
        "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n"
        "RuntimeError: [Rank 0]: Rank 2 failed to pass monitoredBarrier in 30000 ms\n"
    ))["root_cause"]
    assert (root["rule"], root["rank"], root["category"]) == ("monitored-barrier-failed", 2, "gloo_timeout")


def test_a_rank_that_only_waited_on_rank_0_at_the_barrier_names_rank_0_in_a_two_rank_job(tmp_path: Path) -> None:
    """Without rank 0's own log: rank 1 reached the barrier (so it is not the one that hung) and
    waited on rank 0, the only other rank the log shows exists."""
    root = diagnosed(tmp_path, (
        "[E ProcessGroupGloo.cpp:137] Rank 1 successfully reached monitoredBarrier, but received errors while "
        "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : 1 (pid: 4242)\n"
    ))["root_cause"]
    assert (root["rank"], root["rank_source"], root["category"]) == (0, "hang", "gloo_timeout")


def test_a_peers_report_of_another_ranks_failure_takes_the_rank_mpirun_saw_fail_first(tmp_path: Path) -> None:
    """Horovod's SHUT_DOWN_ERROR (horovod/common/common.h) on rank 1 reports an exception on another
    rank; Open MPI's non-zero-exit help text names process [[jobid,1],0] as the first to exit."""
    root = diagnosed(tmp_path, (
        "[1,1]<stderr>:Traceback (most recent call last):\n"
        '[1,1]<stderr>:  File "/opt/conda/lib/python3.6/site-packages/horovod/torch/mpi_ops.py", line 436, in synchronize\n'
        "[1,1]<stderr>:    mpi_lib.horovod_torch_wait_and_clear(handle)\n"
        "[1,1]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception on one of the ranks or "
        "an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished execution. If the "
        "shutdown was caused by an exception, you should see the exception in the log before the first shutdown message.\n"
        "--------------------------------------------------------------------------\n"
        "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
        "the job to be terminated. The first process to do so was:\n"
        "\n"
        "  Process name: [[50371,1],0]\n"
        "  Exit code:    1\n"
    ))["root_cause"]
    assert root["role"] == "cascade" and (root["rank"], root["rank_source"]) == (0, "summary")


@pytest.mark.parametrize("known_rank_line, rank", [
    ("", 1),                                      # one node: the local rank is the global one
    ("[rank12]: step 100 loss 2.1\n", None),      # a rank beyond the local ones: another node
])
def test_a_local_rank_the_launcher_names_is_the_rank_only_where_the_log_shows_one_node(
        tmp_path: Path, known_rank_line: str, rank: int | None) -> None:
    """torchelastic's "failed (exitcode: 1) local_rank: 1 (pid: P)" after an error with no prefix."""
    root = diagnosed(tmp_path, (
        known_rank_line
        + "RuntimeError: CUDA error: invalid device ordinal\n"
        "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 10621 closing signal SIGTERM\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 1 (pid: 10622) of binary: /usr/bin/python3\n"
    ))["root_cause"]
    assert root["fields"]["exc_type"] == "RuntimeError"
    assert root["rank"] == rank and root["rank_source"] == ("local" if rank is not None else "")


@pytest.mark.parametrize("text, rule, category", [
    # Ray's GCS via worker.py, then the actor's ActorDiedError on the driver.
    ("2023-03-03 05:15:30,774\tWARNING worker.py:1866 -- The node with node id: 9426f4 and address: 10.0.0.7 and node "
     "name: 10.0.0.7 has been marked dead because the detector has missed too many heartbeats from it.\n"
     "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n",
     "ray-node-dead", "node_failure"),
    # Open MPI's help-errmgr-base.txt [lost-connection], then its non-zero-exit summary.
    ("ORTE has lost communication with a remote daemon.\n\n  HNP daemon   : [[16919,0],0] on node gpu-031\n"
     "  Remote daemon: [[16919,0],3] on node gpu-127\n\nThis is usually due to either a failure of the TCP network\n",
     "mpirun-lost-daemon", "node_failure"),
    # torch.distributed.launch (2.x) passes --local-rank; argparse rejects it on every worker.
    ("usage: train.py [-h] [--local_rank LOCAL_RANK]\ntrain.py: error: unrecognized arguments: --local-rank=1\n"
     "usage: train.py [-h] [--local_rank LOCAL_RANK]\ntrain.py: error: unrecognized arguments: --local-rank=0\n"
     "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 2) local_rank: 0 (pid: 1201) of binary: /usr/bin/python3\n",
     "launch-local-rank-argument", "launcher"),
    # The agent closes its workers with the signal it received: SIGHUP, the terminal went away.
    ("{'loss': 0.41, 'epoch': 2.3}\n"
     "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 102241 closing signal SIGHUP\n"
     "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 102242 closing signal SIGHUP\n",
     "torchrun-stopped-by-signal", "stopped"),
])
def test_lost_nodes_broken_launches_and_outside_stops_in_their_own_words(
        tmp_path: Path, text: str, rule: str, category: str) -> None:
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["rule"], root["category"]) == (rule, category)


@pytest.mark.parametrize("ready, world_line, rank", [
    ("0, 1, 3", "", 2),                                   # the gap below the highest ready rank
    ("2, 0, 1", "[1,3]<stderr>:Epoch 1/90\n", 3),          # a rank the log shows, missing from the list
    ("0, 1, 2", "", None),                                # every rank it can know of was ready
])
def test_horovods_ready_ranks_name_the_rank_the_others_waited_for(
        tmp_path: Path, ready: str, world_line: str, rank: int | None) -> None:
    """Horovod before 0.20 (operations.cc): "Stalled ops: <tensor> [ready ranks: ...]"."""
    root = diagnosed(tmp_path, world_line + (
        "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
        "and are waiting for remainder of ranks for more than 60 seconds.\n"
        f"Stalled ops: HorovodAllreduce_gradients_AddN_58_0 [ready ranks: {ready}], \n"
    ))["root_cause"]
    assert (root["rule"], root["rank"]) == ("horovod-stall", rank)
    if rank is not None:
        assert root["rank_source"] == "hang" and root["title"].startswith(f"Rank {rank} stalled")


def test_of_several_stalled_ops_the_rank_missing_from_most_is_named(tmp_path: Path) -> None:
    """One "Stalled ops:" line lists every stalled op with its ready ranks: here rank 3 took another
    path (it alone submitted the loss's all-reduce, and none of the gradients'), so it is the rank
    the others waited for, though the first op lists only rank 3 as ready."""
    root = diagnosed(tmp_path, (
        "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
        "and are waiting for remainder of ranks for more than 60 seconds. Stalled ops: "
        "HorovodAllreduce_loss_Mean_0 [ready ranks: 3], "
        "DistributedMomentumOptimizer_Allreduce/HorovodAllreduce_gradients_Conv2D_grad_0 [ready ranks: 2, 0, 1], "
        "DistributedMomentumOptimizer_Allreduce/HorovodAllreduce_gradients_BiasAdd_grad_0 [ready ranks: 0, 1, 2]\n"
    ))["root_cause"]
    assert (root["rule"], root["rank"], root["rank_source"]) == ("horovod-stall", 3, "hang")
    assert "rank 3 is missing from 2 of the 3 stalled collectives" in root["remedy"]


STALL_HEADER = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of "
                "ranks and are waiting for remainder of ranks for more than 60 seconds. Stalled ops: ")


@pytest.mark.parametrize("before, ops, rank", [
    # horovodrun --tag-output: the coordinator's own prefix is no answer to who was missing.
    ("", "[1,0]<stderr>:" + STALL_HEADER + "loss_0 [ready ranks: 3], grad_a_0 [ready ranks: 2, 0, 1], "
     "grad_b_0 [ready ranks: 0, 1, 2]", 3),
    # One rank alone ready for a metric, the three others waiting for it in the gradients': the
    # absence that kept three ranks waiting outweighs the three that kept one waiting.
    ("", STALL_HEADER + "metric_avg_0 [ready ranks: 2], grad_0 [ready ranks: 0, 1, 3]", 2),
    # Two ranks each alone in a collective: the report does not say which one stalled.
    ("", STALL_HEADER + "a_0 [ready ranks: 0], b_0 [ready ranks: 1]", None),
    # A world size some line gave that the report's own lists exceed: the lists say those ranks exist.
    ("world_size=2\n", STALL_HEADER + "loss_0 [ready ranks: 3], grad_a_0 [ready ranks: 2, 0, 1], "
     "grad_b_0 [ready ranks: 0, 1, 2]", 3),
    # A list cut before its bracket closes is not read as one.
    ("", STALL_HEADER + "loss_0 [ready ranks: 1], grad_a_0 [ready ranks: 0, 2], grad_b_0 [ready ranks: 0, 1", 1),
])
def test_a_stall_report_names_the_rank_whose_absence_kept_most_ranks_waiting(
        tmp_path: Path, before: str, ops: str, rank: int | None) -> None:
    root = diagnosed(tmp_path, before + ops + "\n")["root_cause"]
    assert (root["rule"], root["rank"]) == ("horovod-stall", rank)
    if rank is not None:
        assert root["rank_source"] == "hang"


def test_a_stall_report_in_chinese_names_the_rank_in_chinese(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text(STALL_HEADER + "loss_0 [ready ranks: 3], grad_a_0 [ready ranks: 2, 0, 1], "
                   "grad_b_0 [ready ranks: 0, 1, 2]\n")
    root = diagnose_json("--lang", "zh", str(log))["root_cause"]
    assert root["rank"] == 3
    assert "3 个停滞的集合通信中，有 2 个缺少 rank 3" in root["remedy"]
    assert "a rank" not in root["title"] + root["remedy"]


@pytest.mark.parametrize("lead", ["2024-11-20 14:37:16 ", "2021-03-10T13:22:37.443Z: ", "Fri Oct 23 17:16:00 2020"])
def test_a_time_written_before_the_rank_prefix_is_not_part_of_the_traceback(tmp_path: Path, lead: str) -> None:
    """A logging wrapper's (or ts's, or horovodrun --timestamp-output's) time before each line's
    prefix: the traceback's header, frames and exception line are read as the program wrote them."""
    prefix = "[rank3]: " if "[" not in lead and not lead.startswith("Fri") else "[3]<stderr>:"
    if lead.endswith("Z: "):
        prefix = "[1,3]<stderr>:"
    text = "".join(lead + prefix + body + "\n" for body in (
        "Traceback (most recent call last):",
        '  File "/home/u/train.py", line 61, in main',
        "    batch = collate(items)",
        "KeyError: 'input_ids'",
    ))
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["category"], root["rank"], root["fields"]["exc_type"]) == ("python_exception", 3, "KeyError")
    assert root["confidence"] == "likely"  # the whole traceback was read, not its last line alone


@pytest.mark.parametrize("text, rule", [
    # NCCL 2.12+ misc/socket.cc during ncclCommInitRank; TensorFlow/Horovod then says it failed.
    ("node2:1203:1290 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.3<43921> failed : "
     "Connection timed out\n"
     "tensorflow.python.framework.errors_impl.UnknownError: ncclCommInitRank failed: unhandled system error\n",
     "nccl-connect-failed"),
    # torch's distributed_c10d.py on a build without NCCL (Windows, macOS, CPU-only).
    ("-- Process 0 terminated with the following error:\nTraceback (most recent call last):\n"
     '  File "train.py", line 40, in run\n    dist.init_process_group(backend="nccl", rank=rank, world_size=2)\n'
     "RuntimeError: Distributed package doesn't have NCCL built in\n",
     "nccl-not-built"),
])
def test_nccl_failures_told_by_nccl_and_by_torch(tmp_path: Path, text: str, rule: str) -> None:
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["rule"], root["category"], root["role"]) == (rule, "nccl_error", "root")


@pytest.mark.parametrize("warn, rule, category", [
    # NCCL's CUDACHECK (checks.h): "Cuda failure '%s'" with cudaGetErrorString's text.
    ("init.cc:924 NCCL WARN Cuda failure 'device-side assert triggered'", "cuda-device-assert", "cuda_assert"),
    # Its /dev/shm segments say "No space left on device" too: shm, not the disk.
    ("include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",  # NCCL 2.7-2.11
     "nccl-shm", "shm_exhausted"),
    ("misc/shmutils.cc:87 NCCL WARN Error: failed to extend /dev/shm/nccl-oF4i4g to 33030148 bytes, "
     "error: No space left on device (28)", "nccl-shm", "shm_exhausted"),        # NCCL 2.12 on
])
def test_ncclss_own_warning_names_the_cause_before_torchs_wrapper(tmp_path: Path, warn: str, rule: str, category: str) -> None:
    """NCCL's WARN line, then torch's generic "NCCL error ... unhandled ... error": the WARN says why."""
    root = diagnosed(tmp_path, (
        f"node1:8639:8745 [0] {warn}\n"
        "node1:8639:8745 [0] NCCL INFO include/shm.h:41 -> 2\n"
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, unhandled system "
        "error, NCCL version 2.10.3\n"
    ))["root_cause"]
    assert (root["rule"], root["category"]) == (rule, category)


@pytest.mark.parametrize("text, rule", [
    # TensorFlow's BFC allocator for a tensor on the host.
    ("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
     "shape[1024,50000] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu\n",
     "host-alloc-failed"),
    # The kernel's oom_kill.c (__oom_kill_process), as dmesg shows it beside the job's output.
    ("step 4100 loss 2.2\n[ 8123.410123] Memory cgroup out of memory: Killed process 7015 (python) "
     "total-vm:212841116kB, anon-rss:198234520kB, file-rss:0kB\n", "host-oom-kill"),
    # An interactive bash's report of its foreground job killed by signal 9.
    ("step 4100 loss 2.2\nKilled\n", "sigkill"),
])
def test_host_memory_running_out_in_the_words_of_tensorflow_the_kernel_and_bash(
        tmp_path: Path, text: str, rule: str) -> None:
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["rule"], root["category"]) == (rule, "host_oom")


@pytest.mark.parametrize("quote", ["> ", "> > ", ">"])
def test_a_quoted_paste_is_read_as_the_program_wrote_it(tmp_path: Path, quote: str) -> None:
    """A log quoted in a GitHub comment or a mail: the quote marks go, the rank prefix and the
    traceback under them are read."""
    text = "".join(quote + line + "\n" for line in (
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "/home/u/train.py", line 61, in main',
        "[rank1]:     batch = collate(items)",
        "[rank1]: KeyError: 'input_ids'",
    ))
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["category"], root["rank"], root["fields"]["exc_type"], root["confidence"]) == (
        "python_exception", 1, "KeyError", "likely")


def test_a_progress_bar_between_the_frames_does_not_end_the_traceback(tmp_path: Path) -> None:
    """A log collector that writes tqdm's \\r as "#015" puts the bar's state between a traceback's
    frames: the frames and the exception after it are still the traceback's."""
    root = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "run_clm.py", line 344, in main\n'
        "    trainer.train()\n"
        '  File "/opt/conda/lib/python3.8/site-packages/torch/nn/parallel/distributed.py", line 282, in __init__\n'
        "#015 86%|########6 | 56/65 [00:04<00:00, 12.03ba/s]    ).format(device_ids, output_device)\n"
        "AssertionError: DistributedDataParallel device_ids and output_device arguments only work with "
        "single-device CUDA modules\n"
    ))["root_cause"]
    assert (root["fields"]["exc_type"], root["confidence"], root["fields"]["frame_line"]) == ("AssertionError", "likely", "344")


def test_the_report_of_a_hang_quotes_the_last_line_of_the_rank_that_hung() -> None:
    """Seven ranks time out in the all-reduce; rank 7 never reported: its last line says what it
    was doing (fetching a data shard), from the end of the file, bounded."""
    log = Path(__file__).resolve().parents[1] / "sample_logs" / "documented" / "nccl-timeout-hang-tee-8ranks.log"
    root = diagnose_json(str(log))["root_cause"]
    assert (root["rank"], root["rank_source"]) == (7, "hang")
    assert root["evidence"][-1] == "rank 7's last line: [default7]:[data] fetching shard 17/64 from s3://corpus/tok/shard-0017.bin"
    assert root["fields"]["suspect_last_line"].endswith("fetching shard 17/64 from s3://corpus/tok/shard-0017.bin")


# torchelastic's summary (_format_failure in torch/distributed/elastic/multiprocessing/errors): with
# @record on the entry point, the root cause's entry carries the rank's traceback after
# "traceback : ", each line after the first indented two more spaces.
TORCHELASTIC_SUMMARY = """\
Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 892, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2024-05-02_10:11:12
  host      : node-b
  rank      : 6 (local_rank: 2)
  exitcode  : -15 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 4242
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-05-02_10:11:10
  host      : node-b
  rank      : 5 (local_rank: 1)
  exitcode  : 1 (pid: 4241)
  error_file: /tmp/torchelastic_x/none_y/attempt_0/1/error.json
  traceback : Traceback (most recent call last):
    File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 357, in wrapper
      return f(*args, **kwargs)
             ^^^^^^^^^^^^^^^^^^
    File "/home/u/train.py", line 40, in main
      raise ValueError(f"bad shard {shard}")
  ValueError: bad shard 17
  
============================================================
"""


def test_the_traceback_in_torchelastics_summary_is_its_ranks_exception(tmp_path: Path) -> None:
    root = diagnosed(tmp_path, TORCHELASTIC_SUMMARY)["root_cause"]
    assert (root["category"], root["rank"], root["rank_source"]) == ("python_exception", 5, "summary")
    assert (root["fields"]["exc_type"], root["fields"]["frame_file"], root["fields"]["frame_line"]) == (
        "ValueError", "/home/u/train.py", "40")


def test_a_known_error_in_torchelastics_summary_takes_its_rank(tmp_path: Path) -> None:
    text = TORCHELASTIC_SUMMARY.replace("ValueError: bad shard 17", (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity "
        "of 79.14 GiB of which 1.20 GiB is free."))
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["category"], root["rank"], root["rule"]) == ("cuda_oom", 5, "cuda-oom")


def test_a_traceback_shifted_right_as_a_whole_is_still_read(tmp_path: Path) -> None:
    """The summary's entry cut above its header (a paste of its end): frames at four spaces, the
    exception line at two."""
    cut = TORCHELASTIC_SUMMARY[TORCHELASTIC_SUMMARY.index("    File \"/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic"):]
    root = diagnosed(tmp_path, cut)["root_cause"]
    assert (root["category"], root["fields"]["exc_type"], root["fields"]["frame_line"]) == ("python_exception", "ValueError", "40")


# NCCL_DEBUG=INFO (src/debug.cc: "%s:%d:%d [%d] NCCL INFO " with host, pid, tid and the CUDA device;
# a WARN adds "%s:%d " of its source): the device is no rank, but the process's own setup lines
# say its rank: "comm %p rank %d nranks %d cudaDev %d busId %lx - Init COMPLETE" (init.cc),
# "Channel %02d/%d : %d[%d] -> %d[%d] via ..." (the sender's rank first; "[receive]" lines put
# the peer first: transport/net.cc).
NCCL_SETUP = (
    "n1:700:790 [0] NCCL INFO comm 0x5581 rank 4 nranks 8 cudaDev 0 busId 1000 commId 0x9f - Init COMPLETE\n"
    "n1:701:791 [1] NCCL INFO comm 0x5582 rank 5 nranks 8 cudaDev 1 busId 2000 commId 0x9f - Init COMPLETE\n"
    "n1:700:792 [0] NCCL INFO Channel 00/02 : 3[3000] -> 4[1000] [receive] via NET/IB/0\n"
    "n1:701:793 [1] NCCL INFO Channel 00/02 : 5[2000] -> 6[3000] [send] via NET/IB/0\n"
    # A tensor-parallel group of two beside the world: other ranks, a narrower communicator.
    "n1:701:794 [1] NCCL INFO comm 0x5590 rank 1 nranks 2 cudaDev 1 busId 2000 commId 0xa1 - Init COMPLETE\n"
)


def test_an_nccl_error_takes_the_rank_its_process_set_up_with(tmp_path: Path) -> None:
    root = diagnosed(tmp_path, NCCL_SETUP + "n1:701:701 [1] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'\n")["root_cause"]
    assert (root["category"], root["rank"], root["rank_source"]) == ("cuda_oom", 5, "process")


def test_channel_lines_alone_name_the_rank_only_where_they_agree(tmp_path: Path) -> None:
    channels = (
        "n2:900:990 [0] NCCL INFO Channel 00/02 : 2[1000] -> 3[2000] via P2P/CUMEM/read\n"
        "n2:900:990 [0] NCCL INFO Channel 01/02 : 1[1000] -> 2[2000] [receive] via NET/Socket/0\n"
        "n2:901:991 [1] NCCL INFO Channel 00/02 : 3[2000] -> 0[1000] via P2P/CUMEM/read\n"
        "n2:901:991 [1] NCCL INFO Channel 00/02 : 1[2000] -> 0[1000] via P2P/CUMEM/read\n"
    )
    warn = "n2:{pid}:{pid} [0] enqueue.cc:1085 NCCL WARN Cuda failure 'out of memory'\n"
    root = diagnosed(tmp_path, channels + warn.format(pid=900))["root_cause"]
    assert (root["category"], root["rank"], root["rank_source"]) == ("cuda_oom", 2, "process")
    root = diagnosed(tmp_path, channels + warn.format(pid=901))["root_cause"]
    assert (root["category"], root["rank"]) == ("cuda_oom", None)  # its channels disagree


def test_the_rank_a_process_says_after_its_error_is_the_errors_rank_in_both_readings(tmp_path: Path) -> None:
    """NCCL's abort line after the WARN ("comm %p rank %d nranks %d cudaDev %d busId %lx - Abort
    COMPLETE", init.cc): the fast scan reads a file's first lines in bulk before their matches, the
    line-by-line reading (a live session's) learns the rank after the finding was taken; both name it."""
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.diagnosis.diagnose import diagnose_paths

    log = tmp_path / "nccl.log"
    catalogue = load_catalogue(include_user=False)
    catalogue.model_path = None
    warn = "n3:{pid}:{tid} [{dev}] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer n4<41022>\n"
    abort = "n3:{pid}:{pid} [{dev}] NCCL INFO comm 0x1b8{dev} rank {rank} nranks {size} cudaDev {dev} busId 7000 - Abort COMPLETE\n"
    log.write_text(warn.format(pid=600, tid=610, dev=1) + "n3:600:610 [1] NCCL INFO misc/socket.cc:546 -> 6\n"
                   + abort.format(pid=600, dev=1, rank=2, size=4))
    for fast in (True, False):
        root = diagnose_paths([str(log)], catalogue, fast=fast).root_cause
        assert root is not None and (root.category, root.rank, root.rank_source) == ("nccl_error", 2, "process"), fast
        assert "rank 2" in root.title, fast
    # Two processes, each saying its rank after its error: the finding is of both ranks, and tells
    # of the first; a process whose two communicators as wide say two ranks is of none.
    both = (warn.format(pid=600, tid=610, dev=1) + warn.format(pid=700, tid=710, dev=0)
            + abort.format(pid=600, dev=1, rank=2, size=4) + abort.format(pid=700, dev=0, rank=3, size=4))
    for text, ranks in ((both, [2, 3]), (both + abort.format(pid=700, dev=0, rank=1, size=4), [2])):
        log.write_text(text)
        for fast in (True, False):
            root = diagnose_paths([str(log)], catalogue, fast=fast).root_cause
            assert root is not None and (root.rank, root.ranks) == (2, ranks), (fast, ranks)


def test_an_nccl_line_behind_rays_worker_label_is_its_process_in_both_readings(tmp_path: Path) -> None:
    """Ray prints a worker's output behind "(pid=N) ": NCCL's own host:pid, not Ray's label, keys the
    process, so the channel line's rank reaches the WARN in the fast scan and the line-by-line reading."""
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.diagnosis.diagnose import diagnose_paths

    log = tmp_path / "ray.log"
    log.write_text(
        "(pid=34272) n5:34272:34565 [0] NCCL INFO Channel 00 : 3[b0] -> 0[80] via P2P/IPC\n"
        "(pid=34272) n5:34272:34565 [0] transport/p2p.cc:238 NCCL WARN Cuda failure 'peer access is not supported "
        "between these two devices'\n"
        "(pid=34275) n5:34275:34567 [0] NCCL INFO Channel 00 : 0[80] -> 1[90] via P2P/IPC\n")
    catalogue = load_catalogue(include_user=False)
    catalogue.model_path = None
    for fast in (True, False):
        root = diagnose_paths([str(log)], catalogue, fast=fast).root_cause
        assert root is not None and (root.rule, root.rank, root.rank_source) == ("nccl-cuda-failure", 3, "process"), fast


def test_a_traceback_cut_before_its_exception_still_says_something_failed_there(tmp_path: Path) -> None:
    """CPython's traceback (its header, then '  File "{}", line {}, in {}' frames) with the paste or
    the file ending before the exception line: a weak finding with the rank and the user's frame,
    instead of 'No failure found'."""
    result = diagnosed(tmp_path, (
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "/home/u/train.py", line 88, in <module>\n'
        "[rank3]:     main()\n"
        '[rank3]:   File "/home/u/train.py", line 61, in main\n'
        "[rank3]:     loss.backward()\n"
        '[rank3]:   File "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", line 525, in backward\n'
        "[rank3]:     torch.autograd.backward(\n"
    ))
    root = result["root_cause"]
    assert (root["rule"], root["category"], root["rank"], root["confidence"]) == ("python-exception-cut", "python_exception", 3, "weak")
    assert (root["fields"]["frame_file"], root["fields"]["frame_line"]) == ("/home/u/train.py", "61")
    assert "not in what was read" in root["remedy"]


def test_a_cut_traceback_whose_header_lost_its_prefix_is_still_that_ranks(tmp_path: Path) -> None:
    """A paste that began on the header line's text, its '[rank2]: ' left behind: the header is
    another stream's, the frames start the rank's record (CPython's '  File "{}", line {}, in {}')."""
    body = ('[rank2]:   File "/home/u/train_sft.py", line 89, in train\n'
            "[rank2]:     (model, optim, scheduler) = strategy.prepare((model, optim, scheduler))\n"
            '[rank2]:   File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/config.py", line 961, in _configure\n'
            "[rank2]:     self._batch_assertion()\n")
    root = diagnosed(tmp_path, "Traceback (most recent call last):\n" + body)["root_cause"]
    assert (root["rule"], root["rank"], root["fields"]["frame_line"]) == ("python-exception-cut", 2, "89")
    # One frame alone (a quoted line, a warning's location) is no traceback.
    assert diagnosed(tmp_path, body.split("\n", 2)[0] + "\n[rank2]: epoch 1 done\n")["root_cause"] is None


def test_frames_a_process_printed_and_went_on_from_are_no_cut_traceback(tmp_path: Path) -> None:
    # traceback.print_stack() writes frames without a header; logging's stack_info=True writes them
    # under "Stack (most recent call last):". The process logs on after them.
    frames = ('  File "/home/u/train.py", line 40, in <module>\n    main()\n'
              '  File "/home/u/train.py", line 30, in main\n    traceback.print_stack()\n')
    assert diagnosed(tmp_path, "step 1 loss 2.0\n" + frames + "step 2 loss 1.9\n")["root_cause"] is None
    assert diagnosed(tmp_path, "step 1 loss 2.0\nStack (most recent call last):\n" + frames
                     + "2024-01-01 10:00:00 INFO step 2\n")["root_cause"] is None


def test_a_cut_traceback_gives_way_to_an_error_a_line_names(tmp_path: Path) -> None:
    result = diagnosed(tmp_path, (
        "RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.10.3\n"
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 61, in main\n'
        "    loss.backward()\n"
    ))
    assert result["root_cause"]["rule"] == "nccl-error"
    assert "python-exception-cut" in {f["rule"] for f in result["findings"]}


def test_a_worker_traceback_logged_line_by_line_under_a_prefix_and_a_header_is_read(tmp_path: Path) -> None:
    """vLLM's executor prefixes each worker's output with (VllmWorker rank=N pid=P), and its
    logger ('%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s', vllm/logger.py)
    heads every line of a message: the traceback under both is the rank's."""
    root = diagnosed(tmp_path, """(VllmWorker rank=2 pid=10233) ERROR 06-17 06:11:34 [multiproc_executor.py:492] Traceback (most recent call last):
(VllmWorker rank=2 pid=10233) ERROR 06-17 06:11:34 [multiproc_executor.py:492]   File "/usr/local/lib/python3.10/site-packages/vllm/v1/executor/multiproc_executor.py", line 487, in worker_busy_loop
(VllmWorker rank=2 pid=10233) ERROR 06-17 06:11:34 [multiproc_executor.py:492]     output = func(*args, **kwargs)
(VllmWorker rank=2 pid=10233) ERROR 06-17 06:11:34 [multiproc_executor.py:492]   File "/home/u/model.py", line 40, in forward
(VllmWorker rank=2 pid=10233) ERROR 06-17 06:11:34 [multiproc_executor.py:492]     raise ValueError("bad shape")
(VllmWorker rank=2 pid=10233) ERROR 06-17 06:11:34 [multiproc_executor.py:492] ValueError: bad shape
(VllmWorker rank=0 pid=10231) INFO 06-17 06:11:35 [multiproc_executor.py:400] shutting down
""")["root_cause"]
    assert (root["category"], root["rank"], root["fields"]["exc_type"], root["fields"]["frame_line"]) == (
        "python_exception", 2, "ValueError", "40")


@pytest.mark.parametrize("recomputed, partitioned", [("torch.Size([0])", True), ("torch.Size([7, 64])", False)])
def test_activation_checkpointings_mismatch_is_its_own_error_with_the_sharding_advice_where_shapes_are_empty(
        tmp_path: Path, recomputed: str, partitioned: bool) -> None:
    """torch/utils/checkpoint.py's CheckpointError: its message, each mismatched tensor's
    'saved metadata: ...' / 'recomputed metadata: ...', then the debug tip; another rank's
    traceback follows."""
    result = diagnosed(tmp_path, (
        "[rank2]: torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for the "
        "following tensors have different metadata than during the forward pass.\n"
        "[rank2]: tensor at position 4:\n"
        "[rank2]: saved metadata: {'shape': torch.Size([7, 128]), 'dtype': torch.bfloat16, 'device': device(type='cuda', index=2)}\n"
        f"[rank2]: recomputed metadata: {{'shape': {recomputed}, 'dtype': torch.bfloat16, 'device': device(type='cuda', index=2)}}\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "/home/u/train.py", line 40, in <module>\n'
    ))
    root = result["root_cause"]
    assert (root["rule"], root["category"], root["rank"]) == ("activation-checkpoint-mismatch", "python_exception", 2)
    assert ("use_reentrant=True" in root["remedy"]) is partitioned


@pytest.mark.parametrize("lead", [
    "2024-05-01T10:11:12.000001Z ",  # kubectl logs --timestamps, docker logs -t
    "Mar 04 01:22:35 ",  # ts's default format
    "May  1 10:00:00 gpu-node-3 python[4242]: ",  # syslog, journalctl's short output
    "2023/10/26 12:12:20 ",  # Go's log package (a collector's), ts "%Y/%m/%d %T"
    "[2024-05-01 10:00:00] ",
    "2023-11-21 00:57:56.933 [ERROR] ",  # stderr sent through a logger: every line gets its head
    "2024-05-01 10:00:00.123 | ERROR    | __main__:write:12 - ",  # loguru's default format
    "2024-05-01 10:00:00,123 - ERROR - ",  # logging's "%(asctime)s - %(levelname)s - %(message)s"
    "2024-05-01 10:00:00,123 - stderr - ERROR - ",  # ... "%(asctime)s - %(name)s - %(levelname)s - ..."
])
def test_a_traceback_a_log_collector_timed_line_by_line_is_still_one_traceback(tmp_path: Path, lead: str) -> None:
    """A time (and a logger's level) before every line, the frames' indentation after it."""
    lines = ["Traceback (most recent call last):", '  File "/home/u/train.py", line 61, in main',
             "    loss = step(batch)", "ValueError: Expected input batch_size (32) to match target batch_size (16)."]
    result = diagnosed(tmp_path, "".join(f"{lead}{line}\n" for line in lines))
    root = result["root_cause"]
    assert (root["category"], root["fields"]["exc_type"], root["fields"]["frame_line"]) == \
        ("python_exception", "ValueError", "61")


# The training loop's own "done" (Megatron's print_datetime, transformers' Trainer, Lightning's
# fit loop), then a stop from outside: the processes had not exited (a hang at exit).
SLURM_TIME_LIMIT = "slurmstepd: error: *** STEP 4242.0 ON gpu-17 CANCELLED AT 2025-01-02T03:04:05 DUE TO TIME LIMIT ***\n"
TORCHRUN_STOPPED = ("W0102 03:04:05.000000 4242 site-packages/torch/distributed/elastic/agent/server/api.py:704] "
                    "Received 15 death signal, shutting down workers\n")


@pytest.mark.parametrize(("finished", "stop", "stopped_by"), [
    ("[after training is done] datetime: 2025-01-02 02:00:00.123456 \n", SLURM_TIME_LIMIT, "SLURM ended"),
    ("\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n\n", TORCHRUN_STOPPED,
     "torchrun"),
    ("INFO:lightning.pytorch.utilities.rank_zero:`Trainer.fit` stopped: `max_epochs=3` reached.\n", SLURM_TIME_LIMIT,
     "SLURM ended"),
])
def test_a_stop_after_training_said_it_finished_is_a_hang_at_exit(tmp_path: Path, finished: str, stop: str,
                                                                  stopped_by: str) -> None:
    root = diagnosed(tmp_path, "step 999 loss 1.02\n" + finished + stop)["root_cause"]
    assert (root["category"], root["rule"], root["confidence"]) == ("hang", "training-finished", "likely")
    assert root["title"].startswith(f"The job did not exit after training finished; stopped by: {stopped_by}")
    assert "torch.distributed.destroy_process_group()" in root["remedy"]


def test_a_hang_at_exit_speaks_the_output_language(tmp_path: Path) -> None:
    log = tmp_path / "job.log"
    log.write_text("[after training is done] datetime: 2025-01-02 02:00:00.123456 \n" + SLURM_TIME_LIMIT)
    out = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--lang", "zh", "--json", str(log)],
                         capture_output=True, text=True, timeout=60)
    root = json.loads(out.stdout)["root_cause"]
    assert root["title"].startswith("训练结束后作业没有退出；停止它的是：SLURM")
    assert "torch.distributed.destroy_process_group()" in root["remedy"] and "py-spy dump --pid" in root["remedy"]
    assert "The training loop" not in root["remedy"] and "两者之间" in root["confidence_note"]


# A slurmstepd cancel line cut right after "ON" (a paste's end) is still SLURM ending the step.
def test_a_stop_cut_mid_line_after_training_finished_is_a_hang_at_exit(tmp_path: Path) -> None:
    root = diagnosed(tmp_path, "[after training is done] datetime: 2026-04-20 03:17:08\n"
                               "[2026-04-20T03:25:23.011] error: *** STEP 1942963.1 ON\n")["root_cause"]
    assert (root["category"], root["rule"]) == ("hang", "training-finished")
    assert root["title"].endswith("SLURM stopped STEP 1942963.1 on its node")


def test_training_that_finished_and_was_not_stopped_or_failed_after_is_no_hang(tmp_path: Path) -> None:
    finished = "[after training is done] datetime: 2025-01-02 02:00:00.123456 \n"
    assert diagnosed(tmp_path, "step 999 loss 1.02\n" + finished)["root_cause"] is None
    # A stop while training ran is the stop.
    root = diagnosed(tmp_path, "step 999 loss 1.02\n" + SLURM_TIME_LIMIT)["root_cause"]
    assert root["category"] == "slurm_event"
    # A failure after the training loop finished (an evaluation's OOM) is that failure.
    root = diagnosed(tmp_path, finished + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
                     + SLURM_TIME_LIMIT)["root_cause"]
    assert root["category"] == "cuda_oom"


# torch._dynamo's suppressed compile error (torch/_dynamo/exc.py, format_error_msg): it logs the
# traceback after "WON'T CONVERT {name} {file} line {n} \ndue to: \n" and runs the frame eagerly.
DYNAMO_TRACEBACK = """\
Traceback (most recent call last):
  File "/usr/lib/python3.10/site-packages/torch/_dynamo/convert_frame.py", line 786, in _convert_frame
    result = inner_convert(
  File "/home/u/model.py", line 88, in forward
    x = self.custom_op(x)
torch._dynamo.exc.Unsupported: call_function UserDefinedObjectVariable(custom_op) [TensorVariable()] {}
"""


@pytest.mark.parametrize(("intro", "prefix"), [
    ("W1120 10:11:12.345000 4242 torch/_dynamo/convert_frame.py:824] WON'T CONVERT forward /home/u/model.py line 88 \n"
     "due to: \n", ""),
    # torch.compile's verbose form, under torchrun's rank prefixes.
    ("W1120 10:11:12.345000 4242 torch/_dynamo/convert_frame.py:824] WON'T CONVERT forward /home/u/model.py "
     "line 88\n========== TorchDynamo Stack Trace ==========\n", "[rank1]:"),
])
def test_a_compile_error_torch_compile_logged_and_ran_past_is_no_failure(tmp_path: Path, intro: str, prefix: str) -> None:
    text = "step 10 loss 2.34\n" + intro + DYNAMO_TRACEBACK + "\nstep 20 loss 2.12\n"
    result = diagnosed(tmp_path, "".join(prefix + line for line in text.splitlines(keepends=True)))
    assert result["root_cause"] is None
    [handled] = [f for f in result["findings"] if f["rule"] == "python-exception-handled"]
    assert handled["severity"] == "info" and handled["fields"]["frame_line"] == "88"
    # The same error raised (suppress_errors off, the default): the job's failure.
    root = diagnosed(tmp_path, "step 10 loss 2.34\n" + DYNAMO_TRACEBACK)["root_cause"]
    assert (root["category"], root["rule"]) == ("python_exception", "python-exception")


def test_an_exception_groups_traceback_names_its_sub_exception(tmp_path: Path) -> None:
    """Python 3.11's exception group (traceback.py, _ExceptionPrintContext.emit): every line behind
    a gutter of "| " (two spaces a level), the sub-exceptions between rulers; the group only reports them."""
    group = (
        "  + Exception Group Traceback (most recent call last):\n"
        '  |   File "/home/u/train.py", line 40, in <module>\n'
        "  |     asyncio.run(main())\n"
        "  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)\n"
        "  +-+---------------- 1 ----------------\n"
        "    | Traceback (most recent call last):\n"
        '    |   File "/home/u/data.py", line 31, in load_shard\n'
        "    |     raise FileNotFoundError(path)\n"
        "    | FileNotFoundError: /data/shard-00007.parquet\n"
        "    +------------------------------------\n"
    )
    text = "step 1 loss 2.0\n" + "".join(f"[rank3]: {line}\n" for line in group.splitlines())
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["category"], root["rank"], root["confidence"]) == ("python_exception", 3, "likely")
    fields = root["fields"]
    assert (fields["exc_type"], fields["message"]) == ("FileNotFoundError", "/data/shard-00007.parquet")
    assert (fields["frame_file"], fields["frame_line"]) == ("/home/u/data.py", "31")


def test_deepspeeds_exit_line_names_no_rank_its_command_is_the_last_one_started(tmp_path: Path) -> None:
    """deepspeed/launcher/launch.py logs "{cmd} exits with return code = {rc}" with cmd left over from
    its spawn loop: the last process's command, whichever process failed."""
    spawned = "".join(
        f"[2023-11-13 16:50:01,10{r}] [INFO] [launch.py:253:main] process 943{r} spawned with command: "
        f"['/opt/conda/bin/python', '-u', 'train.py', '--local_rank={r}']\n" for r in range(4))
    result = diagnosed(tmp_path, spawned + (
        "[2023-11-13 16:59:55,640] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 9431\n"
        "[2023-11-13 16:59:55,650] [ERROR] [launch.py:321:sigkill_handler] ['/opt/conda/bin/python', '-u', "
        "'train.py', '--local_rank=3'] exits with return code = -9\n"))
    root = result["root_cause"]
    assert (root["category"], root["rule"], root["rank"]) == ("host_oom", "sigkill", None)
    assert "rank 3" not in root["remedy"].lower()


def test_the_kernels_oom_report_confirms_a_sigkill_with_the_victims_numbers_from_its_later_line(tmp_path: Path) -> None:
    """mm/oom_kill.c prints "invoked oom-killer" and the one-line summary before the victim's line:
    the finding made from the first takes the numbers it lacks (anon-rss) from the last."""
    result = diagnosed(tmp_path, (
        "E0302 10:05:12.000000 4242 site-packages/torch/distributed/elastic/multiprocessing/api.py:869] "
        "failed (exitcode: -9) local_rank: 1 (pid: 30712) of binary: /usr/bin/python3\n"
        "[Sat Mar  2 10:05:11 2024] python3 invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, "
        "oom_score_adj=0\n"
        "[Sat Mar  2 10:05:11 2024] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
        "global_oom,task_memcg=/user.slice,task=python3,pid=30712,uid=1000\n"
        "[Sat Mar  2 10:05:11 2024] Out of memory: Killed process 30712 (python3) total-vm:92841116kB, "
        "anon-rss:61234520kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:131204kB oom_score_adj:0\n"))
    root = result["root_cause"]
    assert (root["rule"], root["category"], root["confidence"]) == ("sigkill", "host_oom", "certain")
    assert "The kernel's OOM killer killed python3 (pid 30712) holding 61234520kB of anonymous memory" in root["remedy"]
    [kernel] = [f for f in result["findings"] if f["rule"] == "host-oom-kill"]
    assert kernel["count"] == 3 and kernel["fields"]["anon_rss"] == "61234520kB"
    assert kernel["fields"]["invoker"] == "python3"


def test_mpiruns_lost_daemon_report_names_the_node_its_later_line_gives(tmp_path: Path) -> None:
    """help-errmgr-base.txt [lost-connection]: the node comes two lines after the report's first."""
    root = diagnosed(tmp_path, (
        "ORTE has lost communication with a remote daemon.\n\n"
        "  HNP daemon   : [[16919,0],0] on node gpu-node-001\n"
        "  Remote daemon: [[16919,0],3] on node gpu-node-127\n\n"
        "This is usually due to either a failure of the TCP network\n"))["root_cause"]
    assert (root["rule"], root["title"]) == ("mpirun-lost-daemon", "mpirun lost gpu-node-127")


def test_a_nan_without_a_rank_takes_the_rank_the_same_failure_names_later(tmp_path: Path) -> None:
    """Megatron's training_log line (' iteration {}/{} | ... | grad norm: {} |') has no rank; its
    loss check then raises "Rank {}: found NaN in local forward loss calculation. Device: {}, node: {}"."""
    root = diagnosed(tmp_path, (
        " iteration        1/    5000 | consumed samples:          128 | lm loss: 1.196676E+01 | loss scale: 1.0 | "
        "grad norm: nan | number of skipped iterations:   0 |\n"
        "AssertionError: Rank 114: found NaN in local forward loss calculation. Device: 2, node: gpu-node-15\n"
    ))["root_cause"]
    assert (root["category"], root["rank"], root["rank_source"]) == ("nan_loss", 114, "related")


def test_two_ranks_named_by_the_same_failure_leave_a_rankless_root_without_one(tmp_path: Path) -> None:
    root = diagnosed(tmp_path, (
        " iteration        1/    5000 | lm loss: 1.196676E+01 | grad norm: nan |\n"
        "AssertionError: Rank 3: found NaN in local forward loss calculation. Device: 3, node: a\n"
        "AssertionError: Rank 9: found NaN in local forward loss calculation. Device: 1, node: b\n"
    ))["root_cause"]
    assert root["category"] == "nan_loss" and root["rank"] is None


def test_an_oom_kill_explains_the_ray_actor_that_died_of_it(tmp_path: Path) -> None:
    """SLURM's task/cgroup plugin ("Detected %lu oom-kill event(s) in %s") beside Ray's
    RayActorError default message ("The actor died unexpectedly before finishing this task.") and
    Tune's TuneError("Trials did not complete", ...): both report a process that died, the kill
    says of what."""
    root = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/tune_run.py", line 40, in <module>\n'
        "    tune.run(trainable, num_samples=4)\n"
        '  File "/opt/venv/lib/python3.10/site-packages/ray/tune/tune.py", line 272, in run\n'
        '    raise TuneError("Trials did not complete", errored_trials)\n'
        "ray.tune.error.TuneError: ('Trials did not complete', [trainable_3f2a1_00001])\n"
        "slurmstepd: error: Detected 3 oom-kill event(s) in StepId=4412.0. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler.\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.10/site-packages/ray/_private/worker.py", line 2524, in get\n'
        "    raise value\n"
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
    ))["root_cause"]
    assert (root["rule"], root["category"]) == ("host-oom-kill", "host_oom")


def test_a_named_nccl_error_outranks_the_exception_that_only_wraps_it(tmp_path: Path) -> None:
    """DistBackendError is torch's wrapper of any NCCL failure (a report of another failure); a
    paste wrapped at 100 columns cut its "NCCL error in: {file}:{line}, {reason}" line, and the
    ncclGetLastError text after it ("ncclInternalError: Internal check failed.") names the failure."""
    root = diagnosed(tmp_path, (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp\n"
        ":1331, internal error - please report this issue to the NCCL developers, NCCL version 2.18.1\n"
        "ncclInternalError: Internal check failed.\n"
        "Last error:\n"
        "Attribute busid of node nic not found\n"
    ))["root_cause"]
    assert (root["rule"], root["category"]) == ("nccl-error", "nccl_error")


def test_an_exception_raised_in_the_launchers_own_code_is_a_failed_launch(tmp_path: Path) -> None:
    """accelerate's CLI reads its config before it starts anything (commands/config/config_args.py,
    from_yaml_file: ``cls(**config_dict)``): a key of another version's config is a TypeError there."""
    result = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/bin/accelerate", line 8, in <module>\n'
        "    sys.exit(main())\n"
        '  File "/opt/venv/lib/python3.10/site-packages/accelerate/commands/accelerate_cli.py", line 48, in main\n'
        "    args.func(args)\n"
        '  File "/opt/venv/lib/python3.10/site-packages/accelerate/commands/launch.py", line 1071, in launch_command\n'
        "    defaults = load_config_from_file(args.config_file)\n"
        '  File "/opt/venv/lib/python3.10/site-packages/accelerate/commands/config/config_args.py", line 63, in load_config_from_file\n'
        "    config_class.from_yaml_file(yaml_file=config_file)\n"
        '  File "/opt/venv/lib/python3.10/site-packages/accelerate/commands/config/config_args.py", line 171, in from_yaml_file\n'
        "    return cls(**config_dict)\n"
        "TypeError: ClusterConfig.__init__() got an unexpected keyword argument 'fsdp_sync_module_states'\n"
    ))
    root = result["root_cause"]
    assert (root["rule"], root["category"], root["fields"]["launcher"]) == ("python-exception", "launcher", "accelerate")
    assert root["title"] == "accelerate failed before the training started: TypeError"
    assert root["fields"]["frame_func"] == "from_yaml_file" and root["fields"]["frame_line"] == "171"
    assert "`accelerate config` writes a new one" in root["remedy"]


def test_where_a_chain_is_cut_decides_what_it_reports(tmp_path: Path) -> None:
    """A chain cut right after its "During handling ..." line is the same as one cut after the next
    header (the last exception shown, weak); one cut among the next traceback's frames is a cut
    traceback that points at its last frame; a retry after the cut chain is a logged, handled one."""
    first = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/data.py", line 52, in __next__\n'
        "    return next(self._it)\n"
        "StopIteration\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
    )
    marker = diagnosed(tmp_path, first)["root_cause"]
    assert (marker["fields"]["exc_type"], marker["confidence"]) == ("StopIteration", "weak")
    assert "cut from the log" in marker["remedy"]
    frames = diagnosed(tmp_path, first + (
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 55, in main\n'
        "    batch = next(loader)\n"
    ))["root_cause"]
    assert (frames["rule"], frames["fields"]["frame_line"]) == ("python-exception-cut", "55")
    retried = diagnosed(tmp_path, first + (
        "\nTraceback (most recent call last):\nWARNING: upload failed, retrying in 5 s (attempt 2/5)\nstep 100 loss 2.31\n"))
    assert retried["root_cause"] is None


def test_wandbs_own_frames_are_found_past_pythons_threading_and_never_in_its_data_types(tmp_path: Path) -> None:
    """A thread of wandb's starts at threading.py's run: past Python's own frames the outermost is
    wandb's. Where wandb called a library that raised, the report points at wandb's frame. An error in
    wandb's data types (wandb.Image of the wrong shape) is about the user's data, not the tracker."""
    site = "/opt/conda/lib/python3.10/site-packages"
    thread = diagnosed(tmp_path, "".join(line + "\n" for line in (
        "Exception in thread SenderThread:",
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/threading.py", line 1016, in _bootstrap_inner',
        "    self.run()",
        f'  File "{site}/wandb/sdk/internal/internal_util.py", line 49, in run',
        "    self._run()",
        f'  File "{site}/requests/models.py", line 1021, in raise_for_status',
        "    raise HTTPError(http_error_msg, response=self)",
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://api.wandb.ai/graphql",
    )))["root_cause"]
    assert thread["category"] == "wandb" and thread["fields"]["frame_file"] == f"{site}/wandb/sdk/internal/internal_util.py"
    assert "wandb's own code raised this at" in thread["remedy"]
    data = diagnosed(tmp_path, "".join(line + "\n" for line in (
        "Traceback (most recent call last):",
        f'  File "{site}/wandb/sdk/wandb_run.py", line 1800, in log',
        "    self._log(data)",
        f'  File "{site}/wandb/sdk/data_types/image.py", line 290, in _initialize_from_data',
        '    raise ValueError("Invalid image shape")',
        "ValueError: Invalid image shape (3, 5, 5, 2)",
    )))
    assert all(f["category"] != "wandb" for f in data["findings"] if f["rule"].startswith("python-exception"))


def test_a_traceback_of_wandbs_own_code_cut_before_its_exception_is_wandbs(tmp_path: Path) -> None:
    """A paste cut inside a traceback whose frames are wandb's own (its old retry wrapper under an
    artifact upload) names no exception, but the code that was failing is the tracker's; a cut
    traceback through the user's code into torch stays an unknown exception."""
    site = "/usr/local/lib/python3.6/site-packages"
    root = diagnosed(tmp_path, "".join(line + "\n" for line in (
        "Traceback (most recent call last):",
        f'  File "{site}/wandb/apis/normalize.py", line 24, in wrapper',
        "    return func(*args, **kwargs)",
        f'  File "{site}/wandb/old/retry.py", line 132, in wrapped_fn',
        "    return retrier(*args, **kargs)",
        f'  File "{site}/wandb/old/retry.py", line 96, in __call__',
    )))["root_cause"]
    assert (root["rule"], root["category"], root["confidence"]) == ("python-exception-cut", "wandb", "weak")
    assert root["fields"]["frame_file"] == f"{site}/wandb/old/retry.py" and "the experiment tracker failed" in root["remedy"]
    user = diagnosed(tmp_path, "".join(line + "\n" for line in (
        "Traceback (most recent call last):",
        '  File "/home/u/train.py", line 80, in <module>',
        "    loss.backward()",
        f'  File "{site}/torch/_tensor.py", line 396, in backward',
    )))["root_cause"]
    assert (user["rule"], user["category"]) == ("python-exception-cut", "python_exception")


def test_an_exception_whose_chained_successor_is_cut_is_the_last_one_the_log_shows(tmp_path: Path) -> None:
    """Python prints a chain as tracebacks joined by "During handling of the above exception, another
    exception occurred:" (traceback.py's _context_message); a paste cut after the next traceback's
    header lost the exception that ended the process, not the one it was handling. That one (here
    torch.multiprocessing.spawn's child, "-- Process 1 terminated with the following error:") is
    the cause the log shows, weakly; a chain whose last exception is there is read as before."""
    spawned = (
        "-- Process 1 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
        '  File "/home/u/proj/data/catalog.py", line 52, in get\n'
        "    f = _REGISTERED[name]\n"
        "KeyError: 'car'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
    )
    root = diagnosed(tmp_path, spawned)["root_cause"]
    assert (root["rule"], root["category"], root["rank"]) == ("python-exception", "python_exception", 1)
    assert (root["fields"]["exc_type"], root["fields"]["message"]) == ("KeyError", "'car'")
    assert root["confidence"] == "weak" and "cut from the log" in root["remedy"] and "Uncaught" not in root["remedy"]
    whole = diagnosed(tmp_path, spawned + (
        '  File "/home/u/proj/data/catalog.py", line 54, in get\n'
        "    raise KeyError(f\"Dataset '{name}' is not registered!\")\n"
        "KeyError: \"Dataset 'car' is not registered!\"\n"
    ))["root_cause"]
    assert whole["fields"]["message"] == "\"Dataset 'car' is not registered!\"" and whole["confidence"] != "weak"


def test_a_traceback_that_shows_only_wandbs_own_frames_is_wandb(tmp_path: Path) -> None:
    """A paste cut above wandb's frames (or a thread of wandb's own) shows no call of the user's: the
    outermost frame shown is wandb's (sdk/lib/telemetry.py's context's ``__exit__`` calling the run's
    ``_telemetry_callback``), so wandb raised it; the report points at wandb's raise site. Frames of
    another library first (torch's hooks calling into wandb) say nothing of who failed."""
    site = "/opt/conda/lib/python3.10/site-packages"
    root = diagnosed(tmp_path, "".join("[rank2]: " + line + "\n" for line in (
        f'  File "{site}/wandb/sdk/wandb_watch.py", line 49, in watch',
        "    tel.feature.watch = True",
        f'  File "{site}/wandb/sdk/lib/telemetry.py", line 42, in __exit__',
        "    self._run._telemetry_callback(self._obj)",
        f'  File "{site}/wandb/sdk/wandb_run.py", line 799, in _telemetry_callback',
        "    self._telemetry_obj.MergeFrom(telem_obj)",
        "AttributeError: 'Run' object has no attribute '_telemetry_obj'",
    )))["root_cause"]
    assert (root["rule"], root["category"], root["rank"]) == ("python-exception", "wandb", 2)
    assert (root["fields"]["frame_file"], root["fields"]["frame_line"]) == (f"{site}/wandb/sdk/wandb_run.py", "799")
    assert "the log shows no call of yours above it" in root["remedy"] and "pip install -U wandb" in root["remedy"]
    torch_first = diagnosed(tmp_path, "".join(line + "\n" for line in (
        "Traceback (most recent call last):",
        f'  File "{site}/torch/nn/modules/module.py", line 1501, in _call_impl',
        "    result = hook(self, args, result)",
        f'  File "{site}/wandb/wandb_torch.py", line 110, in <lambda>',
        "    lambda mod, inp, outp: parameter_log_hook(mod, inp, outp, log_track_params)",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    )))["root_cause"]
    assert torch_first["category"] != "wandb"


def test_an_exception_wandbs_own_code_raised_under_the_users_call_is_wandb(tmp_path: Path) -> None:
    """wandb 0.10-0.12 (sdk/wandb_init.py, init): ``six.raise_from(Exception("problem"), error_seen)``
    when its backend failed; the user's frame calls into wandb and the exception rises from there.
    An exception the user's own code raised, with wandb's callback frames above it, stays the user's."""
    prefix = "[1,3]<stderr>:"
    root = diagnosed(tmp_path, "".join(prefix + line + "\n" for line in (
        "Traceback (most recent call last):",
        '  File "train.py", line 75, in <module>',
        '    group="DDP",',
        '  File "/opt/conda/lib/python3.6/site-packages/wandb/sdk/wandb_init.py", line 846, in init',
        '    six.raise_from(Exception("problem"), error_seen)',
        '  File "<string>", line 3, in raise_from',
        "Exception: problem",
    )))["root_cause"]
    assert (root["rule"], root["category"], root["rank"]) == ("python-exception", "wandb", 3)
    assert root["title"] == "wandb failed: Exception"
    assert "the experiment tracker failed, not the training" in root["remedy"] and "WANDB_MODE=offline" in root["remedy"]
    own = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 40, in <module>\n'
        "    trainer.fit(model)\n"
        '  File "/opt/venv/lib/python3.10/site-packages/wandb/integration/lightning/fabric/logger.py", line 88, in log\n'
        "    self.metric_fn(metrics)\n"
        '  File "/home/u/metrics.py", line 12, in metric_fn\n'
        "    raise KeyError(name)\n"
        "KeyError: 'val_acc'\n"
    ))["root_cause"]
    assert (own["category"], own["fields"]["frame_file"]) == ("python_exception", "/home/u/metrics.py")
    # A user's own folder named wandb is no wandb package; a tensor of the wrong shape given to
    # wandb.Image fails in its data types: the user's data, not the tracker.
    for frames, exception in (
        (['  File "/home/alice/wandb/sweeps/train.py", line 12, in <module>', '    raise ValueError(opt)'],
         "ValueError: unknown optimizer adamw8"),
        (['  File "/home/u/train.py", line 50, in <module>', "    wandb.log({'img': wandb.Image(x)})",
          '  File "/opt/venv/lib/python3.10/site-packages/wandb/sdk/data_types/image.py", line 160, in __init__',
          "    self._initialize_from_data(data_or_path, mode, file_type)",
          '  File "/opt/venv/lib/python3.10/site-packages/torch/_tensor.py", line 40, in wrapped',
          "    return f(*args, **kwargs)"],
         "RuntimeError: permute(sparse_coo): number of dimensions in the tensor input does not match"),
    ):
        root = diagnosed(tmp_path, "Traceback (most recent call last):\n" + "\n".join(frames) + "\n" + exception + "\n")["root_cause"]
        assert root["category"] == "python_exception", exception


def test_an_exception_of_wandbs_own_classes_is_wandbs_whatever_frames_the_log_shows(tmp_path: Path) -> None:
    """wandb/errors/errors.py's classes (CommError, UsageError, ...) are raised by wandb alone: printed
    with their module, they name the tracker even where the frames shown are the user's (a paste cut
    above wandb's) or there are none. A UsageError (wandb's "invalid usage of the SDK API") is a call
    to change, not a login; an exception of the user's own class of the same name is the user's."""
    under_call = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/proj/utils/tracking.py", line 12, in init_tracking\n'
        "    return wandb.init(project=cfg.project)\n"
        "wandb.errors.errors.UsageError: Invalid project name 'a/b': cannot contain characters '/,\\\\,#,?,%,:', found '/'\n"
    ))["root_cause"]
    assert (under_call["rule"], under_call["category"]) == ("python-exception", "wandb")
    assert under_call["fields"]["frame_file"] == "/home/u/proj/utils/tracking.py"
    assert "wandb rejected how it was called" in under_call["remedy"] and "wandb login" not in under_call["remedy"]
    bare = diagnosed(tmp_path, "wandb.errors.CommError: Error uploading run: returned error 500: {}\n")["root_cause"]
    assert (bare["category"], bare["confidence"]) == ("wandb", "weak")
    assert "no frame" in bare["remedy"] and "WANDB_MODE=offline" in bare["remedy"] and ":  (" not in bare["remedy"]
    own = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/proj/train.py", line 30, in main\n'
        "    check(cfg)\n"
        "proj.errors.UsageError: --epochs must be positive\n"
    ))["root_cause"]
    assert own["category"] == "python_exception"
    # Only another library's frames shown (the HF Trainer's wandb callback): no call of the user's to name.
    site = "/opt/conda/lib/python3.10/site-packages"
    through = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        f'  File "{site}/transformers/trainer.py", line 2100, in _inner_training_loop\n'
        "    self.control = self.callback_handler.on_train_begin(args, self.state, self.control)\n"
        f'  File "{site}/transformers/integrations/integration_utils.py", line 900, in setup\n'
        "    self._wandb.init(**init_args)\n"
        "wandb.errors.errors.CommError: failed to upsert bucket: returned error 403 Forbidden\n"
    ))["root_cause"]
    assert through["category"] == "wandb" and "under your call" not in through["remedy"]
    assert "rose through" in through["remedy"] and "integration_utils.py:900" in through["remedy"]
    # wandb's other kinds of usage error, and its installation's: each its own advice.
    invalid = diagnosed(tmp_path, "wandb.errors.InvalidError: project name is invalid\n")["root_cause"]
    assert "wandb rejected how it was called" in invalid["remedy"] and "wandb login" not in invalid["remedy"]
    missing = diagnosed(tmp_path, "wandb.errors.DependencyError: The wandb-core binary is missing\n")["root_cause"]
    assert "pip install -U wandb" in missing["remedy"] and "WANDB_MODE=offline trains" not in missing["remedy"]


def test_the_launcher_reraising_its_childs_exit_status_is_no_failed_launch(tmp_path: Path) -> None:
    """accelerate's simple_launcher: ``raise subprocess.CalledProcessError(returncode=..., cmd=cmd)``
    after the training process failed: the child's error (above it) is the cause."""
    result = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 30, in <module>\n'
        '    raise ValueError("labels must be int64")\n'
        "ValueError: labels must be int64\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/bin/accelerate", line 8, in <module>\n'
        "    sys.exit(main())\n"
        '  File "/opt/venv/lib/python3.10/site-packages/accelerate/commands/launch.py", line 597, in simple_launcher\n'
        "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)\n"
        "subprocess.CalledProcessError: Command '['/opt/venv/bin/python', 'train.py']' returned non-zero exit status 1.\n"
    ))
    root = result["root_cause"]
    assert (root["category"], root["fields"]["exc_type"]) == ("python_exception", "ValueError")
    assert not [f for f in result["findings"] if f["category"] == "launcher" and f["role"] == "root"]


def test_the_ncclwatchdogs_own_hang_is_a_hang(tmp_path: Path) -> None:
    """ProcessGroupNCCL's heartbeat monitor: "ProcessGroupNCCL's watchdog got stuck for {} seconds
    without making progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA
    API hang blocking the watchdog, ..." (no collective timed out)."""
    root = diagnosed(tmp_path, (
        "[rank3]:[E1126 10:41:02.000000000 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
        "collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog, "
        "and could be triggered by another thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), "
        "or other deadlock-prone behaviors.\n"
    ))["root_cause"]
    assert (root["rule"], root["category"], root["rank"]) == ("nccl-watchdog-stuck", "hang", 3)


def test_waits_that_passed_are_no_failure(tmp_path: Path) -> None:
    """XLA's rendezvous warning followed by its own "Thread is unstuck!", srun's step-create retry
    followed by the step created, and DeepSpeed's scale "reduced" to itself on the first overflow
    under hysteresis (then lowered for real): a run that went on, exit 0 and no error."""
    result = diagnosed(tmp_path, (
        "E1126 10:00:10.000000 rendezvous.cc:38] This thread has been waiting for `initialize clique for rank 2; "
        "clique=devices=[0,1,2,3]; stream=0; run_id=17` for 10 seconds and may be stuck. Expected 4 threads to join "
        "the rendezvous, but not all of them arrived on time.\n"
        "E1126 10:00:14.000000 rendezvous.cc:110] Thread is unstuck! Warning above was a false-positive. Perhaps the "
        "timeout is too short.\n"
        "srun: Job 4411 step creation temporarily disabled, retrying (Requested nodes are busy)\n"
        "srun: Job 4411 step creation still disabled, retrying (Requested nodes are busy)\n"
        "srun: Step created for StepId=4411.1\n"
        "[2024-03-02 10:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
        "step. Attempted loss scale: 65536, reducing to 65536\n"
        "[2024-03-02 10:00:01,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping "
        "step. Attempted loss scale: 65536, reducing to 32768\n"
        "step 2000 loss 1.7731\n"
    ))
    assert result["root_cause"] is None
    assert not [f for f in result["findings"] if f["severity"] == "error"]


def test_horovodrun_reporting_its_workers_exit_is_no_failed_launch(tmp_path: Path) -> None:
    """horovod/runner/mpi_run.py: RuntimeError("mpirun failed with exit code {exit_code}") after a
    worker failed: a report of the worker's failure, raised in the launcher's own code."""
    result = diagnosed(tmp_path, (
        "[1,1]<stderr>:Traceback (most recent call last):\n"
        '[1,1]<stderr>:  File "/home/u/train.py", line 51, in <module>\n'
        "[1,1]<stderr>:    loss = step(batch)\n"
        "[1,1]<stderr>:ValueError: expected 3 channels, got 1\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/bin/horovodrun", line 8, in <module>\n'
        "    sys.exit(run_commandline())\n"
        '  File "/opt/venv/lib/python3.10/site-packages/horovod/runner/mpi_run.py", line 257, in mpi_run\n'
        '    raise RuntimeError("mpirun failed with exit code {exit_code}".format(exit_code=exit_code))\n'
        "RuntimeError: mpirun failed with exit code 1\n"
    ))
    root = result["root_cause"]
    assert (root["category"], root["rank"], root["fields"]["exc_type"]) == ("python_exception", 1, "ValueError")
    assert not [f for f in result["findings"] if f["category"] == "launcher" and f["role"] == "root"]


def test_an_old_oom_kill_in_dmesg_does_not_outrank_a_stop_from_outside(tmp_path: Path) -> None:
    """The kernel's "Out of memory: Killed process {pid} ({comm})" explains reports of processes
    that died, not a SIGTERM someone sent (torchrun's "Received 15 death signal")."""
    root = diagnosed(tmp_path, (
        "[Wed Nov 26 06:10:02 2026] Out of memory: Killed process 4120 (jupyter-lab) total-vm:9841116kB, "
        "anon-rss:8234520kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:13204kB oom_score_adj:0\n"
        "W1126 10:12:00.000000 2546 torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, "
        "shutting down workers\n"
        "W1126 10:12:00.001000 2546 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 2717 "
        "closing signal SIGTERM\n"
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 2546 got signal: 15\n"
    ))["root_cause"]
    assert root["category"] == "stopped"


def test_tensorflows_op_error_after_its_defined_at_frames_is_that_tracebacks_exception(tmp_path: Path) -> None:
    """TensorFlow 1.x prints an op's error as "Caused by op ..., defined at:", the frames where the op
    was built, a blank line, then "<Error> (see above for traceback): <message>": the blank line does
    not cut the traceback, and the exception is that error."""
    root = diagnosed_root(tmp_path, (
        '  File "/home/u/train.py", line 40, in <module>\n'
        "    saver.restore(sess, ckpt)\n"
        '  File "/usr/lib/python3.6/site-packages/tensorflow/python/framework/ops.py", line 1801, in __init__\n'
        "    self._traceback = tf_stack.extract_stack()\n"
        "\n"
        "NotFoundError (see above for traceback): Key conv1/beta not found in checkpoint\n"
        "\t [[node save/RestoreV2 (defined at /home/u/train.py:292) ]]\n"
    ))
    assert (root["rule"], root["fields"]["exc_type"], root["confidence"]) == ("python-exception", "NotFoundError", "likely")
    assert root["fields"]["message"] == "Key conv1/beta not found in checkpoint"


def test_tensorflow_2s_graph_execution_error_goes_on_past_its_blank_line(tmp_path: Path) -> None:
    """TensorFlow 2 raises a tf.function's op error as "<Error>: Graph execution error:", a blank line,
    then what failed: the traceback takes it, so a rule that names it names the exception (a worker
    lost mid-run, here) instead of an uncaught UnavailableError no rule names."""
    root = diagnosed_root(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 88, in <module>\n'
        "    model.fit(dataset, epochs=10)\n"
        '  File "/usr/lib/python3.10/site-packages/tensorflow/python/eager/execute.py", line 52, in quick_execute\n'
        "    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,\n"
        "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:\n"
        "\n"
        "Collective ops is aborted by: cluster check alive failed, /job:worker/replica:0/task:1 is down\n"
        "The error could be from a previous operation. Restart your program to reset.\n"
        "\t [[{{node CollectiveReduceV2}}]] [Op:__inference_train_function_5678]\n"
    ))
    assert (root["rule"], root["category"], root["fields"]["peer"]) == (
        "tf-collective-peer-down", "node_failure", "/job:worker/replica:0/task:1")
    # Another exception's blank line still ends its message.
    other = diagnosed_root(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 9, in <module>\n'
        "    main()\n"
        "ValueError: bad config:\n"
        "\n"
        "Collective ops is aborted by: Socket closed\n"
    ))
    assert other["rule"] == "python-exception"


def test_torchs_desync_report_names_the_rank_the_others_waited_for(tmp_path: Path) -> None:
    """With TORCH_NCCL_DESYNC_DEBUG=1 the watchdog of a rank that timed out says which ranks never
    joined the process group's collectives (TraceUtils.h, analyzeMissingRanks): that rank is the
    root, though every line in the log is another rank's timeout."""
    lines = "".join(
        f"[rank{r}]:[E ProcessGroupNCCL.cpp:577] [Rank {r}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum=41, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 "
        f"milliseconds before timing out.\n" for r in range(3))
    root = diagnosed_root(tmp_path, lines + (
        "[rank1]:[E ProcessGroupNCCL.cpp:577] \n"
        "\t - [1] Timeout at collective: ALLREDUCE, #41\n"
        "\t - To our best knowledge, ranks [3] are the lagging ranks that caused this timeout. "
        "They never joined any collectives\n"
    ))
    assert (root["category"], root["rule"], root["rank"]) == ("nccl_timeout", "nccl-desync-missing-ranks", 3)


def test_torch_before_1_8_spawn_join_bare_exception_is_the_childs_report(tmp_path: Path) -> None:
    """torch.multiprocessing.spawn's join before 1.8: raise Exception(msg), msg starting on the next
    line with "-- Process N terminated with the following error:": a report of the child's failure,
    whose own exception is the cause."""
    root = diagnosed_root(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "main_ddp.py", line 123, in main\n'
        "    mp.spawn(main_worker, nprocs=2, args=(2, args))\n"
        '  File "/env/lib/python3.7/site-packages/torch/multiprocessing/spawn.py", line 118, in join\n'
        "    raise Exception(msg)\n"
        "Exception: \n"
        "\n"
        "-- Process 1 terminated with the following error:\n"
        "Traceback (most recent call last):\n"
        '  File "/env/lib/python3.7/site-packages/torch/multiprocessing/spawn.py", line 19, in _wrap\n'
        "    fn(i, *args)\n"
        '  File "/home/u/main_ddp.py", line 77, in main_worker\n'
        "    raise ValueError('no samples in shard 1')\n"
        "ValueError: no samples in shard 1\n"
    ))
    assert (root["fields"]["exc_type"], root["rank"], root["fields"]["frame_line"]) == ("ValueError", 1, "77")


def test_pytorch_s_test_runner_reporting_its_test_process_s_signal_is_no_root_cause(tmp_path: Path) -> None:
    """run_test.py raises RuntimeError("{test} failed! Received signal: {signal}") after its child
    died: the child's own error (here NCCL's, in C++'s terminate) is the cause."""
    root = diagnosed_root(tmp_path, (
        "test_broadcast_ops (__main__.ProcessGroupNCCLTest) ... terminate called after throwing an instance of "
        "'std::runtime_error'\n"
        "  what():  NCCL error in: /opt/torch/lib/c10d/NCCLUtils.hpp:29, unhandled cuda error\n"
        "Traceback (most recent call last):\n"
        '  File "test/run_test.py", line 385, in main\n'
        "    raise RuntimeError(message)\n"
        "RuntimeError: distributed/test_c10d 1/2 failed! Received signal: SIGIOT\n"
    ))
    assert root is not None and (root["category"], root["rule"]) == ("nccl_error", "nccl-error")
    report = diagnosed(tmp_path, (tmp_path / "job.log").read_text())
    runner = next(f for f in report["findings"] if f["rule"] == "python-exception")
    assert (runner["fields"]["exc_type"], runner["role"]) == ("RuntimeError", "cascade")


@pytest.mark.parametrize(("text", "frame"), [
    # IPython 8 (Jupyter, Colab): "Cell In[n], line n", "File path:line, in func(args)".
    ("-" * 75 + "\n" + "ValueError".ljust(42) + "Traceback (most recent call last)\n"
     "Cell In[3], line 5\n      3 model = build()\n----> 5 train(model, loader)\n\n"
     "File /content/train_lib.py:41, in train(model, loader)\n     39 for batch in loader:\n"
     '---> 41     out = model(batch["input"])\n\n'
     "ValueError: Expected input batch_size (16) to match target batch_size (8).\n",
     ("/content/train_lib.py", "41", "train")),
    # IPython 7: "<ipython-input-n-hash> in func()", "path in func(args)"; the line is the arrow's.
    ("-" * 75 + "\n" + "KeyError".ljust(42) + "Traceback (most recent call last)\n"
     "<ipython-input-7-2b1c3e0f> in <module>()\n      1 for batch in loader:\n----> 2     loss = step(batch)\n\n"
     "<ipython-input-5-7a1d> in step(batch)\n      3 def step(batch):\n----> 4     x = batch['pixel_values']\n\n"
     "KeyError: 'pixel_values'\n",
     ("<ipython-input-5-7a1d>", "4", "step")),
    # IPython 8.0-8.5: "Input In [n], in <cell line: n>()" and "Input In [n], in f(args)".
    ("-" * 75 + "\n" + "KeyError".ljust(42) + "Traceback (most recent call last)\n"
     "Input In [1], in <cell line: 2>()\n      1 d = {}\n----> 2 step(d)\n\n"
     "Input In [0], in step(batch)\n----> 4     x = batch['pixel_values']\n\nKeyError: 'pixel_values'\n",
     ("Input In [0]", "4", "step")),
    # IPython 8, an import's module-level frame: "File path:line" with no ", in".
    ("-" * 75 + "\n" + "ImportError".ljust(42) + "Traceback (most recent call last)\n"
     "Cell In[1], line 1\n----> 1 import mypkg\n\nFile ~/mypkg/__init__.py:3\n----> 3 from .core import thing\n\n"
     "ImportError: cannot import name 'thing' from 'mypkg.core'\n",
     ("~/mypkg/__init__.py", "3", "")),
])
def test_a_notebook_s_traceback_is_read_with_its_frames(tmp_path: Path, text: str, frame: tuple) -> None:
    """IPython's traceback (ultratb): unindented frames, blank lines between them and before the
    exception line, under "<Type>   Traceback (most recent call last)"."""
    root = diagnosed_root(tmp_path, text)
    assert root is not None and (root["category"], root["confidence"]) == ("python_exception", "likely")
    assert (root["fields"]["frame_file"], root["fields"]["frame_line"], root["fields"]["frame_func"]) == frame


def test_torch_xla_s_spawn_report_gives_way_to_the_traceback_it_prints(tmp_path: Path) -> None:
    """xla_multiprocessing prints 'Exception in device=TPU:n: <message>' and then the traceback: the
    traceback names the type and the user's frame; the report alone still names the failure."""
    report = "Exception in device=TPU:3: 'Model' object has no attribute 'forward_step'\n"
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 61, in _mp_fn\n'
        "    out = model.forward_step(x)\n"
        "AttributeError: 'Model' object has no attribute 'forward_step'\n"
    )
    root = diagnosed_root(tmp_path, report + traceback)
    assert root is not None and (root["rule"], root["fields"]["frame_line"]) == ("python-exception", "61")
    alone = diagnosed_root(tmp_path, report)
    assert alone is not None and (alone["rule"], alone["category"], alone["confidence"]) == \
        ("xla-spawn-exception", "python_exception", "weak")


def test_a_cut_notebook_traceback_does_not_take_later_output_for_its_exception(tmp_path: Path) -> None:
    """A notebook traceback's exception line is the type its header named; output after its blank
    lines ("Epoch: 3 ...") is not that exception."""
    result = diagnosed(tmp_path, (
        "-" * 75 + "\n" + "ValueError".ljust(42) + "Traceback (most recent call last)\n"
        "Cell In[3], line 5\n----> 5 train(model)\n\n\n\nEpoch: 3 loss 0.52\n"
    ))
    assert all(f["fields"].get("exc_type") != "Epoch" for f in result["findings"])
    assert result["root_cause"] is not None and result["root_cause"]["rule"] == "python-exception-cut"


@pytest.mark.parametrize("dump", [
    # gdb's "thread apply all bt": a thread header, then frames (here a busy MPI progress loop, no wait call).
    ("Thread 2 (Thread 0x7fe9be0b1700 (LWP 442)):\n"
     "#0  0x00007fe934790bce in mca_btl_smcuda_component_progress ()\n"
     "   from /usr/local/openmpi/lib/openmpi/mca_btl_smcuda.so\n"
     "#1  0x00007fe93edd3dac in opal_progress ()\n"),
    # py-spy dump before 0.3: "Thread {:#X} ({})", frames as "\t {} ({}:{})".
    "Thread 0x7F4AA2ED8700 (active)\n\t recv (redis/_compat.py:79)\n\t readline (redis/connection.py:216)\n",
    # glog's failure signal handler: the program counter in poll when SIGTERM came.
    ("*** Aborted at 1510470426 (unix time) try \"date -d @1510470426\" if you are using GNU date ***\n"
     "PC: @     0x7f3cb215f70d __poll\n"
     "*** SIGTERM (@0x3f400004fc2) received by PID 20421 (TID 0x7f3cb2844700) from PID 20418; stack trace: ***\n"
     "    @     0x7f3c91f2bf65 ompi_request_default_wait_all\n"),
])
def test_stack_dumps_of_a_stuck_process_in_other_tools_words(tmp_path: Path, dump: str) -> None:
    root = diagnosed(tmp_path, dump)["root_cause"]
    assert (root["rule"], root["category"], root["confidence"]) == ("stack-dump", "hang", "weak")


@pytest.mark.parametrize("text, rule, category", [
    # faulthandler after a fatal signal: its thread headers are those of a dump, but the process crashed.
    ("Fatal Python error: Segmentation fault\n\nThread 0x00007f5e3a7fc700 (most recent call first):\n"
     '  File "/usr/lib/python3.8/threading.py", line 302 in wait\n\n'
     "Current thread 0x00007f5e5a1d1740 (most recent call first):\n"
     '  File "/home/u/model.py", line 12 in forward\n  File "/home/u/train.py", line 40 in <module>\n'
     "Segmentation fault (core dumped)\n", "native-crash", "launcher"),
    ("epoch 1 step 40\ntrain.sh: line 12: 48213 Illegal instruction     (core dumped) python train.py\n",
     "native-crash", "launcher"),
    # SIGBUS in a training job is shared memory running out, not a crash of the code.
    ("2019-04-16 11:58:14  Creating workers...\nBus error (core dumped)\n", "sigbus", "shm_exhausted"),
])
def test_a_process_dead_of_a_signal_in_native_code(tmp_path: Path, text: str, rule: str, category: str) -> None:
    root = diagnosed(tmp_path, text)["root_cause"]
    assert (root["rule"], root["category"]) == (rule, category)
    if rule == "native-crash":
        assert root["fields"]["signal_name"] in root["title"] and root["fields"]["signal_name"] in text
        # Never what the job already does: a log with faulthandler's stacks is not told to turn it on.
        assert ("PYTHONFAULTHANDLER=1" in root["remedy"]) == ("most recent call first" not in text)


@pytest.mark.parametrize("how, rank", [("terminated with exit code 1", 1), ("terminated with signal SIGSEGV", 2)])
def test_mp_spawns_report_of_a_child_that_died_without_a_traceback_is_the_launchers(
        tmp_path: Path, how: str, rank: int) -> None:
    """torch.multiprocessing.spawn's ProcessContext.join: "process %d terminated with exit code %d"
    (or "with signal %s"): a launcher's report naming the process index, not the user's exception."""
    root = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "main.py", line 50, in <module>\n'
        "    mp.spawn(train, nprocs=4)\n"
        '  File "/usr/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 170, in join\n'
        "    raise ProcessExitedException(\n"
        f"torch.multiprocessing.spawn.ProcessExitedException: process {rank} {how}\n"
    ))["root_cause"]
    assert (root["rule"], root["category"], root["rank"], root["confidence"]) == (
        "mp-spawn-process-exited", "launcher", rank, "weak")
    assert ("PYTHONFAULTHANDLER=1" in root["remedy"]) == ("SIGSEGV" in how)


# torchelastic's ChildFailedError.format_msg: a border, "{name} FAILED", a section line, "Failures:",
# the others, a section line, "Root Cause (first observed failure):" and its entry, a border.
SUMMARY_AFTER_HEAD = (
    "------------------------------------------------------------\n"
    "Failures:\n"
    "  <NO_OTHER_FAILURES>\n"
    "------------------------------------------------------------\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    "  time      : 2025-02-21_20:07:38\n"
    "  host      : node1\n"
    "  rank      : 3 (local_rank: 3)\n"
    "  exitcode  : 1 (pid: 14661)\n"
    "  error_file: <N/A>\n"
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
    "============================================================\n"
)


@pytest.mark.parametrize("head", [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    "============================================================\ntrain.py FAILED\n",
    "============================================================\ntrain.py FAILED\n",
    "lib/python3.10/site-packages/llamafactory/launcher.py FAILED\n",  # a paste cut inside the path
    "",
])
def test_torchruns_summary_names_its_root_cause_rank_however_much_of_its_head_a_paste_kept(
        tmp_path: Path, head: str) -> None:
    root = diagnosed(tmp_path, head + SUMMARY_AFTER_HEAD)["root_cause"]
    assert (root["rule"], root["rank"], root["rank_source"], root["fields"]["pid"]) == (
        "torchrun-child-failed", 3, "summary", "14661")


def test_a_speech_trainer_that_skips_a_nan_batch_and_goes_on_still_diverged(tmp_path: Path) -> None:
    """deepspeech.pytorch's check_loss: 'WARNING: received a nan loss, setting loss value to 0',
    "Skipping grad update", and the run goes on with finite losses: no recovery for this one."""
    steps = "".join(f"Epoch: [1][{n}/6051]   Time 1.781 (1.857)      Data 0.005 (0.005)      Loss 42.{n} (73.39)\n"
                    for n in range(4686, 4692))
    root = diagnosed(tmp_path, steps + "WARNING: received a nan loss, setting loss value to 0\nSkipping grad update\n"
                     + steps)["root_cause"]
    assert (root["rule"], root["category"], root["confidence"]) == ("nan-loss-batch-skipped", "nan_loss", "likely")
    assert "--max-norm" in root["remedy"]


def test_gdb_on_the_core_of_a_crashed_process_is_the_crash_not_a_stuck_process(tmp_path: Path) -> None:
    """gdb opening a core file: "Program terminated with signal SIGSEGV, Segmentation fault." before
    the same thread headers and frames as a dump of a live process."""
    root = diagnosed(tmp_path, (
        "Core was generated by `python train.py'.\n"
        "Program terminated with signal SIGSEGV, Segmentation fault.\n"
        "#0  0x00007f1c6e7c3ad3 in at::native::foo () from /usr/lib/libtorch_cpu.so\n"
        "Thread 2 (Thread 0x7f3b2c8a8700 (LWP 442)):\n"
        "#0  0x00007f3b2c8a8ad3 in futex_wait_cancelable (private=<optimized out>) at futex-internal.h:183\n"
    ))["root_cause"]
    assert (root["rule"], root["category"], root["fields"]["signal_name"]) == ("native-crash", "launcher", "Segmentation fault")


def test_a_meters_running_mean_gone_nan_with_a_finite_value_is_no_divergence(tmp_path: Path) -> None:
    """"grad_norm 1.0323 (nan)": an AverageMeter's value and mean; with fp16, apex's skipped
    overflow step left the mean non-finite while training goes on. A warning, and no second
    opinion asked about the word "nan"; a value non-finite too is the run diverging."""
    apex = "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 131072.0\n"
    row = ("[2021-04-25 05:35:19 swin_base](main.py 310): INFO Train: [0/300][4050/5004]   eta 0:17:06 lr 0.000500 "
           "time 1.1737 (1.0765)    loss 3.2572 (3.3279)    grad_norm {} (nan)  mem 4814MB\n")
    result = diagnosed(tmp_path, apex + row.format("1.0323"))
    assert result["root_cause"] is None
    assert {f["rule"]: f["severity"] for f in result["findings"]}.get("running-mean-nonfinite") == "warning"
    assert diagnosed(tmp_path, apex + row.format("nan"))["root_cause"]["rule"] == "nan-loss"


def test_a_yolo_training_row_with_nan_losses(tmp_path: Path) -> None:
    """YOLOv5's row ('%10s' * 2 + '%10.4g' * 5: epoch, memory, box, obj, cls, labels, size)."""
    header = "     Epoch   gpu_mem       box       obj       cls    labels  img_size\n"
    root = diagnosed(tmp_path, header + "      1/99     2.64G         nan       nan       nan         4       416\n")["root_cause"]
    assert (root["rule"], root["category"], root["fields"]["epoch"]) == ("yolo-loss-nan", "nan_loss", "1/99")
    assert diagnosed(tmp_path, header + "      1/99     2.64G     0.1043   0.03321   0.02871         4       416\n")["root_cause"] is None


# Ray Train (ray/train/base_trainer.py, fit): TrainingFailedError raised from the workers' error,
# with the text on restoring and on FailureConfig that ends its message.
RAY_TRAIN_FAILED = """\
ray.exceptions.RayTaskError(ValueError): ray::_Inner.train() (pid=51210, ip=10.0.0.5, repr=TorchTrainer)
  File "/home/user/proj/train_ray.py", line 44, in train_func
    raise ValueError("labels must be non-negative, got -100 at index 17")
ValueError: labels must be non-negative, got -100 at index 17

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/home/user/proj/train_ray.py", line 71, in <module>
    result = trainer.fit()
  File "/opt/conda/lib/python3.10/site-packages/ray/train/base_trainer.py", line 638, in fit
    raise TrainingFailedError(
ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous error messages for a cause.
To continue this run, you can use: `trainer = TorchTrainer.restore("/home/user/ray_results/TorchTrainer_2024-05-14_09-20-11")`.
To start a new run that will retry on training failures, set `train.RunConfig(failure_config=train.FailureConfig(max_failures))` in the Trainer's `run_config` with `max_failures > 0`, or `max_failures = -1` for unlimited retries.
"""


def test_ray_trains_failure_is_the_workers_exception_it_was_raised_from(tmp_path):
    """TrainingFailedError wraps the workers' error: that error and its frame are the cause, and the
    message's advice on configuring retries is no retry the program announced."""
    root = diagnosed(tmp_path, RAY_TRAIN_FAILED)["root_cause"]
    assert (root["category"], root["fields"]["exc_type"], root["fields"]["frame_line"]) == ("python_exception", "ValueError", "44")
    # Cut to the wrapper alone, it is still the run's failure, not a retried one.
    alone = diagnosed(tmp_path, RAY_TRAIN_FAILED[RAY_TRAIN_FAILED.index("Traceback"):])["root_cause"]
    assert alone is not None and alone["fields"]["exc_type"].endswith("TrainingFailedError")
    assert alone["severity"] == "error"


def test_a_rule_certain_of_an_error_in_the_jobs_code_is_not_second_guessed(tmp_path):
    """gloo's own size check (gloo/transport/tcp/pair.cc, GLOO_ENFORCE_LE) names ranks that called
    a collective with different sizes: category python_exception, but a rule's, certain; the learned
    opinion (which finds gloo's words like a gloo timeout's) is not asked over it."""
    root = diagnosed(tmp_path, (
        "Traceback (most recent call last):\n"
        '  File "/workspace/train.py", line 142, in <module>\n'
        "    dist.all_reduce(loss_sum)\n"
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/pair.cc:510] "
        "op.preamble.length <= op.nbytes. 8773632 vs 8386560\n"))["root_cause"]
    assert (root["rule"], root["category"]) == ("collective-mismatch", "python_exception")
    assert (root["fields"]["received"], root["fields"]["expected"]) == ("8773632", "8386560")
