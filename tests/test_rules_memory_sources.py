"""The memory rules read each library's own wording, with the numbers the remedy quotes.

Every text here is written from the library's format string (cited in rules/memory.toml above
the pattern), with made-up values: what a user of that release or framework would see.
"""

from __future__ import annotations

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.engine import Engine
from monitor.diagnosis.root_cause import choose
from monitor.model import LogLine
from monitor.text import clean

CATALOGUE = load_catalogue(include_user=False)


def findings(text: str) -> list:
    engine = Engine(CATALOGUE)
    for number, raw in enumerate(text.strip("\n").split("\n"), start=1):
        engine.feed(LogLine("job.log", number, clean(raw)))
    engine.flush()
    return engine.findings


def only(text: str, rule: str):
    found = [f for f in findings(text) if f.rule == rule]
    assert len(found) == 1, [f.rule for f in findings(text)]
    return found[0]


@pytest.mark.parametrize("text, rule, fields, says", [
    # c10 format_size writes up to 1 KiB in bytes.
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512 bytes. GPU 1 has a total capacity of "
     "15.77 GiB of which 0 bytes is free. Of the allocated memory 14.90 GiB is allocated by PyTorch, and "
     "310.00 MiB is reserved by PyTorch but unallocated.",
     "cuda-oom", {"tried": "512 bytes", "free": "0 bytes", "gpu": "1", "unallocated": "310.00 MiB"},
     "Allocating 512 bytes more failed on GPU 1, which had 0 bytes free of 15.77 GiB."),
    # torch <= 1.3: "... %s free; %s cached)".
    ("RuntimeError: CUDA out of memory. Tried to allocate 98.00 MiB (GPU 0; 7.79 GiB total capacity; "
     "6.90 GiB already allocated; 41.50 MiB free; 201.30 MiB cached)",
     "cuda-oom", {"allocated": "6.90 GiB", "cached": "201.30 MiB", "free": "41.50 MiB"},
     "PyTorch held 6.90 GiB in tensors and 201.30 MiB more cached."),
    # torch 1.x-2.0 under set_per_process_memory_fraction: allowed_info before the reserved part.
    ("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 3; 31.75 GiB total capacity; "
     "13.10 GiB already allocated; 16.40 GiB free; 15.87 GiB allowed; 14.20 GiB reserved in total by PyTorch)",
     "cuda-oom", {"allowed": "15.87 GiB", "reserved": "14.20 GiB"},
     "This process may use only 15.87 GiB of it"),
    ("torch.OutOfMemoryError: XPU out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of "
     "15.11 GiB. Of the allocated memory 13.70 GiB is allocated by PyTorch, and 600.00 MiB is reserved by "
     "PyTorch but unallocated.",
     "cuda-oom", {"tried": "1.00 GiB", "total": "15.11 GiB"}, "Allocating 1.00 GiB more failed"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7.25GiB.",
     "xla-oom", {"tried": "7.25GiB"}, "XLA could not allocate 7.25GiB on the device."),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for 2.00GiB "
     "(2147483648B) on device ordinal 3",
     "xla-oom", {"tried_bytes": "2147483648", "device": "3"}, "The request was for device ordinal 3."),
    ("I external/xla/xla/stream_executor/cuda/cuda_driver.cc:1521] failed to allocate 6.00GiB (6442450944 bytes) "
     "from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
     "tf-gpu-alloc-failed", {"tried": "6.00GiB", "tried_bytes": "6442450944"}, "(6442450944 bytes)"),
    ("W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (GPU_2_bfc) ran out of memory trying to "
     "allocate 3.12GiB (rounded to 3350000128)requested by op Conv2D",
     "tf-gpu-alloc-failed", {"allocator": "GPU_2_bfc", "tried": "3.12GiB"}, "The BFC allocator GPU_2_bfc"),
    ("cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 536,870,912 bytes (allocated so far: "
     "8,589,934,592 bytes).", "cuda-oom-raw", {"cupy_tried": "536,870,912"}, "CuPy could not get 536,870,912 bytes"),
    ("RuntimeError: $ Torch: not enough memory: you tried to allocate 3GB. Buy new RAM! at "
     "/pytorch/aten/src/TH/THGeneral.cpp:204", "host-alloc-failed", {"tried_gb": "3"}, "could not allocate 3 GB"),
    ("ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node worker-3 is used "
     "(121.7 / 125.8 GB). The top 10 memory consumers are:",
     "host-alloc-failed", {"ray_used": "121.7", "ray_total": "125.8", "ray_node": "worker-3"},
     "121.7 of 125.8 GB in use on worker-3, over 95%"),
    ("slurmstepd: error: Detected 2 oom-kill event(s) in StepId=90210.0 cgroup. Some of your processes may "
     "have been killed by the cgroup out-of-memory handler.",
     "host-oom-kill", {"oom_events": "2", "step": "StepId=90210.0", "job_id": "90210"},
     "SLURM saw 2 OOM kill(s) in StepId=90210.0"),
    ("slurmstepd: error: Detected 1 oom-kill event(s) in step 90210.batch cgroup.",
     "host-oom-kill", {"step": "90210.batch", "job_id": "90210"}, "sacct -j 90210"),
    ("slurmstepd: error: Job 90210 exceeded memory limit (52428800 > 41943040), being killed",
     "host-oom-kill", {"limit": "Job 90210 exceeded memory limit (52428800 > 41943040)"}, "SLURM reports: Job 90210"),
    ("The node was low on resource: memory. Container trainer was using 70123456Ki, which exceeds its request of 64Gi. ",
     "k8s-evicted-memory", {"container": "trainer", "used": "70123456Ki", "request": "64Gi"},
     "Container trainer was using 70123456Ki, over its memory request of 64Gi"),
    ('Container trainer exceeded its local ephemeral storage limit "20Gi". ',
     "k8s-evicted-disk", {"container": "trainer", "limit": "20Gi"}, "more than its ephemeral-storage limit of 20Gi"),
    ("gpu1:2201:2290 [1] os/linux.cc:842 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-Ue3kLp "
     "(size 4194304), error: No space left on device (28)",
     "nccl-shm", {"segment": "/dev/shm/nccl-Ue3kLp", "size": "4194304", "shm_error": "No space left on device"},
     "The system said: No space left on device."),
    ("(EngineCore_DP0 pid=812) ValueError: Free memory on device cuda:1 (21.07/79.19 GiB) on startup is less than "
     "desired GPU memory utilization (0.7, 55.43 GiB). Decrease GPU memory utilization or reduce GPU memory used "
     "by other processes.", "vllm-gpu-memory",
     {"free_gib": "21.07", "total_gib": "79.19", "util": "0.7", "desired_gib": "55.43"},
     "only 21.07 of 79.19 GiB was free"),
    ("ValueError: The model's max seq len (65536) is larger than the maximum number of tokens that can be stored in "
     "KV cache (40960). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
     "engine.", "vllm-gpu-memory", {"max_model_len": "65536", "kv_tokens": "40960"}, "(40960 tokens)"),
    # The exception line cut before the sizes still names the allocator's class and message.
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to al", "cuda-oom", {"tried": None}, "micro-batch"),
    ("OSError: Not enough disk space. Needed: 1.21 TiB (download: 400.00 GiB, generated: 830.00 GiB, "
     "post-processed: Unknown size)", "disk-full", {"needed": "1.21 TiB"}, "needs 1.21 TiB free"),
])
def test_a_library_wording_gives_its_numbers(text, rule, fields, says):
    finding = only(text, rule)
    assert {name: finding.fields.get(name) for name in fields} == fields
    assert says in finding.remedy


