"""The engine on real log texts: records, ranks, the python-exception classifier, root cause."""

from __future__ import annotations

import pytest

from diagnosis_helpers import OOM_TRACEBACK, RULES, VALUE_ERROR_TRACEBACK, catalogue_from, run_lines
from zone_helpers import in_time_zone

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.engine import Engine
from monitor.model import LogLine
from monitor.logs.ranks import FileRanks, parse_prefix, rank_from_path, rank_in_text

WATCHDOG = (
    "[rank{r}]:[E1218 20:27:2{r}.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
    "ran for 600010 milliseconds before timing out."
)
DIST_BACKEND = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/u/train.py", line 50, in <module>
[rank0]:     dist.all_reduce(t)
[rank0]:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 81, in wrapper
[rank0]:     return func(*args, **kwargs)
[rank0]: torch.distributed.DistBackendError: [Rank 0] Process group watchdog thread terminated with exception"""


def test_oom_traceback_is_one_record_classified_by_its_rule(tmp_path):
    engine = run_lines(Engine(catalogue_from(tmp_path)), OOM_TRACEBACK)
    assert [f.rule for f in engine.findings] == ["cuda-oom"]  # not also python-exception
    oom = engine.findings[0]
    assert (oom.rank, oom.line, oom.title) == (3, 6, "CUDA out of memory on rank 3")
    assert oom.fields["tried"] == "2.00 GiB" and oom.fields["unallocated"] == "3.00 GiB"
    assert "Tried to allocate 2.00 GiB" in oom.remedy
    # 3 GiB unallocated >= 0.25 * 2 GiB: the advice applies; the OOM's own hint is not the job's setting.
    assert "expandable_segments:True: 3.00 GiB is reserved" in oom.remedy
    assert engine.root_cause() is oom


def test_advice_skipped_when_the_job_already_does_it(tmp_path):
    text = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun train.py\n" + OOM_TRACEBACK
    oom = run_lines(Engine(catalogue_from(tmp_path)), text).findings[0]
    assert "expandable_segments" not in oom.remedy
    # Seen after the finding: the remedy is rendered again.
    engine = run_lines(Engine(catalogue_from(tmp_path)), OOM_TRACEBACK + "\nPYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert "expandable_segments" not in engine.findings[0].remedy


def test_python_exception_names_the_user_frame_and_keeps_text_literal(tmp_path):
    engine = run_lines(Engine(catalogue_from(tmp_path)), VALUE_ERROR_TRACEBACK)
    (finding,) = engine.findings
    assert (finding.rule, finding.category, finding.role, finding.severity) == (
        "python-exception", "python_exception", "root", "error")
    assert finding.fields == {
        "exc_type": "ValueError", "message": "shapes [bold]do not[/bold] match",
        "frame_file": "/home/u/train.py", "frame_line": "7", "frame_func": "main",
        "excepthook": "torch",  # "[rank1]: Traceback": torch's excepthook printed it, uncaught
    }
    assert finding.rank == 1 and finding.line == 8
    assert "Raised from /home/u/train.py:7 in main" in finding.remedy


def test_chained_exceptions_are_one_record_and_the_last_one_counts(tmp_path):
    text = """\
Traceback (most recent call last):
  File "/home/u/data.py", line 3, in load
    return json.load(f)
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/home/u/train.py", line 9, in <module>
    cfg = load(path)
  File "/home/u/data.py", line 5, in load
    raise RuntimeError(f"bad config {path}")
