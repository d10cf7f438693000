"""Every rank's stack from outside: py-spy on real processes, the ranks grouped by where they
are, the odd ones named; and what is said when py-spy is missing or not permitted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from monitor.session import hang_probe
from monitor.stacks import compare, files
from monitor.stacks.capture import take
from monitor.stacks.model import Capture, Frame, ProcessStack, Thread
from monitor.stacks.pyspy import find_py_spy

TORCH_C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
AUTOGRAD = "/venv/lib/python3.11/site-packages/torch/autograd/graph.py"
TRAIN = "/work/job/train.py"

SLEEPER = textwrap.dedent("""\
    import sys, time
    def load_batch():
        print("ready", flush=True)
        time.sleep(120)
    def main():
        load_batch()
    main()
""")


def _spawn(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen:
    script = tmp_path / "train.py"
    script.write_text(SLEEPER)
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env={**os.environ, **env})
    assert process.stdout.readline() == b"ready\n"
    return process


def _can_trace() -> bool:
    py_spy = find_py_spy()
    if py_spy is None:
        return False
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.3)
        return subprocess.run([py_spy, "dump", "--pid", str(child.pid)], capture_output=True).returncode == 0
    finally:
        child.kill()
        child.wait()


needs_ptrace = pytest.mark.skipif(not _can_trace(), reason="py-spy cannot attach to a child process here")


@needs_ptrace
def test_a_real_rank_stack_names_its_own_frame_and_line(tmp_path):
    process = _spawn(tmp_path, {"RANK": "0", "WORLD_SIZE": "1"})
    try:
        capture = take([process.pid], "request")
    finally:
        process.kill()
        process.wait()
    assert capture.problem == ""
    (stack,) = capture.ranked()
    assert stack.rank == 0 and stack.pid == process.pid and "train.py" in stack.command
    place = compare.place_of(stack)
    assert place.frame.function == "load_batch" and place.frame.line == 4 and place.collective == ""
    finding = compare.analyse(capture, "run-1.stacks.txt")
    assert finding.title == "every rank is in load_batch (train.py:4): none waits in a collective"
    assert finding.fields["code"] == "time.sleep(120)" and finding.severity == "info"
    text = files.render(capture, finding)
    assert " >   load_batch (" in text and "time.sleep(120)" in text


@needs_ptrace
def test_a_process_without_a_rank_is_taken_when_none_has_one(tmp_path):
    """A plain `python train.py` has no RANK: its Python processes are the job."""
    process = _spawn(tmp_path, {})
    try:
        capture = take([process.pid], "request")
    finally:
        process.kill()
        process.wait()
    assert [p.rank for p in capture.ranked()] == [None]


def test_missing_py_spy_is_one_line_with_the_fix(tmp_path, monkeypatch):
    process = _spawn(tmp_path, {"RANK": "0"})
    monkeypatch.setenv("MONITOR_PY_SPY", str(tmp_path / "no-py-spy"))
    try:
        capture = take([process.pid], "stall")
    finally:
        process.kill()
        process.wait()
    assert capture.problem.startswith(f"cannot run {tmp_path / 'no-py-spy'}: No such file or directory")
    assert "pip install py-spy" in capture.problem and "\n" not in capture.problem
    assert compare.analyse(capture) is None


@needs_ptrace
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to act as another user")
def test_not_permitted_is_one_line_with_the_fix(tmp_path):
    """py-spy run as another user (nobody) cannot read root's process."""
    binary = tmp_path / "py-spy"
    shutil.copy(find_py_spy(), binary)
    wrapper = tmp_path / "py-spy-as-nobody"
    wrapper.write_text(f"#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups {binary} \"$@\"\n")
    for path in (tmp_path, binary, wrapper):
        path.chmod(0o755)
    process = _spawn(tmp_path, {"RANK": "0"})
    try:
        capture = take([process.pid], "stall", py_spy=str(wrapper))
    finally:
        process.kill()
        process.wait()
    assert capture.processes[0].error_kind == "permission"
    assert capture.problem.startswith(f"not permitted to read the stack of pid {process.pid}: ")
    assert "SYS_PTRACE" in capture.problem and "ptrace_scope" in capture.problem


def test_a_job_that_has_ended_is_said_so():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    capture = take([process.pid], "timeout")
    assert capture.problem == "no process of the job is running" and capture.processes == []