def test_a_pre_5_0_kernel_report_confirms_the_sigkill_with_the_victims_memory():
    # mm/oom_kill.c before 5.0 writes the score line, then the victim with its anon-rss on a line of
    # its own; the lines before it in the report must not take the confirmation's place.
    text = """\
[5123.100001] python invoked oom-killer: gfp_mask=0x14280ca(GFP_HIGHUSER_MOVABLE|__GFP_ZERO), order=0, oom_score_adj=0
[5123.100300] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=python,pid=4242,uid=1000
[5123.100311] Out of memory: Kill process 4242 (python) score 951 or sacrifice child
[5123.100320] Killed process 4242 (python) total-vm:88112340kB, anon-rss:80311204kB, file-rss:0kB, shmem-rss:0kB
E0302 10:44:02.633000 4200 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 2 (pid: 4242) of binary: /usr/bin/python3
"""
    found = findings(text)
    sigkill = next(f for f in found if f.rule == "sigkill")
    assert sigkill.fields["confirmed_by"] == "host-oom-kill"
    assert sigkill.fields["confirm_anon_rss"] == "80311204kB"
    assert "killed python (pid 4242) holding 80311204kB of anonymous memory" in sigkill.remedy
    assert choose(found).rule == "sigkill"


def test_a_shared_memory_object_out_of_descriptors_is_told_so():
    finding = only("RuntimeError: unable to open shared memory object </torch_31337_4024558112_7> in read-write "
                   "mode: Too many open files (24)", "dataloader-shm")
    assert "ulimit -n" in finding.remedy and "set_sharing_strategy('file_system')" in finding.remedy
    full = only("RuntimeError: unable to write to file </torch_31337_4024558112_7>: No space left on device (28)",
                "dataloader-shm")
    assert "ulimit -n" not in full.remedy and "/dev/shm is full" in full.remedy