RuntimeError: bad config cfg.json
step 1 done"""
    engine = run_lines(Engine(catalogue_from(tmp_path)), text)
    (finding,) = engine.findings
    assert finding.fields["exc_type"] == "RuntimeError" and finding.line == 13
    assert finding.fields["frame_file"] == "/home/u/data.py" and finding.fields["frame_line"] == "5"


def test_interleaved_ranks_build_separate_records(tmp_path):
    a = VALUE_ERROR_TRACEBACK.splitlines()
    b = OOM_TRACEBACK.splitlines()
    mixed = [x for pair in zip(a, b) for x in pair] + a[len(b):]
    engine = run_lines(Engine(catalogue_from(tmp_path)), "\n".join(mixed))
    assert sorted((f.rule, f.rank) for f in engine.findings) == [("cuda-oom", 3), ("python-exception", 1)]


def test_roots_beat_cascades_even_when_later(tmp_path):
    text = DIST_BACKEND + "\n" + WATCHDOG.format(r=2) + "\n" + VALUE_ERROR_TRACEBACK
    engine = run_lines(Engine(catalogue_from(tmp_path)), text)
    backend = next(f for f in engine.findings if f.fields.get("exc_type", "").endswith("DistBackendError"))
    assert backend.role == "cascade"
    root = engine.root_cause()
    assert (root.rule, root.rank, root.fields["exc_type"]) == ("python-exception", 1, "ValueError")


def test_confirmation_upgrades_a_sigkill_to_host_oom(tmp_path):
    sigkill = "  traceback : Signal 9 (SIGKILL) received by PID 4242"
    engine = run_lines(Engine(catalogue_from(tmp_path)), sigkill)
    assert engine.findings[0].role == "cascade"
    engine = run_lines(Engine(catalogue_from(tmp_path)), sigkill + "\n[12345.6] Out of memory: Killed process 4242 (python)")
    root = engine.root_cause()
    assert (root.rule, root.role, root.fields["confirmed_by"]) == ("sigkill", "root", "kernel-oom-kill")


def test_pure_hang_suspects_the_rank_missing_from_the_timeouts(tmp_path):
    start = "\n".join(f"[rank{r}]: world_size=4 step 0" for r in range(4))
    timeouts = "\n".join(WATCHDOG.format(r=r) for r in (0, 2, 3))
    engine = run_lines(Engine(catalogue_from(tmp_path)), start + "\n" + timeouts)
    root = engine.root_cause()
    assert root.rule == "nccl-watchdog-timeout" and root.rank == 1
    assert root.fields["suspect_rank"] == "1" and "never reported" in root.fields["suspect_reason"]
    assert engine.findings[0].ranks == [0, 2, 3] and engine.findings[0].count == 3


def test_hang_suspect_stays_inside_the_world_size(tmp_path):
    # "100: ..." reads like an srun label for rank 100, but the job says world_size=4 and all
    # four ranks reported the timeout: there is no missing rank to blame.
    start = "world_size=4 backend=nccl\n100: epochs planned"
    timeouts = "\n".join(WATCHDOG.format(r=r) for r in range(4))
    root = run_lines(Engine(catalogue_from(tmp_path)), start + "\n" + timeouts).root_cause()
    assert root.rank == 0 and "suspect_rank" not in root.fields


def test_pure_hang_suspects_the_rank_that_completed_least(tmp_path):
    status = "[PG ID 0 PG GUID 0(default_pg) Rank {r}]  failure detected by watchdog at work sequence id: 42 PG status: last enqueued work: 42, last completed work: {c}"
    text = "\n".join(status.format(r=r, c=c) for r, c in ((0, 41), (1, 39), (2, 41)))
    root = run_lines(Engine(catalogue_from(tmp_path)), text).root_cause()
    assert root.rank == 1 and "fewest collectives" in root.fields["suspect_reason"]


def test_cpp_exception_block_and_elastic_summary_are_single_records(tmp_path):
    text = """\
terminate called after throwing an instance of 'c10::DistBackendError'
  what():  [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: NCCL communicator was aborted on rank 2.
Exception raised from checkTimeout at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:688 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f in libc10.so)
frame #1: <unknown function> + 0x1 (0x7f in libtorch_cuda.so)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-12-26_02:11:16
  host      : node1
  rank      : 2 (local_rank: 2)
  exitcode  : -6 (pid: 937052)
  error_file: <N/A>
  traceback : Signal 6 (SIGABRT) received by PID 937052
============================================================
NCCL communicator was aborted on rank 5."""
    engine = run_lines(Engine(catalogue_from(tmp_path)), text)
    aborted = engine.findings[0]
    assert (aborted.rule, aborted.line, aborted.rank, aborted.count) == ("distbackend-cascade", 2, 2, 2)
    assert aborted.ranks == [2, 5]  # the last line is its own record


def test_harmless_lines_give_no_error(tmp_path):
    text = """\