# -- grouping, on stacks as py-spy gives them (innermost first) ---------------------------------

def _rank(rank: int, *frames: tuple[str, str, int]) -> ProcessStack:
    thread = Thread("MainThread", 1000 + rank, [Frame(*f) for f in frames])
    return ProcessStack(pid=1000 + rank, rank=rank, command="python train.py", threads=[thread])


def _waiting(rank: int, collective: str = "all_reduce", line: int = 120) -> ProcessStack:
    return _rank(rank, (collective, TORCH_C10D, 3245), ("wrapper", TORCH_C10D.replace("distributed_c10d", "c10d_logger"), 83),
                 ("train_step", TRAIN, line), ("main", TRAIN, 200))


def _capture(*stacks: ProcessStack, world: int | None = None) -> Capture:
    return Capture(taken=1.0e9, trigger="stall", host="gpu-07", processes=list(stacks),
                   world_size=world if world is not None else len(stacks))


def test_the_rank_outside_the_collective_is_the_stuck_one():
    stuck = _rank(2, ("load_batch", TRAIN, 88), ("train_step", TRAIN, 110), ("main", TRAIN, 200))
    finding = compare.analyse(_capture(_waiting(0), _waiting(1), stuck, _waiting(3)), "run-1.stacks.txt")
    assert finding.title == ("rank 2 is in load_batch (train.py:88) while ranks 0,1,3 wait in all_reduce at "
                             "train_step (train.py:120)")
    assert (finding.rank, finding.ranks, finding.severity, finding.role) == (2, [2], "error", "root")
    assert (finding.file, finding.line, finding.category, finding.origin) == (TRAIN, 88, "hang", "stacks")
    assert finding.remedy.startswith("Rank 2 has not reached the collective the others wait in (all_reduce): "
                                     "it is in load_batch at train.py:88.")
    assert "init_process_group(timeout=...)" in finding.remedy and "run-1.stacks.txt" in finding.remedy
    assert finding.evidence[0].startswith("ranks 0,1,3 (pid 1000,1001,1003): all_reduce (distributed_c10d.py:3245)")


def test_ddp_ranks_waiting_in_backward_count_as_waiting():
    backward = [_rank(r, ("_engine_run_backward", AUTOGRAD, 979), ("run_steps", TRAIN, 222)) for r in (0, 1, 3)]
    stuck = _rank(2, ("load_batch", TRAIN, 102), ("run_steps", TRAIN, 219))
    finding = compare.analyse(_capture(*backward[:2], stuck, backward[2]))
    assert finding.fields["kind"] == "stuck" and finding.rank == 2
    assert "DDP's gradient all-reduce, in backward" in finding.remedy


# -- a verdict taken again: a rank only passing through is not named -------------------------

def _looks(monkeypatch, *captures: Capture) -> list[Capture]:
    """Makes the probe's captures these, in turn; the list of those not yet taken."""
    left = list(captures)
    monkeypatch.setattr(hang_probe, "take", lambda pids, reason, py_spy=None: left.pop(0))
    return left


def _backward(rank: int, line: int = 222) -> ProcessStack:
    return _rank(rank, ("_engine_run_backward", AUTOGRAD, 979), ("run_steps", TRAIN, line))


def _in_load_batch(rank: int) -> ProcessStack:
    return _rank(rank, ("load_batch", TRAIN, 102), ("run_steps", TRAIN, 219))


def test_a_rank_read_while_still_in_its_previous_collective_is_not_named(monkeypatch):
    # Rank 0 read in DDP's set-up while its peers are already in backward: read again, it is with them.
    passing = _capture(_waiting(0, "all_gather", 206), _backward(1), _in_load_batch(2), _backward(3))
    settled = _capture(_backward(0), _backward(1), _in_load_batch(2), _backward(3))
    left = _looks(monkeypatch, passing, settled, replace(settled, taken=settled.taken + 2))
    look = hang_probe.Look([1], "stall", confirm_after_s=0)
    assert look.finding.title == "rank 2 is in load_batch (train.py:102) while ranks 0,1,3 wait in backward at " \
                                 "run_steps (train.py:222)"
    assert look.capture.taken == settled.taken + 2 and not left