@pytest.mark.parametrize("text", [
    # TensorFlow's BFC allocator says itself this is not a failure.
    "W tensorflow/core/common_runtime/bfc_allocator.cc:248] Allocator (GPU_0_bfc) ran out of memory trying to "
    "allocate 2.20GiB with freed_by_count=0. The caller indicates that this is not a failure, but may mean that "
    "there could be performance gains if more memory were available.",
    # Pinned host memory at start-up, retried smaller by XLA.
    "I external/xla/xla/stream_executor/cuda/cuda_driver.cc:1101] failed to alloc 34359738368 bytes on host: "
    "CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    # Ray's start-up warning about a small /dev/shm.
    "WARNING: The object store is using /tmp instead of /dev/shm because /dev/shm has only 67108864 bytes "
    "available. This will harm performance!",
    # A job asking SLURM about OOM states, not one.
    "sacct -j 90210 --state=OUT_OF_MEMORY -o JobID,State,MaxRSS",
])
def test_a_harmless_line_about_memory_is_no_error(text):
    assert [f.rule for f in findings(text) if f.severity == "error"] == []


# CPython's multiprocessing/synchronize.py (SemLock.__init__) as the DataLoader reaches it making its
# workers' queues: sem_open's file in /dev/shm gets ENOSPC (gh-93253).
SEMLOCK_IN_DATALOADER = '''
Traceback (most recent call last):
  File "/workspace/train.py", line 61, in main
    for step, batch in enumerate(loader):
  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/dataloader.py", line 1024, in __init__
    index_queue = multiprocessing_context.Queue()  # type: ignore[var-annotated]
  File "/usr/lib/python3.10/multiprocessing/queues.py", line 43, in __init__
    self._rlock = ctx.Lock()
  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 162, in __init__
    SemLock.__init__(self, SEMAPHORE, 1, 1, ctx=ctx)
  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__
    sl = self._semlock = _multiprocessing.SemLock(
OSError: [Errno 28] No space left on device
'''


def test_enospc_making_a_semaphore_is_dev_shm_not_the_disk():
    found = findings(SEMLOCK_IN_DATALOADER)
    assert [f.rule for f in found if f.severity == "error"] == ["semaphore-shm"]
    assert choose(found).category == "shm_exhausted"
    assert "--shm-size" in choose(found).remedy
    # The same words in a checkpoint's traceback stay a full disk.
    disk = findings(SEMLOCK_IN_DATALOADER.replace("multiprocessing/synchronize.py", "torch/serialization.py")
                    .replace("_multiprocessing.SemLock(", "torch.save(state, path)"))
    assert [f.rule for f in disk if f.severity == "error"] == ["disk-full"]


def test_joblib_going_serial_is_a_warning_and_not_a_full_disk():
    # joblib/_multiprocessing_helpers.py: warnings.warn("%s.  joblib will operate in serial mode" % (e,))
    found = findings("/opt/conda/lib/python3.8/site-packages/joblib/_multiprocessing_helpers.py:46: UserWarning: "
                     "[Errno 28] No space left on device.  joblib will operate in serial mode\n"
                     "  warnings.warn('%s.  joblib will operate in serial mode' % (e,))")
    assert [(f.rule, f.severity) for f in found] == [("joblib-serial-shm", "warning")]