/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1: FutureWarning: `torch.cuda.amp.autocast(args...)` is deprecated.
node1:1234:1234 [0] NCCL INFO Channel 00/02 : 0 1 2 3
If out-of-memory error occurs, reduce the batch size
nan iterations: 0
WARNING: Traceback-like text in a message is not a traceback
{'loss': 0.25, 'grad_norm': 1.5, 'epoch': 1.0}"""
    engine = run_lines(Engine(catalogue_from(tmp_path)), text)
    assert [f for f in engine.findings if f.severity == "error"] == []
    assert engine.root_cause() is None


def test_secrets_are_masked_in_evidence_and_fields(tmp_path):
    text = VALUE_ERROR_TRACEBACK.replace(
        "shapes [bold]do not[/bold] match",
        "login failed WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567 token hf_abcdefghijklmnopqrstuvwxyz")
    (finding,) = run_lines(Engine(catalogue_from(tmp_path)), text).findings
    blob = " ".join(finding.evidence) + finding.fields["message"] + finding.remedy
    assert "0123456789abcdef" not in blob and "hf_abcdefghij" not in blob
    assert "WANDB_API_KEY=****" in finding.fields["message"]


def test_backtracking_rule_is_cut_off_reported_once_and_scan_goes_on(tmp_path):
    slow = RULES + '''
[[rule]]
id = "slow-rule"
category = "launcher"
severity = "error"
role = "root"
title = "slow"
patterns = ['(?:a|aa)+(?:a|aa)+(?:a|aa)+(?:a|aa)+$']
prefilter = ["aaaa"]
'''
    engine = Engine(catalogue_from(tmp_path, slow), regex_timeout=0.05)
    text = "\n".join(["a" * 40 + "!"] * 3) + "\n" + VALUE_ERROR_TRACEBACK
    run_lines(engine, text)
    assert len(engine.problems) == 1
    assert "rule slow-rule" in engine.problems[0] and "rules.toml" in engine.problems[0]
    assert [f.rule for f in engine.findings] == ["python-exception"]


def test_feed_returns_new_findings_and_version_tracks_changes(tmp_path):
    engine = Engine(catalogue_from(tmp_path))
    version = engine.version
    new = engine.feed(LogLine("a.log", 1, WATCHDOG.format(r=0)))
    assert [f.rule for f in new] == ["nccl-watchdog-timeout"] and engine.version > version
    version = engine.version
    assert engine.feed(LogLine("a.log", 2, WATCHDOG.format(r=1))) == []  # same finding, counted
    assert engine.findings[0].count == 2 and engine.version > version
    # A traceback is complete only when its stream moves on (or at flush).
    lines = VALUE_ERROR_TRACEBACK.splitlines()
    for number, text in enumerate(lines, start=3):
        assert engine.feed(LogLine("a.log", number, text)) == []
    assert [f.rule for f in engine.flush("a.log")] == ["python-exception"]


def split_prefix(text: str) -> tuple[int | None, str]:
    prefix = parse_prefix(text)
    return prefix.rank, prefix.body


def test_rank_prefixes_and_paths():
    assert split_prefix("[rank3]: boom") == (3, "boom")
    assert split_prefix("[default5]:[rank13]: boom") == (13, "boom")
    assert split_prefix("3: boom") == (3, "boom")
    assert split_prefix("[1,7]<stderr>: boom") == (7, "boom")
    assert split_prefix("(RayTrainWorker pid=4242, ip=10.0.0.1) boom") == (None, "boom")
    assert split_prefix("node1:1234:1240 [3] NCCL WARN x") == (None, "node1:1234:1240 [3] NCCL WARN x")
    assert split_prefix("plain text") == (None, "plain text")
    # A line's rank: its prefix wins over its file's; a Ray pid or NCCL host tag is no rank.
    rank5 = FileRanks("/tmp/no-such-folder/rank5.log")
    assert rank5.of("[rank3]: boom") == 3 and rank5.of("plain text") == 5
    assert rank5.of("(pid=4242) boom") == 5 and FileRanks("/tmp/no-such-folder/x.log").of("plain") is None
    assert rank_from_path("/logs/none_abc/attempt_0/3/stderr.log") == 3
    assert rank_from_path("out/rank12.log") == 12
    assert rank_from_path("out/job-rank-4-of-8.out") == 4
    assert rank_from_path("out/train.log") is None


def test_process_group_nccl_rank_tags_of_every_era():
    assert rank_in_text("[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught") == 1
    assert rank_in_text("[PG 3 Rank 4] NCCL watchdog thread terminated with exception") == 4  # 2.2
    assert rank_in_text("[PG 0 (default_pg) Rank 1] Exception (either an error or timeout) detected") == 1  # 2.3, 2.4
    assert rank_in_text("[PG ID 0 PG GUID 0(default_pg) Rank 3]  failure detected by watchdog") == 3  # 2.5+
    assert rank_in_text("[PG ID 2 PG GUID 7(tensor parallel) Rank 6] Watchdog caught") == 6  # a user's group_desc
    assert rank_in_text("[PG 1 (undefined) Rank 12] x") == 12
    # Not a ProcessGroupNCCL tag.
    assert rank_in_text("[deepspeed] OVERFLOW! Rank 0 Skipping step.") is None
    assert rank_in_text("[PG 0] [Rank] x") is None


def test_rank_of_an_unprefixed_line_comes_from_the_torch_2_4_tag(tmp_path):
    line = ("[E1003 18:37:01.833575187 ProcessGroupNCCL.cpp:607] [PG 0 (default_pg) Rank 5] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=6463, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600010 milliseconds before timing out.")
    (finding,) = run_lines(Engine(catalogue_from(tmp_path)), line).findings
    assert (finding.rule, finding.rank, finding.ranks) == ("nccl-watchdog-timeout", 5, [5])


def test_terminal_wrapped_message_inside_a_traceback_is_joined(tmp_path):
    message = "RuntimeError: " + "a" * 46 + "CUDA out of memory. Tried to allocate 2.00 GiB; see the allocator notes"
    wrapped = [message[i:i + 80] for i in range(0, len(message), 80)]
    assert "Tried" not in wrapped[0]  # the phrase really is cut by the wrap
    text = "\n".join(['Traceback (most recent call last):', '  File "/home/u/train.py", line 4, in <module>', *wrapped])
    (finding,) = run_lines(Engine(catalogue_from(tmp_path)), text).findings
    assert finding.rule == "cuda-oom" and finding.fields["tried"] == "2.00 GiB"
    assert finding.line == 3 and len(finding.evidence) == 2


CONFIRM_RULES = r'''
[[rule]]
id = "killed"
category = "host_oom"
severity = "warning"
role = "cascade"
title = "Process {pid} was killed"
confirmed_title = "The OOM killer killed rank {rank} ({confirm_anon_rss} resident)"
patterns = ['Signal 9 \(SIGKILL\) received by PID (?P<pid>\d+)']
remedy = """
Process {pid} got SIGKILL.
The kernel killed {confirm_process} (pid {confirm_pid}), confirmed by {confirmed_by}.
"""

[[rule]]
id = "kernel-oom"
category = "host_oom"
severity = "error"
role = "confirm"
title = "The kernel killed a process for lack of host memory"
patterns = ['Out of memory: Killed process (?P<pid>\d+) \((?P<process>[^)]+)\).*?anon-rss:(?P<anon_rss>\d+kB)']
'''
SIGKILL_SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-03-02_10:44:02
  host      : gpu-node-04
  rank      : 5 (local_rank: 5)
  exitcode  : -9 (pid: 7015)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 7015
============================================================"""
KERNEL_OOM = "[Sat Mar  2 10:44:01 2024] Out of memory: Killed process 7015 (python3) total-vm:212841116kB, anon-rss:198234520kB, file-rss:0kB"


