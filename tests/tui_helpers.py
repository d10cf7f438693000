"""Fixed data and in-file fakes for the TUI tests: deterministic (no clocks, no threads racing)."""

from __future__ import annotations

import queue

from monitor.model import Diagnosis, Finding, LogLine
from monitor.metrics.model import DirUsage, GpuSample, HostSample, JobProcess, JobSample, Sample
from monitor.progress import ProgressTracker
from monitor.session.feeds import LogBatch

FIRST_SEEN = 1_763_720_000.0  # a fixed wall-clock time; tests set TZ=UTC


def crash_lines() -> list[LogLine]:
    """A small 4-rank crash: rank 2 raises, the others time out in gloo."""
    lines: list[LogLine] = []
    n = {r: 0 for r in range(4)}

    def add(rank: int, text: str) -> None:
        n[rank] += 1
        lines.append(LogLine(f"logs/rank{rank}.log", n[rank], f"[rank{rank}]: {text}", rank))

    for step in range(1, 6):
        for rank in range(4):
            add(rank, f"step {step}/100 loss {2.5 - 0.1 * step:.3f} 12.5 it/s")
    add(2, "Traceback (most recent call last):")
    add(2, '  File "train.py", line 42, in <module>')
    add(2, "ValueError: bad batch at step 6 [bold]not markup[/]")
    for rank in (0, 1, 3):
        add(rank, "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    add(0, "WARNING: torch.distributed.elastic: Sending process 101 closing signal SIGTERM")
    return lines


def crash_findings() -> tuple[list[Finding], Finding]:
    root = Finding(
        rule="python_exception", category="python_exception", severity="error", role="root",
        title="ValueError on rank 2", rank=2, ranks=[2], file="logs/rank2.log", line=8, count=1,
        evidence=["Traceback (most recent call last):", "ValueError: bad batch at step 6 [bold]not markup[/]"],
        fields={"type": "ValueError"}, remedy="Fix the exception on rank 2; the other ranks only waited for it.",
        seq=0, first_seen=FIRST_SEEN,
    )
    cascade = Finding(
        rule="gloo_peer_closed", category="nccl_error", severity="error", role="cascade",
        title="gloo connection closed by peer", rank=0, ranks=[0, 1, 3], file="logs/rank0.log", line=6, count=3,
        evidence=["RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer"],
        fields={}, remedy="A symptom: another rank died first.", seq=1, first_seen=FIRST_SEEN + 2,
    )
    warning = Finding(
        rule="sigterm_sent", category="launcher", severity="warning", role="cascade",
        title="torchrun sent SIGTERM to the other ranks", rank=0, ranks=[0], file="logs/rank0.log", line=7,
        count=1, evidence=["WARNING: ... SIGTERM"], fields={}, remedy="", seq=2, first_seen=FIRST_SEEN + 3,
    )
    return [root, cascade, warning], root


def host_sample(with_gpus: bool = False) -> Sample:
    host = HostSample(
        cpu_percent=37.0, cpu_per_core_percent=[40.0, 34.0], memory_total_bytes=24 << 30,
        memory_used_bytes=9 << 30, memory_available_bytes=15 << 30, swap_total_bytes=2 << 30,
        swap_used_bytes=0, load_1m=1.2, load_5m=1.0, load_15m=0.8, net_sent_bytes_per_s=2048.0,
        net_recv_bytes_per_s=8192.0, shm_total_bytes=12 << 30, shm_used_bytes=1 << 30,
        dirs=[DirUsage("logs", 100 << 30, 60 << 30, 40 << 30)],
    )
    gpus = []
    if with_gpus:
        gpus = [
            GpuSample(index=i, cuda_index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}",
                      utilization_gpu_percent=90.0 + i, memory_used_bytes=(60 + i) << 30,
                      memory_total_bytes=80 << 30, temperature_c=70.0 + i, power_w=500.0, power_limit_w=700.0)
            for i in range(2)
        ]
    job = JobSample(root_pids=[100], alive=True, processes=[
        JobProcess(pid=101 + r, ppid=100, name="python", cpu_percent=95.0, rss_bytes=(1 << 30) + r, rank=r)
        for r in range(4)
    ])
    return Sample(
        time=FIRST_SEEN, host=host, gpu_status="ok" if with_gpus else "no_library",
        gpu_message="" if with_gpus else "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver on this machine",
        gpus=gpus, job=job,
    )


class ScriptedLogFeed:
    """Hands out the batches the test queues, in order; an empty batch when none is queued. Like
    the session's feed, each batch carries the progress its lines changed."""

    def __init__(self, batches: list[LogBatch] | None = None) -> None:
        self.progress = ProgressTracker(clock=lambda: 0.0)
        self.batches: queue.Queue[LogBatch] = queue.Queue()
        for batch in batches or []:
            self.batches.put(batch)
        self.closed = False
        self.polls = 0

    def poll(self, timeout: float) -> LogBatch:
        self.polls += 1
        try:
            batch = self.batches.get(timeout=timeout)
        except queue.Empty:
            return LogBatch()
        version = self.progress.version
        for line in batch.lines:
            self.progress.feed(line.text, line.rank, 0.0, line.file)
        if self.progress.version != version:
            batch.progress = self.progress.state
        return batch

    def diagnosis(self) -> Diagnosis:
        return Diagnosis(root_cause=None, findings=[], files=[])

    def close(self) -> None:
        self.closed = True


class FixedMetricsFeed:
    """Always the same sample; on the first call, ``findings`` go to ``post`` (a job session's)."""

    def __init__(self, sample: Sample, findings: list[Finding] | None = None, post=None) -> None:
        self._sample = sample
        self._findings = findings or []
        self._post = post
        self.calls = 0

    def sample(self) -> Sample:
        self.calls += 1
        if self.calls == 1 and self._findings:
            self._post(self._findings)
        return self._sample


def crash_feed() -> ScriptedLogFeed:
    findings, root = crash_findings()
    lines = crash_lines()
    return ScriptedLogFeed([
        LogBatch(lines=lines[:20]),
        LogBatch(lines=lines[20:], findings=findings, root_cause=root, finished=True, note="job exited with code 1"),
    ])


async def settle(pilot, app, lines: int, tries: int = 200) -> None:
    """Wait until the app holds ``lines`` lines (the feed runs in a worker thread)."""
    for _ in range(tries):
        await pilot.pause(0.02)
        if len(app.store) >= lines:
            await pilot.pause()
            return
    raise AssertionError(f"only {len(app.store)} of {lines} lines arrived")


async def until(pilot, done, what: str, tries: int = 250) -> None:
    """Wait until ``done()`` holds (keys a burst delivered, handled in the app's own time): a
    fixed pause is too short on a loaded machine."""
    for _ in range(tries):
        if done():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"{what} did not happen within {tries * 0.02:.0f} s")
