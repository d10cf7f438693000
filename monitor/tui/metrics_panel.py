"""GPUs, host and the job's processes: one compact row each, with recent history as sparklines."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.widget import Widget

from monitor.metrics.model import GpuSample, HostSample, JobSample, Sample
from monitor.straggler.model import Scores
from monitor.tui import text_format as fmt

HISTORY = 120
# More GPUs than this, on several nodes: one row per node.
MAX_GPU_ROWS = 8


class MetricsPanel(Widget):
    """Draws the latest Sample; keeps a short history per GPU for the sparklines."""

    DEFAULT_CSS = """
    /* One screen row per line: a long reason or host row is cut, not wrapped into the log's space. */
    MetricsPanel { height: auto; max-height: 14; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sample: Sample | None = None
        self.scores: Scores | None = None  # the straggler scores: each rank's share of looks waiting
        self._gpu_util: dict[str, deque[float]] = {}
        self._cpu: deque[float] = deque(maxlen=HISTORY)
        self._rows = 0
        # How the job ended, in words (from the log feed); replaces the process count once set.
        self.job_ended: str | None = None

    def show_ended(self, note: str) -> None:
        self.job_ended = note
        self.refresh(layout=True)

    def show(self, sample: Sample, scores: Scores | None = None) -> None:
        self.sample = sample
        self.scores = scores
        for gpu in sample.gpus:
            history = self._gpu_util.setdefault(gpu.label, deque(maxlen=HISTORY))
            history.append(gpu.utilization_gpu_percent if gpu.utilization_gpu_percent is not None else 0.0)
        self._cpu.append(sample.host.cpu_percent)
        rows = self.get_content_height(None, None, self.size.width)
        self.refresh(layout=rows != self._rows)
        self._rows = rows

    def render(self) -> Text:
        width = max(self.size.width, 40)
        sample = self.sample
        if sample is None:
            return Text("metrics: waiting for the first sample…", style="dim")
        lines: list[Text] = []
        if len(sample.gpus) > MAX_GPU_ROWS and any(gpu.node for gpu in sample.gpus):
            lines.extend(self._node_row(node, gpus, width) for node, gpus in _by_node(sample.gpus).items())
        elif sample.gpus:
            for gpu in sample.gpus:
                lines.append(self._gpu_row(gpu, width))
        else:
            reason = sample.gpu_message or "no GPU found"
            lines.append(Text.assemble(("GPU ", "bold"), (f"none: {reason}", "dim")))
        lines.append(self._host_row(sample.host, width))
        if sample.job is not None:
            lines.extend(self._job_rows(sample.job, width))
        return Text("\n").join(lines)

    def get_content_height(self, container, viewport, width: int) -> int:
        sample = self.sample
        if sample is None:
            return 1
        gpus = sample.gpus
        grouped = len(gpus) > MAX_GPU_ROWS and any(gpu.node for gpu in gpus)
        rows = (len(_by_node(gpus)) if grouped else max(len(gpus), 1)) + 1
        if sample.job is not None:
            rows += len(self._job_rows(sample.job, width))
        return rows

    def _gpu_row(self, gpu: GpuSample, width: int) -> Text:
        row = Text(f"{gpu.label:<6} ", style="bold")
        if gpu.status != "ok":
            row.append(f"{gpu.status}: {gpu.message}", style="bold red")
            return row
        util = gpu.utilization_gpu_percent
        row.append(f"{util:3.0f}% " if util is not None else "  ?% ")
        spark_width = 12 if width >= 90 else 6
        row.append(fmt.sparkline(self._gpu_util.get(gpu.label, ()), spark_width, 0, 100).ljust(spark_width), style="cyan")
        bar_width = max(6, min(24, width - 70))
        filled, empty = fmt.bar(gpu.memory_used_fraction, bar_width)
        fraction = gpu.memory_used_fraction
        colour = "red" if fraction is not None and fraction > 0.95 else "green"
        row.append(" mem ")
        row.append(filled, style=colour)
        row.append(empty, style="dim")
        row.append(f" {fmt.used_of(gpu.memory_used_bytes, gpu.memory_total_bytes)}")
        if gpu.temperature_c is not None:
            row.append(f" {gpu.temperature_c:.0f}°C", style="red" if gpu.temperature_c >= 85 else "")
        if gpu.power_w is not None:
            limit = f"/{gpu.power_limit_w:.0f}" if gpu.power_limit_w else ""
            row.append(f" {gpu.power_w:.0f}{limit}W")
        if gpu.clock_event_reasons and any("thermal" in r or "brake" in r or "slowdown" in r for r in gpu.clock_event_reasons):
            row.append(" throttled", style="bold yellow")
        if width >= 120 and gpu.name:
            row.append(f"  {gpu.name}", style="dim")
        return row

    def _node_row(self, node: str, gpus: list[GpuSample], width: int) -> Text:
        """One row for a node's GPUs: how many, utilization (mean, lowest), the fullest GPU's
        memory, the hottest, the power drawn, and the GPUs not read."""
        row = Text(f"{node:<8} ", style="bold")
        read = [g for g in gpus if g.status == "ok"]
        if not read:
            return row.append(f"{gpus[0].status}: {gpus[0].message}", style="bold red")
        utils = [g.utilization_gpu_percent for g in read if g.utilization_gpu_percent is not None]
        row.append(f"{len(read)} GPU{'s' if len(read) != 1 else ''} ")
        if utils:
            low = min(utils)
            row.append(f"util {sum(utils) / len(utils):3.0f}% ")
            row.append(f"(min {low:.0f}%) ", style="bold yellow" if low < 5 else "dim")
        fullest = max(read, key=lambda g: g.memory_used_fraction or 0.0)
        fraction = fullest.memory_used_fraction
        row.append(f"mem max {fmt.used_of(fullest.memory_used_bytes, fullest.memory_total_bytes)}",
                   style="bold red" if fraction is not None and fraction > 0.95 else "")
        temps = [g.temperature_c for g in read if g.temperature_c is not None]
        if temps:
            row.append(f" {max(temps):.0f}°C", style="red" if max(temps) >= 85 else "")
        power = [g.power_w for g in read if g.power_w is not None]
        if power and width >= 90:
            row.append(f" {sum(power):.0f}W")
        if len(read) < len(gpus):
            row.append(f" {len(gpus) - len(read)} not read", style="bold red")
        return row

    def _host_row(self, host: HostSample, width: int) -> Text:
        row = Text("host   ", style="bold")
        row.append(f"cpu {host.cpu_percent:3.0f}% ")
        if width >= 90:
            row.append(fmt.sparkline(self._cpu, 12, 0, 100).ljust(12) + " ", style="cyan")
        ram_fraction = host.memory_used_fraction
        row.append("ram ")
        row.append(
            fmt.used_of(host.memory_total_bytes - host.memory_available_bytes, host.memory_total_bytes),
            style="bold red" if ram_fraction > 0.95 else "",
        )
        if host.swap_total_bytes and (host.swap_used_bytes or width >= 100):
            row.append(f" swap {fmt.size(host.swap_used_bytes)}")
        if host.shm_total_bytes:
            shm = host.shm_used_fraction or 0.0
            row.append(f" shm {fmt.used_of(host.shm_used_bytes, host.shm_total_bytes)}", style="bold red" if shm > 0.9 else "")
        for usage in host.dirs[: 2 if width >= 120 else 1]:
            if usage.total_bytes and usage.free_bytes is not None:
                free = usage.free_bytes / usage.total_bytes
                row.append(f" disk {fmt.size(usage.free_bytes)} free", style="bold red" if free < 0.05 else "")
        # At 80 columns the row keeps what runs out (memory, shm, disk); the network rates need room.
        if host.net_recv_bytes_per_s is not None and host.net_sent_bytes_per_s is not None and width >= 100:
            row.append(f" net ↓{fmt.size(host.net_recv_bytes_per_s)}/s ↑{fmt.size(host.net_sent_bytes_per_s)}/s")
        return row

    def _job_rows(self, job: JobSample, width: int) -> list[Text]:
        ranked = [p for p in job.processes if p.rank is not None]
        if not ranked:
            if self.job_ended:
                return [Text.assemble(("job    ", "bold"), (self.job_ended, "dim"))]
            state = "running" if job.alive else "ended"
            count = len(job.processes)
            return [Text(f"job    {count} process{'es' if count != 1 else ''}, {state}", style="dim")]
        wide = width >= 110
        per_row = max(1, width // (42 if wide else 22))
        rows, row = [], Text("ranks  ", style="bold")
        waits = self.scores.wait_fractions() if self.scores is not None else {}
        slow = self.scores.slow.rank if self.scores is not None and self.scores.slow is not None else None
        for count, proc in enumerate(sorted(ranked, key=lambda p: p.rank), start=1):
            cpu = f"{proc.cpu_percent:.0f}%" if proc.cpu_percent is not None else "?"
            gpu = f" g{fmt.size(proc.gpu_memory_bytes)}" if proc.gpu_memory_bytes else ""
            row.append(f"r{proc.rank}", style="bold")
            pid = f" pid {proc.pid}" if wide else ""
            row.append(f"{pid} {cpu} {fmt.size(proc.rss_bytes)}{gpu}")
            if proc.rank in waits:  # the share of looks in which it waited in a collective
                row.append(f" w{100 * waits[proc.rank]:.0f}%" + (" slow" if proc.rank == slow else ""),
                           style="bold red" if proc.rank == slow else "dim")
            row.append("  ")
            if count % per_row == 0:
                rows.append(row)
                row = Text("       ")
        if row.plain.strip():
            rows.append(row)
        return rows[:4]


def _by_node(gpus: list[GpuSample]) -> dict[str, list[GpuSample]]:
    nodes: dict[str, list[GpuSample]] = {}
    for gpu in gpus:
        nodes.setdefault(gpu.node or "", []).append(gpu)
    return nodes