def test_a_verdict_the_next_look_agrees_with_takes_two_looks(monkeypatch):
    stuck = _capture(_backward(0), _backward(1), _in_load_batch(2), _backward(3))
    left = _looks(monkeypatch, stuck, replace(stuck, taken=stuck.taken + 2), stuck)
    look = hang_probe.Look([1], "stall", confirm_after_s=0)
    assert look.finding.rank == 2 and look.capture.taken == stuck.taken + 2 and len(left) == 1


def test_ranks_that_keep_moving_are_looked_at_a_bounded_number_of_times(monkeypatch):
    moving = [_capture(_backward(0), _backward(1), _rank(2, ("forward", TRAIN, 100 + i), ("run_steps", TRAIN, 219)))
              for i in range(hang_probe.CONFIRM_LOOKS + 1)]
    left = _looks(monkeypatch, *moving)
    look = hang_probe.Look([1], "stall", confirm_after_s=0)
    assert look.finding.line == 100 + hang_probe.CONFIRM_LOOKS - 1 and len(left) == 1


def test_a_verdict_without_odd_ranks_and_a_job_gone_meanwhile_are_not_looked_at_again(monkeypatch):
    all_wait = _capture(_waiting(0), _waiting(1))
    left = _looks(monkeypatch, all_wait, all_wait)
    assert hang_probe.Look([1], "stall", confirm_after_s=0).finding.fields["kind"] == "all-wait" and len(left) == 1

    stuck = _capture(_backward(0), _in_load_batch(1))
    _looks(monkeypatch, stuck, Capture(taken=2.0e9, trigger="stall", host="gpu-07", problem="no process of the job is running"))
    look = hang_probe.Look([1], "stall", confirm_after_s=0)
    assert look.finding.rank == 1 and look.capture is stuck

    # The launcher stopping the ranks: the next look sees rank 0 alone.
    _looks(monkeypatch, stuck, _capture(_in_load_batch(0)))
    look = hang_probe.Look([1], "stall", confirm_after_s=0)
    assert look.finding.rank == 1 and look.capture is stuck


def test_the_minority_collective_is_a_mismatch():
    finding = compare.analyse(_capture(_waiting(0, "broadcast", 117), _waiting(1), _waiting(2), _waiting(3)))
    assert finding.fields["kind"] == "mismatch" and finding.rank == 0
    assert finding.title.startswith("rank 0 waits in broadcast at train_step (train.py:117) while ranks 1,2,3 wait in")


def test_every_rank_in_one_collective_points_at_other_nodes_when_ranks_are_missing():
    finding = compare.analyse(_capture(_waiting(0), _waiting(1), world=16))
    assert finding.title == "every rank waits in all_reduce at train_step (train.py:120)"
    assert finding.severity == "warning" and finding.rank is None
    assert "14 of the job's 16 ranks do not run on this machine (gpu-07)" in finding.remedy
    assert "monitor stacks --run LOG" in finding.remedy


def test_a_rank_held_by_an_nccl_collective_waits_for_its_gpu_not_in_the_collective():
    """Recorded on an H200 (tests/device/check.sh, scenario timeout): NCCL's all-reduce held behind
    a spinning kernel, the watchdog timed out, and py-spy found the rank in torch.cuda.synchronize:
    NCCL's Python call had returned. Read before as "none waits in a collective"."""
    recorded = Path(__file__).parent / "device" / "recorded" / "stacks-nccl-timeout-h200.json"
    [(capture, _)] = files.read(recorded)
    finding = compare.analyse(capture)
    assert finding.title == "every rank waits for the GPU in torch.cuda.synchronize at main (gpu_job.py:50)"
    assert (finding.severity, finding.fields["kind"], finding.fields["gpu_wait"]) == ("warning", "all-wait",
                                                                                    "torch.cuda.synchronize")
    assert "a collective's Python call returns at once" in finding.remedy and "NCCL_DEBUG=INFO" in finding.remedy
    # The straggler's looks count collectives only: a rank at a GPU wait may be computing.
    assert compare.place_of(capture.ranked()[0]).collective == ""