def test_confirmation_promotes_a_warning_cascade_and_renders_it_again(tmp_path):
    catalogue = catalogue_from(tmp_path, CONFIRM_RULES)
    alone = run_lines(Engine(catalogue), SIGKILL_SUMMARY)
    (killed,) = alone.findings
    assert (killed.role, killed.severity, killed.title) == ("cascade", "warning", "Process 7015 was killed")
    assert alone.root_cause() is None  # a warning is never the root cause
    # The confirmation arrives after the finding (kern.log read later) or before it: same result.
    for text in (SIGKILL_SUMMARY + "\n" + KERNEL_OOM, KERNEL_OOM + "\n" + SIGKILL_SUMMARY):
        engine = run_lines(Engine(catalogue), text)
        root = engine.root_cause()
        assert (root.rule, root.role, root.severity, root.rank) == ("killed", "root", "error", 5)
        assert root.title == "The OOM killer killed rank 5 (198234520kB resident)"
        assert root.remedy == (
            "Process 7015 got SIGKILL.\nThe kernel killed python3 (pid 7015), confirmed by kernel-oom.")
        assert root.fields["confirmed_by"] == "kernel-oom" and root.fields["confirm_pid"] == "7015"
        # The summary's rank/pid pair names the rank of the kernel's victim too.
        confirm = next(f for f in engine.findings if f.role == "confirm")
        assert confirm.rank == 5


def test_a_confirmation_field_no_confirm_rule_captures_is_a_rule_error(tmp_path):
    import pytest

    from monitor.diagnosis.catalogue import RuleError

    with pytest.raises(RuleError, match=r"rules\.toml:\d+: rule killed: \{confirm_anon_rsss\} names a field"):
        catalogue_from(tmp_path, CONFIRM_RULES.replace("{confirm_anon_rss}", "{confirm_anon_rsss}"))
    # Without any confirm rule of its category, confirmation fields cannot come either.
    with pytest.raises(RuleError, match="no confirm rule of category host_oom"):
        catalogue_from(tmp_path, CONFIRM_RULES[:CONFIRM_RULES.index('[[rule]]\nid = "kernel-oom"')])


IF_LOG_RULES = r'''
[[rule]]
id = "disk-full"
category = "disk_full"
severity = "error"
role = "root"
title = "Disk full"
patterns = ['No space left on device']
remedy = "Free space."

[[rule.advice]]
text = "The checkpoint goes to /dev/shm, which is RAM: save to a real disk."
if_log = 'save_dir\s*=\s*/dev/shm'

[[rule.advice]]
text = "Saving without /dev/shm involved."
unless_log = 'save_dir\s*=\s*/dev/shm'
'''


def test_advice_if_log_shows_only_when_its_regex_is_in_the_logs(tmp_path):
    catalogue = catalogue_from(tmp_path, IF_LOG_RULES)
    error = "OSError: [Errno 28] No space left on device"
    assert run_lines(Engine(catalogue), error).findings[0].remedy == "Free space.\nSaving without /dev/shm involved."
    shown = "Free space.\nThe checkpoint goes to /dev/shm, which is RAM: save to a real disk."
    assert run_lines(Engine(catalogue), "args: save_dir = /dev/shm/ckpt\n" + error).findings[0].remedy == shown
    # Found after the finding, in another file: rendered again.
    engine = run_lines(Engine(catalogue), error)
    engine.feed(LogLine("launch.log", 1, "save_dir=/dev/shm/ckpt"))
    assert engine.findings[0].remedy == shown


