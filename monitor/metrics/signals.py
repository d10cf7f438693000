"""Metric signals that become findings, in the same model as the log rules.

``SignalDetector.update(sample, history)`` is called after ``history.add(sample)`` and
returns the findings that this sample raised: a level must hold for a while before it fires
(``sustain_s``), and once fired it stays quiet until the level has been clear for
``clear_s``; when it fires again the same finding's ``count`` goes up and it is returned
again. Hardware events (Xid, ECC, remapped rows, a lost GPU) fire on their first occurrence;
repeats only raise ``count``. ``findings`` is the full list, ``version`` changes with it.

Metric findings carry no log position: ``file`` is "" and ``line`` 0. Numbers in titles and
remedies are the measured ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

from monitor.diagnosis.advice import advice
from monitor.logs.nodes import node_name
from monitor.model import Category, Finding, Role, Severity
from monitor.metrics.gpu import THROTTLE_REASONS
from monitor.metrics.history import History, gpu_series
from monitor.metrics.job import ALLOC_CONF_VARIABLES
from monitor.metrics.model import GpuEvent, GpuSample, JobSample, Sample

GIB = 1024**3
# sw_power_cap is what a busy GPU at its power limit normally shows; the others mean heat or
# a power-delivery problem is holding it back.
HARD_THROTTLE = tuple(r for r in THROTTLE_REASONS if r != "sw_power_cap")


@dataclass(frozen=True, slots=True)
class Thresholds:
    gpu_memory_fraction: float = 0.95
    gpu_memory_clear_fraction: float = 0.90
    host_memory_fraction: float = 0.95
    host_memory_clear_fraction: float = 0.90
    shm_fraction: float = 0.90
    shm_clear_fraction: float = 0.75
    sustain_s: float = 5.0
    clear_s: float = 30.0
    idle_percent: float = 1.0  # GPU utilization at or below this is idle
    idle_s: float = 120.0
    throttle_s: float = 10.0


# Xid number -> (severity, role, what it means, the advice to give). From NVIDIA's Xid catalogue;
# numbers not listed are reported as errors with a pointer to it.
# The advice (rules/advice.toml) for each: "gpu-hardware" or "gpu-app-fault".
_HW_ADVICE, _APP_ADVICE = "gpu-hardware", "gpu-app-fault"
XID: dict[int, tuple[Severity, Role, str, str]] = {
    # The application's own faults: the CUDA error its process prints (a device-side assert, an
    # illegal address) names the cause, these confirm it (seen on an H200: an embedding index out of
    # range gave Xid 43 within a second of the assert); alone, they still name it.
    13: ("error", "confirm", "graphics engine exception", _APP_ADVICE),
    31: ("error", "confirm", "GPU memory page fault", _APP_ADVICE),
    43: ("error", "confirm", "GPU stopped processing (the application hit a fault)", _APP_ADVICE),
    45: ("info", "cascade", "preemptive cleanup: the driver ended a process (usually after it was killed)",
         "gpu-process-ended"),
    48: ("error", "root", "double-bit ECC error", _HW_ADVICE),
    61: ("error", "root", "internal micro-controller breakpoint/warning", _HW_ADVICE),
    62: ("error", "root", "internal micro-controller halt", _HW_ADVICE),
    63: ("warning", "root", "ECC page retirement or row remapping recorded", _HW_ADVICE),
    64: ("error", "root", "ECC page retirement or row remapping failed", _HW_ADVICE),
    74: ("error", "root", "NVLink error", _HW_ADVICE),
    79: ("error", "root", "GPU has fallen off the bus", _HW_ADVICE),
    92: ("warning", "root", "high single-bit ECC error rate", _HW_ADVICE),
    94: ("error", "root", "contained ECC error (the affected process was ended)", _HW_ADVICE),
    95: ("error", "root", "uncontained ECC error", _HW_ADVICE),
    119: ("error", "root", "GSP RPC timeout", _HW_ADVICE),
    120: ("error", "root", "GSP error", _HW_ADVICE),
    140: ("error", "root", "unrecovered ECC error", _HW_ADVICE),
}


class _Latch:
    """A level that must hold ``sustain_s`` to fire and be clear ``clear_s`` to re-arm."""

    def __init__(self, sustain_s: float, clear_s: float) -> None:
        self.sustain_s, self.clear_s = sustain_s, clear_s
        self.active = False
        self._on_since: float | None = None
        self._off_since: float | None = None

    def update(self, now: float, on: bool, off: bool) -> bool:
        """Feed one observation; True exactly when the signal fires."""
        if self.active:
            if not off:
                self._off_since = None
            elif self._off_since is None:
                self._off_since = now
            if self._off_since is not None and now - self._off_since >= self.clear_s:
                self.active, self._off_since = False, None
            return False
        if not on:
            self._on_since = None
            return False
        if self._on_since is None:
            self._on_since = now
        if now - self._on_since >= self.sustain_s:
            self.active, self._on_since = True, None
            return True
        return False


class SignalDetector:
    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self._latches: dict[tuple, _Latch] = {}
        self._findings: dict[tuple, Finding] = {}
        self._changed: dict[tuple, Finding] = {}  # new values of findings raised before (take_changed)
        self._seq = 0
        self.version = 0

    @property
    def findings(self) -> list[Finding]:
        return sorted(self._findings.values(), key=lambda f: f.seq)

    def take_changed(self) -> list[Finding]:
        """The newest values of findings raised before that changed since the last call (an
        event counted again, a level raised once more): the session replaces the ones it holds
        (``Finding.source_key``)."""
        changed = list(self._changed.values())
        self._changed.clear()
        return changed

    def update(self, sample: Sample, history: History) -> list[Finding]:
        raised: list[Finding] = []
        raised += self._gpu_memory(sample, history)
        raised += self._host_memory(sample)
        raised += self._shm(sample)
        raised += self._idle(sample, history)
        raised += self._throttle(sample, history)
        raised += self._events(sample)
        return raised

    # -- plumbing ----------------------------------------------------------------------------

    def _latch(self, key: tuple, sustain_s: float, clear_s: float | None = None) -> _Latch:
        latch = self._latches.get(key)
        if latch is None:
            latch = self._latches[key] = _Latch(sustain_s, self.thresholds.clear_s if clear_s is None else clear_s)
        return latch

    def _raise(self, key: tuple, now: float, build: Callable[[], Finding], count: int = 1,
               refresh: bool = True) -> Finding:
        """The finding for ``key``: new, or the existing one with its count raised.

        With ``refresh`` a re-raised finding takes the numbers of this sample (title, evidence,
        remedy, fields, ranks); repeated events keep the first occurrence's text.
        """
        self.version += 1
        finding = self._findings.get(key)
        if finding is not None:
            # A new value under the same source key: the session replaces the one it holds.
            changes: dict = {"count": finding.count + count}
            if refresh:
                latest = build()
                changes.update(title=latest.title, evidence=latest.evidence, remedy=latest.remedy,
                               fields=latest.fields, rank=latest.rank, ranks=latest.ranks)
            finding = self._findings[key] = self._changed[key] = replace(finding, **changes)
            return finding
        finding = replace(build(), seq=self._seq, first_seen=now, count=count, source_key=f"signal:{key!r}")
        self._seq += 1
        self._findings[key] = finding
        return finding

    # -- levels ------------------------------------------------------------------------------

    def _gpu_memory(self, sample: Sample, history: History) -> list[Finding]:
        t, raised = self.thresholds, []
        for gpu in _job_gpus(sample, require_cuda_index=True):
            fraction = gpu.memory_used_fraction
            if fraction is None:
                continue
            latch = self._latch(("gpu_memory", gpu.label), t.sustain_s)
            if latch.update(sample.time, fraction >= t.gpu_memory_fraction, fraction < t.gpu_memory_clear_fraction):
                raised.append(self._raise(
                    ("gpu_memory", gpu.label), sample.time, partial(_gpu_memory_finding, gpu, sample, history)
                ))
        return raised

    def _host_memory(self, sample: Sample) -> list[Finding]:
        t, host = self.thresholds, sample.host
        fraction = host.memory_used_fraction
        latch = self._latch(("host_memory",), t.sustain_s)
        if not latch.update(sample.time, fraction >= t.host_memory_fraction, fraction < t.host_memory_clear_fraction):
            return []
        used = host.memory_total_bytes - host.memory_available_bytes
        evidence = [f"host memory: {_gib(used)} of {_gib(host.memory_total_bytes)} in use ({fraction:.0%})"]
        if host.swap_total_bytes:
            evidence.append(f"swap: {_gib(host.swap_used_bytes)} of {_gib(host.swap_total_bytes)} in use")
        biggest = _largest_process(sample.job)
        if biggest:
            evidence.append(biggest)
        remedy = advice("host-memory", free=_gib(host.memory_available_bytes), total=_gib(host.memory_total_bytes))

        def build() -> Finding:
            return _finding(
                "metrics-host-memory-near-full", "host_oom", "warning", "root",
                advice("title-host-memory", **_of(used, host.memory_total_bytes), percent=f"{fraction:.0%}"),
                sample.job, [], evidence, remedy,
                {"used_bytes": str(used), "total_bytes": str(host.memory_total_bytes)},
            )

        return [self._raise(("host_memory",), sample.time, build)]

    def _shm(self, sample: Sample) -> list[Finding]:
        t, host = self.thresholds, sample.host
        fraction = host.shm_used_fraction
        if fraction is None:
            return []
        latch = self._latch(("shm",), t.sustain_s)
        if not latch.update(sample.time, fraction >= t.shm_fraction, fraction < t.shm_clear_fraction):
            return []
        used, total = host.shm_used_bytes, host.shm_total_bytes
        assert used is not None and total is not None  # the fraction was computed from them
        remedy = advice("shm-near-full", free=_gib(total - used), total=_gib(total), shm=advice("shm"))

        def build() -> Finding:
            return _finding(
                "metrics-shm-near-full", "shm_exhausted", "warning", "root",
                advice("title-shm-near-full", **_of(used, total), percent=f"{fraction:.0%}"),
                sample.job, [], [f"/dev/shm: {_gib(used)} of {_gib(total)} used ({fraction:.0%})"], remedy,
                {"used_bytes": str(used), "total_bytes": str(total)},
            )

        return [self._raise(("shm",), sample.time, build)]

    def _idle(self, sample: Sample, history: History) -> list[Finding]:
        t, job = self.thresholds, sample.job
        if job is None:
            return []
        gpus = [g for g in _job_gpus(sample, require_cuda_index=False) if g.mig_index is None]
        if not gpus or job.pid_mapping == "none":
            return []
        utils = [u for g in gpus if (u := g.utilization_gpu_percent) is not None]
        if len(utils) < len(gpus):
            return []
        # The history scan is the costly part: only when every GPU is idle right now.
        idle = job.alive and all(u <= t.idle_percent for u in utils) and history.span_s() >= t.idle_s and all(
            _was_busy_then_idle(history, g, t.idle_percent, t.idle_s) for g in gpus
        )
        latch = self._latch(("idle",), 0.0, 0.0)
        if not latch.update(sample.time, idle, any(u > t.idle_percent for u in utils) or not job.alive):
            return []
        ranks = sorted({p.rank for p in job.processes if p.rank is not None})
        pids = [p.pid for p in job.processes if p.rank is not None and p.gpu_indices] or job.root_pids
        seconds = f"{t.idle_s:.0f} s"
        evidence = [
            f"{g.label}: utilization <= {t.idle_percent:.0f}% for {seconds}, {_gib(g.memory_used_bytes)} held"
            for g in gpus
        ]
        remedy = advice("gpus-idle", seconds=seconds, pids=", ".join(map(str, pids[:8])) or "?")

        def build() -> Finding:
            return _finding(
                "metrics-gpus-idle", "hang", "warning", "cascade",
                advice("title-gpus-idle", count=str(len(gpus)), seconds=seconds),
                job, ranks, evidence, remedy, {"idle_s": f"{t.idle_s:.0f}"},
            )

        return [self._raise(("idle",), sample.time, build)]

    def _throttle(self, sample: Sample, history: History) -> list[Finding]:
        t, raised = self.thresholds, []
        for gpu in sample.gpus:
            if gpu.clock_event_reasons is None or gpu.mig_index is not None:
                continue
            reasons = [r for r in gpu.clock_event_reasons if r in HARD_THROTTLE]
            latch = self._latch(("throttle", gpu.label), t.throttle_s)
            if latch.update(sample.time, bool(reasons), not reasons):
                raised.append(self._raise(
                    ("throttle", gpu.label), sample.time,
                    partial(_throttle_finding, gpu, reasons, sample, history),
                ))
        return raised

    # -- events ------------------------------------------------------------------------------

    def _events(self, sample: Sample) -> list[Finding]:
        raised = []
        for event in sample.events:
            if event.kind == "throttle":
                continue  # judged as a level by _throttle
            key = (event.kind, event.gpu_index, event.code)
            first = key not in self._findings
            finding = self._raise(
                key, sample.time, partial(_event_finding, event, sample), count=event.count, refresh=False
            )
            if first:
                raised.append(finding)
        return raised


# -- finding builders ------------------------------------------------------------------------


def _finding(rule: str, category: str, severity: Severity, role: Role, title: str, job: JobSample | None,
             ranks: list[int], evidence: list[str], remedy: str, fields: dict[str, str]) -> Finding:
    return Finding(
        rule=rule, category=Category(category), severity=severity, role=role, title=title,
        rank=ranks[0] if ranks else None, ranks=ranks, evidence=evidence, fields=fields, remedy=remedy,
        origin="metrics",
    )


def _gpu_memory_finding(gpu: GpuSample, sample: Sample, history: History) -> Finding:
    ranks = _ranks_on(gpu, sample.job)
    fraction = gpu.memory_used_fraction or 0.0
    used, total = gpu.memory_used_bytes or 0, gpu.memory_total_bytes or 0
    who = f"rank {ranks[0]}" if len(ranks) == 1 else gpu.label
    evidence = [f"{gpu.label}: {_gib(used)} of {_gib(total)} in use ({fraction:.0%})"]
    trend = history.window(gpu_series(gpu, "memory_used_bytes"), 60.0)
    grew = trend[-1] - trend[0] if len(trend) >= 2 else 0.0
    if grew > 0:
        evidence.append(f"{gpu.label}: grew by {_gib(grew)} in the last {min(60.0, history.span_s()):.0f} s")
    # Fragmentation advice only to a job that does not already set expandable_segments.
    expandable = any(_job_sets(sample.job, name, "expandable_segments:true") for name in ALLOC_CONF_VARIABLES)
    remedy = advice("gpu-memory", free=_gib(total - used), total=_gib(total), gpu=gpu.label,
                    fragmentation="" if expandable else advice("gpu-memory-fragmentation"))
    return _finding(
        "metrics-gpu-memory-near-full", "cuda_oom", "warning", "root",
        advice("title-gpu-memory", who=who, gpu=gpu.label, **_of(used, total), percent=f"{fraction:.0%}"),
        sample.job, ranks, evidence, remedy,
        {"gpu": str(gpu.index), "used_bytes": str(used), "total_bytes": str(total)},
    )


def _throttle_finding(gpu: GpuSample, reasons: list[str], sample: Sample, history: History) -> Finding:
    ranks = _ranks_on(gpu, sample.job)
    facts = []
    if gpu.temperature_c is not None:
        facts.append(f"{gpu.temperature_c:.0f} °C")
    if gpu.sm_clock_mhz is not None:
        facts.append(f"SM clock {gpu.sm_clock_mhz} MHz")
    usual = history.stats(gpu_series(gpu, "sm_clock_mhz"), 300.0)
    evidence = [f"{gpu.label}: clock-event reasons {', '.join(reasons)}" + (f" ({', '.join(facts)})" if facts else "")]
    if usual is not None and gpu.sm_clock_mhz is not None:
        evidence.append(f"{gpu.label}: SM clock {gpu.sm_clock_mhz} MHz now, {usual.max:.0f} MHz at best in the last 5 min")
    if gpu.power_w is not None and gpu.power_limit_w is not None:
        evidence.append(f"{gpu.label}: power {gpu.power_w:.0f} W of a {gpu.power_limit_w:.0f} W limit")
    causes = []
    if any("thermal" in r for r in reasons):
        fan = advice("throttle-fan", percent=f"{gpu.fan_percent:.0f}%") if gpu.fan_percent is not None else ""
        causes.append(advice("throttle-hot", fan=fan))
    if "hw_power_brake_slowdown" in reasons:
        causes.append(advice("throttle-power-brake"))
    if "hw_slowdown" in reasons and not causes:
        causes.append(advice("throttle-hw-slowdown"))
    remedy = advice("throttle-one-slows-all", cause=" ".join(causes), index=str(gpu.index))
    title = (advice("title-gpu-throttled-at", gpu=gpu.label, reasons=", ".join(reasons), facts=", ".join(facts))
             if facts else advice("title-gpu-throttled", gpu=gpu.label, reasons=", ".join(reasons)))
    return _finding(
        "metrics-gpu-throttled", "gpu_throttle", "warning", "root", title,
        sample.job, ranks, evidence, remedy, {"gpu": str(gpu.index), "reasons": ",".join(reasons)},
    )


def _event_finding(event: GpuEvent, sample: Sample) -> Finding:
    gpu = next((g for g in sample.gpus if g.index == event.gpu_index and g.mig_index is None), None)
    label = gpu.label if gpu else f"GPU {event.gpu_index}" if event.gpu_index >= 0 else "a GPU"
    ranks = _ranks_on(gpu, sample.job) if gpu else []
    place = {"index": str(event.gpu_index), "node": node_name()}  # the GPUs sampled are this machine's
    hw_remedy = advice(_HW_ADVICE, **place)
    fields = {"gpu": str(event.gpu_index), "count": str(event.count)}
    severity: Severity = "error"
    role: Role = "root"
    if event.kind == "xid":
        known = XID.get(event.code) if event.code is not None else None
        severity, role, meaning, remedy = known or ("error", "root", "see NVIDIA's Xid catalogue", _HW_ADVICE)
        title = advice("title-xid", code=str(event.code), gpu=label, meaning=meaning)
        remedy = advice(remedy, **place)
        fields["xid"] = str(event.code)
    elif event.kind == "lost":
        title, remedy = advice("title-gpu-lost", gpu=label), hw_remedy
    elif event.kind == "ecc_uncorrected":
        title, remedy = advice("title-ecc-uncorrected", count=str(event.count), gpu=label), hw_remedy
    elif event.kind == "ecc_corrected":
        severity = "info"
        title = advice("title-ecc-corrected", count=str(event.count), gpu=label)
        remedy = advice("ecc-corrected", hardware=hw_remedy)
    else:  # remapped_rows, retired_pages
        severity = "warning"
        title = advice("title-gpu-memory-rows", gpu=label, count=str(event.count), detail=event.detail)
        pending = gpu is not None and gpu.remapped_rows_pending
        remedy = advice("remap-pending", hardware=hw_remedy) if pending else hw_remedy
    evidence = [f"{label}: {event.kind}" + (f" {event.code}" if event.code is not None else "")
                + (f", {event.detail}" if event.detail else "") + (f" (x{event.count})" if event.count > 1 else "")]
    return _finding(
        f"metrics-gpu-{event.kind.replace('_', '-')}", "gpu_hardware", severity, role, title,
        sample.job, ranks, evidence, remedy, fields,
    )


# -- helpers ---------------------------------------------------------------------------------


def _job_gpus(sample: Sample, require_cuda_index: bool) -> list[GpuSample]:
    """The GPUs the job uses: by its processes where NVML PIDs map, else those visible to it."""
    gpus = [g for g in sample.gpus if g.status == "ok"]
    job = sample.job
    if job is not None and job.pid_mapping == "mapped":
        used = set(job.gpu_indices)
        return [g for g in gpus if g.index in used and (g.mig_index is None or g.processes)]
    if job is not None and job.pid_mapping == "unmapped":
        return [g for g in gpus if g.cuda_index is not None and g.processes]
    return [g for g in gpus if g.cuda_index is not None] if require_cuda_index else []


def _job_sets(job: JobSample | None, name: str, setting: str) -> bool:
    """True when a process of the job already has ``setting`` in variable ``name``."""
    if job is None:
        return False
    return any(setting in p.env.get(name, "").replace(" ", "").lower() for p in job.processes)


def _ranks_on(gpu: GpuSample | None, job: JobSample | None) -> list[int]:
    if gpu is None or job is None:
        return []
    pids = {p.pid for p in gpu.processes}
    return sorted({p.rank for p in job.processes if p.rank is not None and p.pid in pids})


def _was_busy_then_idle(history: History, gpu: GpuSample, idle_percent: float, seconds: float) -> bool:
    name = gpu_series(gpu, "utilization_gpu_percent")
    recent = history.stats(name, seconds)
    if recent is None or recent.max > idle_percent:
        return False  # busy lately: no need to scan the whole history
    ever = history.stats(name)
    return ever is not None and idle_percent < ever.max


def _largest_process(job: JobSample | None) -> str:
    if job is None:
        return ""
    sized = [p for p in job.processes if p.rss_bytes]
    if not sized:
        return ""
    top = max(sized, key=lambda p: p.rss_bytes or 0)  # each one in sized has an RSS
    who = f"rank {top.rank} " if top.rank is not None else ""
    return f"largest job process: {who}pid {top.pid} ({top.name}) with {_gib(top.rss_bytes)} resident"


def _of(part: float, whole: float) -> dict[str, str]:
    """The fields ``used`` and ``total`` of a title's "{used} of {total} GiB"."""
    return {"used": f"{part / GIB:.1f}", "total": f"{whole / GIB:.1f}"}


def _gib(size: float | None) -> str:
    return "?" if size is None else f"{size / GIB:.1f} GiB"