def test_a_rank_held_by_an_nccl_collective_at_item_is_read_from_its_own_line():
    """Recorded on an H200 (check.sh, scenario timeout-item): the rank waits for the held all-reduce
    in .item(), which has no Python frame of its own: py-spy shows the job's line, read from its
    source (this repository's tests/jobs/gpu_job.py, where the recording's path pointed)."""
    recorded = Path(__file__).parent / "device" / "recorded" / "stacks-nccl-timeout-item-h200.json"
    [(capture, _)] = files.read(recorded)
    job = str(Path(__file__).parent / "jobs" / "gpu_job.py")
    for stack in capture.processes:
        for thread in stack.threads:
            thread.frames = [replace(f, file=job) if f.file.endswith("/tests/jobs/gpu_job.py") else f
                             for f in thread.frames]
    finding = compare.analyse(capture)
    assert finding.title == "every rank waits for the GPU in .item() at main (gpu_job.py:55)"
    assert (finding.severity, finding.fields["gpu_wait"]) == ("warning", ".item()")


def test_a_rank_outside_the_others_gpu_wait_is_the_stuck_one(tmp_path):
    train = tmp_path / "train.py"
    train.write_text("def step(model, batch):\n    loss = model(batch)\n    print(loss.item())\n")
    at_item = [_rank(r, ("step", str(train), 3), ("main", str(train), 9)) for r in (0, 1, 3)]
    stuck = _rank(2, ("load_batch", TRAIN, 88), ("main", TRAIN, 200))
    finding = compare.analyse(_capture(*at_item[:2], stuck, at_item[2]))
    assert finding.fields["kind"] == "stuck" and finding.rank == 2
    assert finding.title == "rank 2 is in load_batch (train.py:88) while ranks 0,1,3 wait for the GPU in .item() at step (train.py:3)"
    assert "the collective the others wait in (.item(): with NCCL, the collectives queued on the GPU before it)" in finding.remedy
    # The same line elsewhere in the stack is not a wait: the rank is inside a call it makes.
    deeper = _rank(0, ("linear", "/venv/lib/python3.11/site-packages/torch/nn/functional.py", 2380),
                   ("step", str(train), 3))
    assert compare.place_of(deeper).frame.line == 3
    assert compare.place_of(deeper).gpu_wait == ""


def test_a_rank_at_a_gpu_wait_beside_ranks_in_a_collective_is_the_one_they_wait_for(tmp_path):
    """Rank 0 evaluates alone (its loop reads .item()) while the others wait in a barrier: rank 0
    is the stuck one, not a rank waiting in another collective."""
    evaluate = tmp_path / "evaluate.py"
    evaluate.write_text("def evaluate(model, batches):\n    return sum(model(b).item() for b in batches)\n")
    alone = _rank(0, ("evaluate", str(evaluate), 2), ("main", TRAIN, 210))
    finding = compare.analyse(_capture(alone, *(_waiting(r, "barrier") for r in (1, 2, 3))))
    assert (finding.fields["kind"], finding.rank, finding.severity) == ("stuck", 0, "error")
    assert finding.remedy.startswith("Rank 0 has not reached the collective the others wait in (barrier)")


def test_every_rank_at_a_gpu_wait_is_only_a_note_until_a_collective_times_out(tmp_path):
    """A GPU-bound step looks the same for a moment: asked for (or on a silence) it is information
    with 'take the stacks again'; the transport's checks come only with a collective's timeout."""
    train = tmp_path / "train.py"
    train.write_text("def step(model, batch):\n    loss = model(batch)\n    print(loss.item())\n")
    ranks = [_rank(r, ("step", str(train), 3), ("main", str(train), 9)) for r in range(4)]
    asked = compare.analyse(Capture(taken=1.0e9, trigger="request", host="gpu-07", processes=ranks, world_size=4))
    assert (asked.fields["kind"], asked.severity) == ("all-wait", "info")
    assert "take the stacks again" in asked.remedy and "NCCL_DEBUG=INFO" not in asked.remedy
    timed_out = compare.analyse(Capture(taken=1.0e9, trigger="timeout", host="gpu-07", processes=ranks, world_size=4))
    assert timed_out.severity == "warning" and "NCCL_DEBUG=INFO" in timed_out.remedy


def test_torch_accelerators_synchronize_and_a_copy_to_the_cpu_are_gpu_waits(tmp_path):
    accelerator = _rank(0, ("synchronize", "/venv/lib/python3.12/site-packages/torch/accelerator/__init__.py", 112),
                        ("main", TRAIN, 50))
    assert compare.place_of(accelerator).gpu_wait == "torch.accelerator.synchronize"
    train = tmp_path / "train.py"
    train.write_text("def log(loss):\n    value = loss.detach().to('cpu')\n")
    assert compare.place_of(_rank(1, ("log", str(train), 2), ("main", str(train), 9))).gpu_wait == ".to('cpu')"