def test_if_log_advice_of_a_shipped_rule_found_far_into_a_big_log(tmp_path):
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.diagnosis.diagnose import diagnose_paths

    error = "torch.distributed.DistStoreError: use_libuv was requested but PyTorch was built without libuv support, run with USE_LIBUV=0 to disable it."
    path = tmp_path / "job.log"
    catalogue = load_catalogue(include_user=False)
    path.write_text("".join(f"step {n} loss 1.0\n" for n in range(5000)) + error + "\n")
    for fast in (True, False):
        remedy = diagnose_paths([path], catalogue, fast=fast).root_cause.remedy
        assert "Simplest: set the environment variable USE_LIBUV=0" in remedy and "already set" not in remedy
    path.write_text("".join(f"step {n} loss 1.0\n" for n in range(5000)) + "+ export USE_LIBUV=0\n" + error + "\n")
    for fast in (True, False):
        remedy = diagnose_paths([path], catalogue, fast=fast).root_cause.remedy
        assert "USE_LIBUV=0 is already set and it still fails" in remedy and "Simplest" not in remedy


@pytest.fixture
def shanghai_time(monkeypatch):
    """The machine's zone is UTC+8 (no DST) for the test: where our users are, and far from UTC."""
    yield from in_time_zone(monkeypatch, "Asia/Shanghai")


def test_first_seen_is_the_time_written_in_the_log_line_else_none(tmp_path, shanghai_time):
    import calendar
    import time

    from monitor.diagnosis.timestamps import parse_timestamp

    year = time.localtime().tm_year
    # glog and Python's logging write local time: 10:40:02 in Shanghai is 02:40:02 UTC.
    glog = calendar.timegm((year, 1, 2, 2, 40, 2, 0, 0, 0))
    text = "\n".join([
        # glog header inside the rank prefix (PyTorch C++ logs).
        "[rank2]:[E0102 10:40:02.118000 ProcessGroupNCCL.cpp:1834] [PG 0 (default_pg) Rank 2] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds",
        # torchelastic's glog-style header with microseconds.
        "E0102 10:40:03.644000 12047 torch/distributed/elastic/multiprocessing/api.py:869] failed: Signal 9 (SIGKILL) received by PID 7015",
        # A python traceback carries no time.
        *VALUE_ERROR_TRACEBACK.splitlines(),
    ])
    engine = run_lines(Engine(catalogue_from(tmp_path)), text)
    seen = {f.rule: f.first_seen for f in engine.findings}
    assert seen["nccl-watchdog-timeout"] == glog + 0.118
    assert seen["sigkill"] == glog + 1.644
    assert time.strftime("%H:%M:%S", time.localtime(seen["sigkill"])) == "10:40:03"  # shown as the log says
    assert seen["python-exception"] is None
    iso = run_lines(Engine(catalogue_from(tmp_path)), "2024-12-26 02:11:16,123 ERROR OSError: Signal 9 (SIGKILL) received by PID 1")
    assert iso.findings[0].first_seen == calendar.timegm((2024, 12, 25, 18, 11, 16, 0, 0, 0)) + 0.123
    # Kernel logs: syslog and dmesg -T; impossible dates and bare clock times are no timestamps.
    assert parse_timestamp("[Sat Mar  2 11:04:18 2024] Out of memory: Killed process 7015") == calendar.timegm((2024, 3, 2, 3, 4, 18, 0, 0, 0))
    assert parse_timestamp("Mar 02 10:44:01 gpu-node-04 kernel: Out of memory") is not None
    # A zone in the stamp wins over the machine's.
    assert parse_timestamp("2024-12-26T02:11:16+02:00 x") == calendar.timegm((2024, 12, 26, 0, 11, 16, 0, 0, 0))
    assert parse_timestamp("2024-12-26T02:11:16Z x") == calendar.timegm((2024, 12, 26, 2, 11, 16, 0, 0, 0))
    assert parse_timestamp("I0230 10:00:00 x") is None and parse_timestamp("0000-01-01 00:00:00") is None
    assert parse_timestamp("step 3 at 12:00:00") is None
    # A year-less date never lands in the future: last year's December read in January.
    future = time.localtime(time.time() + 3 * 86400)
    stamp = parse_timestamp(f"E{future.tm_mon:02d}{future.tm_mday:02d} 10:00:00.000 x")
    assert stamp is not None and stamp < time.time()


