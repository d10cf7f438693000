"""The job's metrics in Prometheus' format (``monitor run --metrics-port``/``--textfile``,
``monitor metrics --serve``), built with ``prometheus_client`` at scrape time from the latest
sample and the session's latest ``JobStatus``: no state of our own goes stale.

GPU metrics carry dcgm-exporter's classic names, units and labels (``gpu``, ``UUID``, ``device``,
``modelName``, ``Hostname``; ``GPU_I_ID`` for a MIG device), so dashboards made for it work
unchanged. What only the monitor knows is under ``monitor_*`` with the job's id, the node and the
rank. The job's id is the label ``job_id``: Prometheus sets ``job`` itself (the scrape job).
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable

from prometheus_client import start_http_server, write_to_textfile
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from monitor.metrics.model import GpuSample, Sample
from monitor.session.status import JobStatus
from monitor.straggler.model import Scores
from monitor.text import say

MIB = 1024 * 1024
# dcgm-exporter's default fields (etc/default-counters.csv) this sampler measures: name, help,
# and the value from one GPU sample (in DCGM's unit), None when the driver does not say.
DCGM_FIELDS: list[tuple[str, str, Callable[[GpuSample], float | None]]] = [
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.utilization_gpu_percent),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", lambda g: g.utilization_memory_percent),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
     lambda g: None if g.memory_used_bytes is None else g.memory_used_bytes / MIB),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
     lambda g: None if g.memory_used_bytes is None or g.memory_total_bytes is None
     else (g.memory_total_bytes - g.memory_used_bytes) / MIB),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_w),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.memory_clock_mhz),
    ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "PCIe transmit throughput (in KB/s).",
     lambda g: None if g.pcie_tx_bytes_per_s is None else g.pcie_tx_bytes_per_s / 1024),
    ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "PCIe receive throughput (in KB/s).",
     lambda g: None if g.pcie_rx_bytes_per_s is None else g.pcie_rx_bytes_per_s / 1024),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", lambda g: g.ecc_volatile_corrected),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", lambda g: g.ecc_volatile_uncorrected),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors.",
     lambda g: g.remapped_rows_correctable),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors.",
     lambda g: g.remapped_rows_uncorrectable),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.",
     lambda g: None if g.remapped_rows_failed is None else float(g.remapped_rows_failed)),
]
DCGM_LABELS = ["gpu", "UUID", "device", "modelName", "Hostname", "GPU_I_ID"]
JOB_LABELS = ["job_id", "node", "Hostname"]
MAX_LABEL = 200  # a root cause's title as a label value: bounded


class ServeError(Exception):
    """The endpoint could not be opened (the port is taken, or not ours to open): one line."""


class JobExporter(Collector):
    """``observe(sample)`` after each sample (the metrics thread); ``collect()`` at each scrape
    (the server's thread). ``status``: the session's latest ``JobStatus`` (None: metrics only,
    ``monitor metrics --serve``). ``warn``: where a failure to write the textfile is said, in one
    line, once until it changes."""

    def __init__(self, *, job_id: str = "", node: str = "", status: Callable[[], JobStatus | None] | None = None,
                 hostname: str | None = None, wall_clock: Callable[[], float] = time.time,
                 warn: Callable[[str], None] = say) -> None:
        self.job_id = job_id
        self.node = node
        self.hostname = hostname or socket.gethostname()
        self.status = status  # the session's (a new one each attempt of ``monitor run``)
        # The straggler watch's latest scores (``StragglerWatch.latest``), where the job's ranks are sampled.
        self.scores: Callable[[], Scores] | None = None
        self._wall_clock = wall_clock
        self._warn = warn
        self._sample: Sample | None = None
        self._last_xid: dict[int, int] = {}  # NVML index -> the last Xid seen (DCGM_FI_DEV_XID_ERRORS)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._textfile: str | None = None
        self.error: str | None = None  # the last write error of the textfile (said when it was new)

    # -- feeding -------------------------------------------------------------------------------
    def observe(self, sample: Sample) -> None:
        for event in sample.events:
            if event.kind == "xid" and event.code is not None:
                self._last_xid[event.gpu_index] = event.code
        self._sample = sample
        if self._textfile is not None:
            self.write_textfile()

    def serve(self, port: int, addr: str) -> str:
        """Serve ``/metrics`` on ``addr`` and ``port`` from a daemon thread; returns its URL.
        ``addr`` has no default here: the commands' is loopback, since the metrics name the job,
        its host and what its log says. Raises ServeError (a taken port, an address not ours)."""
        try:
            start_http_server(port, addr=addr, registry=self.registry)
        except OSError as exc:
            raise ServeError(f"cannot serve metrics on {addr} port {port}: {exc.strerror or exc}") from None
        host = f"[{addr}]" if ":" in addr else addr  # an IPv6 address
        return f"http://{host}:{port}/metrics"

    def keep_textfile(self, path: str) -> None:
        """Rewrite ``path`` (node_exporter's textfile collector reads ``*.prom``) after each sample."""
        self._textfile = path
        self.write_textfile()

    def write_textfile(self) -> None:
        """Write the textfile now. A failure is one line in ``error``, said when it is new: the
        callers (a sample's observers) have no one to tell, and a file rewritten every second
        that cannot be written would otherwise say so every second."""
        assert self._textfile is not None  # called once keep_textfile named it
        try:
            write_to_textfile(self._textfile, self.registry)
        except OSError as exc:
            error = f"cannot write metrics to {self._textfile}: {exc.strerror or exc}"
            if error != self.error:
                self._warn(error)
            self.error = error
            return
        self.error = None

    # -- scraping ------------------------------------------------------------------------------
    def collect(self):
        sample = self._sample
        if sample is not None:
            yield from self._gpus(sample)
        status = self.status() if self.status is not None else None
        if status is not None:
            yield from self._job(status, sample)
        scores = self.scores() if self.scores is not None else None
        if scores is not None:
            yield self._waits(scores)

    def _waits(self, scores: Scores) -> GaugeMetricFamily:
        waits = GaugeMetricFamily("monitor_rank_wait_fraction",
                                  "Share of the recent looks at each rank's stack that saw it waiting inside a "
                                  "collective (a rank the others wait for has the lowest).", labels=[*JOB_LABELS, "rank"])
        for rank, fraction in sorted(scores.wait_fractions().items()):
            waits.add_metric([self.job_id, self.node, self.hostname, str(rank)], fraction)
        return waits

    def _gpu_labels(self, gpu: GpuSample) -> list[str]:
        return [str(gpu.index), gpu.uuid or "", f"nvidia{gpu.index}", gpu.name or "", self.hostname,
                "" if gpu.mig_index is None else str(gpu.mig_index)]

    def _gpus(self, sample: Sample):
        status = GaugeMetricFamily("monitor_gpu_status", "1 for why there are (ok) or are no GPU metrics "
                                   "(no_library, no_driver, version_mismatch, error).",
                                   labels=["Hostname", "status"])
        status.add_metric([self.hostname, sample.gpu_status], 1.0)
        yield status
        gpus = [g for g in sample.gpus if g.status == "ok"]
        for name, help_text, value in DCGM_FIELDS:
            family = GaugeMetricFamily(name, help_text, labels=DCGM_LABELS)
            for gpu in gpus:
                number = value(gpu)
                if number is not None:
                    family.add_metric(self._gpu_labels(gpu), float(number))
            yield family
        xid = GaugeMetricFamily("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=DCGM_LABELS)
        for gpu in sample.gpus:
            xid.add_metric(self._gpu_labels(gpu), float(self._last_xid.get(gpu.index, 0)))
        yield xid
        lost = GaugeMetricFamily("monitor_gpu_lost", "1 when the GPU has fallen off the bus or cannot be read.",
                                 labels=DCGM_LABELS)
        for gpu in sample.gpus:
            lost.add_metric(self._gpu_labels(gpu), 0.0 if gpu.status == "ok" else 1.0)
        yield lost
        ranks = GaugeMetricFamily("monitor_gpu_rank", "The job's rank on each GPU (1 per rank and GPU).",
                                  labels=[*JOB_LABELS, "gpu", "UUID", "rank", "local_rank"])
        by_index = {g.index: g for g in sample.gpus}
        for process in sample.job.processes if sample.job else []:
            if process.worker or process.rank is None:
                continue
            for index in process.gpu_indices:
                device = by_index.get(index)
                ranks.add_metric([self.job_id, self.node, self.hostname, str(index), (device.uuid or "") if device else "",
                                  str(process.rank), "" if process.local_rank is None else str(process.local_rank)], 1.0)
        yield ranks

    def _job(self, status: JobStatus, sample: Sample | None):
        where = [self.job_id, self.node, self.hostname]
        findings = GaugeMetricFamily("monitor_findings", "Findings of the job's session, by category and severity.",
                                     labels=[*JOB_LABELS, "category", "severity"])
        for (category, severity), count in sorted(status.findings.items()):
            findings.add_metric([*where, category, severity], float(count))
        yield findings
        root = GaugeMetricFamily("monitor_root_cause", "1 while the session names a root cause (its labels say which).",
                                 labels=[*JOB_LABELS, "category", "severity", "rule", "rank", "title"])
        if (cause := status.root_cause) is not None:
            root.add_metric([*where, str(cause.category), cause.severity, cause.rule,
                             "" if cause.rank is None else str(cause.rank), cause.title[:MAX_LABEL]], 1.0)
        yield root
        now = self._wall_clock()
        silent = GaugeMetricFamily("monitor_rank_seconds_since_last_line",
                                   "Seconds since each rank last printed a line.", labels=[*JOB_LABELS, "rank"])
        for rank, at in sorted(status.rank_last_line.items()):
            silent.add_metric([*where, str(rank)], max(0.0, now - at))
        yield silent
        yield _one("monitor_possible_hang", "1 while no rank has printed for longer than usual.", where,
                   float(status.possible_hang))
        yield _one("monitor_job_running", "1 while the job runs.", where, float(status.running))
        if status.exit_code is not None:
            yield _one("monitor_job_exit_code", "The job's exit code (128+N for signal N).", where, float(status.exit_code))
        progress = status.progress
        if progress.step is not None:
            yield _one("monitor_training_step", "The last training step the job printed.", where, float(progress.step))
        if progress.loss is not None:
            yield _one("monitor_training_loss", "The last loss the job printed (NaN when it was not finite).", where,
                       progress.loss if math.isfinite(progress.loss) else math.nan)
        if status.steps_per_s is not None:
            yield _one("monitor_training_steps_per_second", "Training steps per second over the recent steps.",
                       where, status.steps_per_s)


def _one(name: str, help_text: str, labels: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, help_text, labels=JOB_LABELS)
    family.add_metric(labels, value)
    return family