def test_ranks_without_a_stack_do_not_make_the_survivor_every_rank():
    gone = ProcessStack(pid=1001, rank=1, command="python train.py", threads=[Thread("MainThread", 1001, [])])
    stuck = _rank(2, ("load_batch", TRAIN, 88), ("main", TRAIN, 200))
    finding = compare.analyse(_capture(gone, stuck))
    assert finding.title.startswith("only rank 2 is in load_batch (train.py:88); the other ranks")
    assert finding.severity == "info"


def test_a_stacks_file_round_trips_and_keeps_the_latest_captures():
    stuck = _rank(2, ("load_batch", TRAIN, 88), ("main", TRAIN, 200))
    capture = _capture(_waiting(0), stuck)
    finding = compare.analyse(capture)
    data = None
    for _ in range(files.KEPT_CAPTURES + 2):
        data = files.updated_json(data, capture, finding)
    entries = json.loads(data)["captures"]
    assert len(entries) == files.KEPT_CAPTURES
    back, back_finding = files.capture_from_json(entries[-1])
    assert back == capture and back_finding.title == finding.title and back_finding.category == "hang"
    assert files.render_all(data).count("Stacks of the job's ranks on gpu-07") == files.KEPT_CAPTURES


@pytest.mark.parametrize(("written", "read"), [(4096, 4096), (None, None), (-5, None), (10 ** 30, None), (True, None), ("12", None)])
def test_the_logs_size_a_capture_was_taken_at_is_read_back_only_as_an_offset_a_file_can_have(written, read):
    entry = files.capture_to_json(_capture(_waiting(0), _waiting(1)), None)
    entry["log_bytes"] = written
    assert files.capture_from_json(entry)[0].log_bytes == read


# -- `monitor stacks`, as a user runs it ---------------------------------------------------------

def _stacks_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monitor", "stacks", *args], capture_output=True, text=True,
                          timeout=60)


@needs_ptrace
def test_stacks_command_prints_the_ranks_and_saves_beside_a_run_log(tmp_path):
    process = _spawn(tmp_path, {"RANK": "0", "WORLD_SIZE": "1"})
    log = tmp_path / "run-1.log"
    (tmp_path / "run-1.job.json").write_text(json.dumps({"job_pid": process.pid}))
    try:
        by_pid = _stacks_cli("--pid", str(process.pid))
        by_run = _stacks_cli("--run", str(log))
    finally:
        process.kill()
        process.wait()
    assert by_pid.returncode == 0, by_pid.stderr
    assert "every rank is in load_batch (train.py:4)" in by_pid.stdout and " >   load_batch (" in by_pid.stdout
    assert by_run.returncode == 0, by_run.stderr
    saved = files.read(tmp_path / "run-1.stacks.json")
    assert [c.processes[0].pid for c, _ in saved] == [process.pid]
    assert "time.sleep(120)" in (tmp_path / "run-1.stacks.txt").read_text()


def test_stacks_command_says_in_one_line_what_it_cannot_look_into(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    shell = subprocess.Popen(["sleep", "30"])
    try:
        results = [_stacks_cli("--pid", str(gone.pid)), _stacks_cli("--pid", str(shell.pid)),
                   _stacks_cli("--run", str(tmp_path / "run-1.log"))]
    finally:
        shell.kill()
        shell.wait()
    assert [r.returncode for r in results] == [2, 2, 2]
    assert results[0].stderr == f"monitor: stacks: pid {gone.pid}: no such process\n"
    assert results[1].stderr == "monitor: stacks: no Python process among the job's 1 running process\n"
    assert results[2].stderr.startswith(f"monitor: stacks: {tmp_path / 'run-1.job.json'}: no such file or directory")
    assert all(r.stdout == "" and r.stderr.count("\n") == 1 for r in results)


def test_ranks_at_one_line_are_one_place_whatever_each_sleeps_in():
    frame = Frame("evaluate", "/home/u/train.py", 40)
    assert compare.Place("", frame, "", "Queue.get") == compare.Place("", frame, "", "")