@pytest.mark.parametrize("fast", [True, False])
def test_a_time_without_a_year_takes_the_year_the_log_itself_writes(tmp_path, fast):
    """torch's glog lines write no year; a log from 2022 read today had them four years after its
    own dated lines, and the launcher's 2022 line below an NCCL error came first: it was the root
    cause. The year nearest the log's first dated line (read or streamed alike): December's dates
    before a January glog line cross into the next year."""
    import time

    from monitor.diagnosis.diagnose import diagnose_paths
    from monitor.diagnosis.timestamps import FileDate, parse_timestamp

    log = tmp_path / "job.log"
    log.write_text("LAUNCH INFO 2022-11-21 02:35:41,902 job_id: default\n"
                   "Traceback (most recent call last):\n"
                   '  File "/srv/train.py", line 117, in run\n    paddle.distributed.init_parallel_env()\n'
                   "OSError: (External) NCCL error(2), unhandled system error.\n\n"
                   "I1121 02:35:53.560647 3004662 tcp_store.cc:257] receive shutdown event\n"
                   "LAUNCH ERROR 2022-11-21 02:35:54,385 Container failed !!!\n"
                   "Container rank 1 status failed cmd ['/usr/bin/python', '-u', 'train.py'] code 1 log log/workerlog.1\n")
    diagnosis = diagnose_paths([str(log)], load_catalogue(include_user=False), fast=fast)
    assert diagnosis.root_cause.rule == "nccl-error"
    (nccl,) = [f for f in diagnosis.findings if f.rule == "nccl-error"]
    assert time.localtime(nccl.before).tm_year == 2022
    december = FileDate().look("[2022-12-31 23:59:00,000] INFO saving")
    assert december is not None and time.localtime(parse_timestamp("I0101 00:00:05.0 x", december)).tm_year == 2023
    assert time.localtime(parse_timestamp("I1121 02:35:53.5 x", december)).tm_year == 2022
    # A time without a year before the first date: the file's year is not taken from later lines
    # (times read before it took the current one), read whole or line by line alike.
    look = FileDate()
    assert look.look("I1121 02:35:53.5 x") is None and look.done
    assert look.look("[2022-12-31 23:59:00,000] INFO saving") is None


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("glog_name", ["rank0.log", "rank9.log"])
def test_a_file_of_glog_times_takes_the_year_of_another_files_dated_lines(tmp_path, fast, glog_name):
    """Every file's first lines are looked at before any is read: rank 0's file of glog times alone
    takes 2022 from rank 1's dated lines whichever is read first, and its illegal memory access, five
    seconds before rank 1's OOM, is the root cause (read first, it had taken this year)."""
    from monitor.diagnosis.diagnose import diagnose_paths

    (tmp_path / glog_name).write_text(
        "[rank0]: step 100 loss 2.31\n[E1121 02:35:50.123456 3004662 ProcessGroupNCCL.cpp:1182] [Rank 0] NCCL watchdog "
        "thread terminated with exception: CUDA error: an illegal memory access was encountered\n")
    (tmp_path / "rank1.log").write_text(
        "2022-11-21 02:35:40,101 - INFO - rank 1 starting\n2022-11-21 02:35:55,001 - ERROR - rank 1: "
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    root = diagnose_paths([str(tmp_path)], load_catalogue(include_user=False), fast=fast).root_cause
    assert root.rule == "cuda-illegal-access"


def test_python_exception_title_follows_a_rank_learned_later():
    # The same traceback first without a prefix (rank unknown), then from [rank1]: the finding
    # takes rank 1, and its title must say so too.
    engine = Engine(load_catalogue(include_user=False))
    body = ['Traceback (most recent call last):', '  File "/home/u/train.py", line 9, in <module>',
            'ValueError: bad batch']
    lines = body + ["step 1"] + [f"[rank1]: {text}" for text in body] + ["[rank1]: step 2"]
    for number, text in enumerate(lines, 1):
        engine.feed(LogLine("a.log", number, text, 1 if text.startswith("[rank1]") else None))
    engine.flush()
    [finding] = [f for f in engine.findings if f.category == "python_exception"]
    assert finding.rank == 1
    assert finding.title == "ValueError on rank 1"


def test_a_stop_from_outside_before_the_timeouts_is_the_root_not_a_stalled_rank():
    # torchrun got SIGTERM (scancel, preemption); as the ranks went down, a peer's gloo pair
    # closed. Nobody hung: the stop is the root. The same loss before any stop: rank 0 left the job.
    catalogue = load_catalogue(include_user=False)
    stop = ("W1121 13:52:04.032000 4668 site-packages/torch/distributed/elastic/agent/server/api.py:753] "
            "Received 15 death signal, shutting down workers")
    gloo = ("[rank1]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
            "Connection closed by peer [127.0.0.1]:29500")
    world = "[rank0] world_size=2\n[rank1] world_size=2"
    stopped = run_lines(Engine(catalogue), f"{world}\n{stop}\n{gloo}").root_cause()
    assert stopped.rule == "torchrun-stopped-by-signal" and stopped.category == "stopped"
    hang = run_lines(Engine(catalogue), f"{world}\n{gloo}\n{stop}").root_cause()
    assert hang.category == "gloo_timeout" and hang.title.startswith("Rank 0 left the job")


def test_a_line_where_two_ranks_ran_together_is_read_as_two(tmp_path):
    """torchrun without --tee: "step 3 loss nan[rank3]: Traceback" (#14). The traceback is rank 3's,
    the loss line the other rank's, and the user is told how to keep lines whole."""
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.diagnosis.diagnose import diagnose_paths

    log = tmp_path / "job.log"
    log.write_text('step 2 loss 1.5\nstep 3 loss 1.4[rank3]: Traceback (most recent call last):\n'
                   '[rank3]:   File "train.py", line 9, in <module>\n[rank3]: ValueError: bad batch\n')
    for fast in (True, False):
        diagnosis = diagnose_paths([log], load_catalogue(include_user=False), fast=fast)
        root = diagnosis.root_cause
        assert (root.title, root.rank) == ("ValueError on rank 3", 3)
        (note,) = [f for f in diagnosis.findings if f.rule == "glued-output"]
        assert note.line == 2 and "--tee 3" in note.remedy and note.severity == "info"


def test_findings_timed_only_by_a_later_line_order_with_those_after_them() -> None:
    """A file whose first finding has only a time written after it (``before``) and whose last has
    none: each takes the nearest time known around it (it used to be None, and sorting failed)."""
    from monitor.model import Finding, chronological

    def finding(seq: int, file: str, first_seen=None, before=None) -> Finding:
        return Finding(rule=f"r{seq}", category="python_exception", severity="error", role="root", title="t",
                       file=file, seq=seq, arrival=seq, first_seen=first_seen, before=before)

    a = finding(0, "a.log", before=100.0)
    b = finding(1, "a.log")
    c = finding(2, "b.log", first_seen=50.0)
    assert [f.rule for f in chronological([a, b, c])] == ["r2", "r0", "r1"]


STORE_LOST_UNDER_TORCHRUN = """\
Traceback (most recent call last):
  File "/srv/train.py", line 133, in main
    group = dist.new_group(ranks=ranks)
  File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 473, in _store_based_barrier
    store.add(store_key, 1)
torch.distributed.DistNetworkError: Connection reset by peer
[2024-05-07 03:22:51,904] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) local_rank: 0 (pid: 88411) of binary: /usr/bin/python
Root Cause (first observed failure):
[0]:
  time      : 2024-05-07_03:22:51
  host      : node-07
  rank      : 2 (local_rank: 0)
  exitcode  : 1 (pid: 88411)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


@pytest.mark.parametrize("fast", [True, False])
def test_a_stamped_line_after_an_unstamped_traceback_is_the_next_message(tmp_path, fast):
    """torchelastic's "[<time>] ...: [ERROR] failed" right under the worker's exception is the
    launcher's line, not more of the exception's message: read into the message, all three findings
    had the traceback's first line as their place in time and the summary, made first, came first.
    Read and streamed alike, the lost store (line 6) is the root cause, the launcher's lines after it."""
    from monitor.diagnosis.diagnose import diagnose_paths
    from monitor.model import chronological

    log = tmp_path / "job.log"
    log.write_text(STORE_LOST_UNDER_TORCHRUN)
    diagnosis = diagnose_paths([str(log)], load_catalogue(include_user=False), fast=fast)
    assert (diagnosis.root_cause.rule, diagnosis.root_cause.line) == ("store-connection-lost", 6)
    assert not any("[ERROR] failed" in line for line in diagnosis.root_cause.evidence)
    assert [f.line for f in chronological(diagnosis.findings)] == [6, 7, 12]
    # Under a collector's prefix (kubectl logs --prefix), whose lead is read through to the time; and
    # with another writer's stamped line among the frames, which goes by without cutting them.
    prefixed = "".join(f"[pod/w-0/pytorch] {line}" for line in STORE_LOST_UNDER_TORCHRUN.splitlines(keepends=True))
    frames = STORE_LOST_UNDER_TORCHRUN.splitlines(keepends=True)
    interleaved = "".join(frames[:3] + ["[2024-05-07 03:22:51,903] torch.distributed.elastic.multiprocessing.api: "
                                        "[WARNING] Sending process 88412 closing signal SIGTERM\n"] + frames[3:])
    for text, line in ((prefixed, 6), (interleaved, 7)):
        log.write_text(text)
        root = diagnose_paths([str(log)], load_catalogue(include_user=False), fast=fast).root_cause
        assert (root.rule, root.line) == ("store-connection-lost", line)


def test_an_exceptions_message_lines_after_its_first_are_its_evidence_too(tmp_path):
    """torch's load_state_dict names the missing and unexpected keys on the lines after its first:
    the finding shows them (at most MESSAGE_EVIDENCE); not a chain's line nor the program's next line."""
    from monitor.diagnosis.classify import MESSAGE_EVIDENCE

    keys = "".join(f'\tMissing key(s) in state_dict: "layer{n}.weight". \n' for n in range(MESSAGE_EVIDENCE + 2))
    text = ('Traceback (most recent call last):\n  File "/srv/train.py", line 40, in <module>\n'
            "    model.load_state_dict(state)\nRuntimeError: Error(s) in loading state_dict for ResNet:\n" + keys)
    (finding,) = run_lines(Engine(load_catalogue(include_user=False)), text).findings
    assert finding.evidence[1:] == ["RuntimeError: Error(s) in loading state_dict for ResNet:",
                                    *keys.splitlines()[:MESSAGE_EVIDENCE]]
    chained = ('Traceback (most recent call last):\n  File "/srv/train.py", line 9, in <module>\n    load()\n'
               "KeyError: 'step'\n\nDuring handling of the above exception, another exception occurred:\n\n"
               'Traceback (most recent call last):\n  File "/srv/train.py", line 11, in <module>\n    resume()\n'
               "ValueError: no checkpoint to resume from\n")
    root = run_lines(Engine(load_catalogue(include_user=False)), chained).root_cause()
    assert root.evidence[-1] == "ValueError: no checkpoint to resume from"
    # The program's next lines, unprefixed, run on into the record: not indented, after a message
    # that announces nothing more, they are not the message.
    went_on = ('Traceback (most recent call last):\n  File "/srv/data.py", line 41, in load\n    decode(path)\n'
               "ValueError: cannot identify image file\nstep 11 loss 2.39\n")
    (finding,) = run_lines(Engine(load_catalogue(include_user=False)), went_on).findings
    assert finding.evidence[-1] == "ValueError: cannot identify image file"


def test_a_rule_that_names_no_rank_ignores_the_label_srun_puts_on_its_line(tmp_path):
    # srun --label relays slurmstepd's word on the whole step under the node's first task: the
    # step's cancellation is no rank's, while the task's own crash (same label) is rank 1's.
    rules = RULES + '''
[[rule]]
id = "step-cancelled"
category = "slurm_event"
severity = "error"
role = "root"
ranked = false
title = "SLURM ended {entity}"
patterns = ['\\*\\*\\* (?P<entity>STEP \\S+) ON \\S+ CANCELLED AT \\S+ DUE TO TIME LIMIT']
'''
    text = ("0: slurmstepd-gpu-3: error: *** STEP 77.0 ON gpu-3 CANCELLED AT 2026-01-02T03:04:05 DUE TO TIME LIMIT ***\n"
            "1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    engine = run_lines(Engine(catalogue_from(tmp_path, rules)), text)
    by_rule = {f.rule: f for f in engine.findings}
    assert (by_rule["step-cancelled"].rank, by_rule["step-cancelled"].ranks) == (None, [])
    assert by_rule["step-cancelled"].title == "SLURM ended STEP 77.0"
    assert by_rule["cuda-oom"].rank == 1


def _traceback(exc: str, prefix: str = "") -> str:
    return "\n".join(prefix + line for line in (
        "Traceback (most recent call last):", '  File "/job/train.py", line 40, in main', "    step(batch)", exc))


def test_a_traceback_the_program_printed_before_torchs_report_of_an_uncaught_one_is_no_root():
    # torch's excepthook prints a rank's uncaught exception behind "[rank<N>]: " once the process
    # group is up; an unprefixed traceback before it in the file was printed by the program.
    catalogue = load_catalogue(include_user=False)
    printed = _traceback("ConnectionRefusedError: [Errno 111] Connection refused")
    uncaught = _traceback("IndexError: list index out of range", "[rank1]: ")
    root = run_lines(Engine(catalogue), f"{printed}\nstep 2 loss 0.5\n{uncaught}").root_cause()
    assert (root.fields["exc_type"], root.rank) == ("IndexError", 1)
    # A thread's uncaught exception (threading's hook) did not stop its rank, which then raised the
    # reported one; beside the others' timeouts alone, it is why its rank stopped.
    thread = "Exception in thread prefetch-1:\n" + _traceback("KeyError: 'rec7'")
    root = run_lines(Engine(catalogue), f"{thread}\nstep 2 loss 0.5\n{uncaught}").root_cause()
    assert root.fields["exc_type"] == "IndexError"
    timeout = ("[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] "
               "Timed out waiting 20000ms for recv operation to complete")
    root = run_lines(Engine(catalogue), f"[rank0]: step 1\n[rank1]: step 1\n{thread}\n{timeout}").root_cause()
    assert root.fields["exc_type"] == "KeyError" and root.fields["python_thread"] == "prefetch-1"
