"""The Prometheus endpoint: the exporter in-process with the fake NVML, and a real Prometheus
server (Debian's `prometheus`) scraping a real `monitor run --metrics-port`; the shipped alert
rules pass `promtool check rules`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from metrics_fake_nvml import FakeNvml, FakeProcess, make_gpus
from monitor.metrics.sampler import Sampler
from monitor.model import Finding
from monitor.session.prometheus import JobExporter
from monitor.session.status import JobStatus
from tests.runner_helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
JOBS = Path(__file__).parent / "jobs"
GIB = 1024**3


def scrape(exporter: JobExporter) -> dict[str, list]:
    text = generate_latest(exporter.registry).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_gpus_under_dcgm_names_and_the_job_under_monitor_names():
    fake = FakeNvml(make_gpus(2, memory_used=30 * GIB, memory_total=80 * GIB))
    # A rank of a job: its RANK and LOCAL_RANK are read from /proc/PID/environ.
    rank5 = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, "RANK": "5", "LOCAL_RANK": "1"})
    fake.gpus[1].processes = [FakeProcess(rank5.pid, 2 * GIB)]
    sampler = Sampler(job_pids=[rank5.pid], nvml=fake, cuda_visible_devices=None)
    try:
        sampler.sample()
        fake.emit_xid(1, 79)
        sample = sampler.sample()
    finally:
        rank5.kill()
        rank5.wait()
        sampler.close()
    root = Finding("cuda-oom", "cuda_oom", "error", "root", "CUDA out of memory on rank 5", rank=5)
    status = JobStatus(time=time.time(), findings={("cuda_oom", "error"): 1, ("nccl_timeout", "error"): 3},
                       root_cause=root, rank_last_line={5: time.time() - 30})
    exporter = JobExporter(job_id="4242", node="gpu-07", hostname="gpu-07.cluster", status=lambda: status)
    exporter.observe(sample)
    families = scrape(exporter)

    used = {s.labels["gpu"]: s for s in families["DCGM_FI_DEV_FB_USED"]}
    assert used["0"].value == 30 * 1024  # MiB, as dcgm-exporter
    assert used["1"].labels == {"gpu": "1", "UUID": fake.gpus[1].uuid, "device": "nvidia1",
                                "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-07.cluster", "GPU_I_ID": ""}
    assert {s.labels["gpu"]: s.value for s in families["DCGM_FI_DEV_XID_ERRORS"]} == {"0": 0, "1": 79}
    assert [s.value for s in families["DCGM_FI_DEV_GPU_UTIL"]] == [97, 97]
    (rank,) = families["monitor_gpu_rank"]
    assert rank.labels == {"job_id": "4242", "node": "gpu-07", "Hostname": "gpu-07.cluster", "gpu": "1",
                                "UUID": fake.gpus[1].uuid, "rank": "5", "local_rank": "1"}
    (cause,) = families["monitor_root_cause"]
    assert (cause.labels["category"], cause.labels["rank"], cause.labels["node"], cause.labels["job_id"]) == \
        ("cuda_oom", "5", "gpu-07", "4242")
    assert {s.labels["category"]: s.value for s in families["monitor_findings"]} == {"cuda_oom": 1, "nccl_timeout": 3}
    (silent,) = families["monitor_rank_seconds_since_last_line"]
    assert 29 <= silent.value < 60 and silent.labels["rank"] == "5"


def test_no_gpu_says_why_and_a_lost_gpu_is_marked():
    fake = FakeNvml(make_gpus(2))
    sampler = Sampler(nvml=fake, cuda_visible_devices=None)
    sampler.sample()
    fake.gpus[0].lost = True  # NVML raises the real NVMLError_GpuIsLost from now on
    sample = sampler.sample()
    sampler.close()
    exporter = JobExporter(node="n", hostname="h")
    exporter.observe(sample)
    families = scrape(exporter)
    assert {s.labels["gpu"]: s.value for s in families["monitor_gpu_lost"]} == {"0": 1, "1": 0}
    assert [s.labels["gpu"] for s in families["DCGM_FI_DEV_GPU_TEMP"]] == ["1"]  # no value for the lost one
    # The real no-GPU path of this machine: no NVML library, said as a status, no DCGM series.
    none = Sampler(cuda_visible_devices=None)
    exporter.observe(none.sample())
    none.close()
    families = scrape(exporter)
    (status,) = families["monitor_gpu_status"]
    assert status.labels["status"] != "ok" and families["DCGM_FI_DEV_GPU_UTIL"] == []


def test_textfile_for_node_exporter(tmp_path: Path):
    exporter = JobExporter(node="n", hostname="h")
    target = tmp_path / "monitor.prom"
    exporter.keep_textfile(str(target))
    sampler = Sampler(nvml=FakeNvml(make_gpus(1)), cuda_visible_devices=None)
    exporter.observe(sampler.sample())
    sampler.close()
    assert 'DCGM_FI_DEV_GPU_TEMP{' in target.read_text()
    exporter.keep_textfile(str(tmp_path / "gone" / "x.prom"))
    assert exporter.error == f"cannot write metrics to {tmp_path / 'gone' / 'x.prom'}: No such file or directory"


# CI installs Debian's prometheus (.ci/run): there, a missing binary fails instead of skipping.
needs = lambda tool: pytest.mark.skipif(shutil.which(tool) is None and not os.environ.get("CI"),  # noqa: E731
                                        reason=f"{tool} (Debian's prometheus package) not installed")


@needs("promtool")
def test_shipped_alert_rules_pass_promtool():
    result = subprocess.run(["promtool", "check", "rules", str(ROOT / "docs/prometheus/monitor-alerts.yml")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 5 rules found" in result.stdout


def test_grafana_dashboard_queries_what_the_endpoint_serves():
    dashboard = json.loads((ROOT / "docs/grafana/monitor-dashboard.json").read_text())
    queries = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for name in ("monitor_root_cause", "monitor_findings", "monitor_rank_seconds_since_last_line",
                 "monitor_training_step", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS"):
        assert name in queries


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)["data"]["result"]


@needs("prometheus")
def test_a_real_prometheus_scrapes_monitor_run(tmp_path: Path):
    port, prom_port = free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: monitor\n    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    env = {**os.environ, "FAKE_GPUS": "8", "SLURM_JOB_ID": "777", "STEPS": "6", "LINGER": "12"}
    run = subprocess.Popen(
        [sys.executable, str(JOBS / "fake_gpu_monitor.py"), "run", "--headless", "--no-preflight",
         "--job-dir", str(tmp_path / "job"), "--node", "gpu-01", "--metrics-port", str(port), "--",
         sys.executable, str(JOBS / "two_ranks_job.py")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        gpus = causes = []
        while time.monotonic() < deadline and not (len(gpus) == 8 and causes):
            time.sleep(1)
            try:
                gpus = _query(prom_port, "DCGM_FI_DEV_GPU_UTIL")
                causes = _query(prom_port, "monitor_root_cause")
            except OSError:
                continue  # Prometheus still starting
        assert len(gpus) == 8, gpus
        assert {g["metric"]["gpu"] for g in gpus} == {str(i) for i in range(8)}
        assert all(g["metric"]["modelName"] == "NVIDIA H100 80GB HBM3" and g["metric"]["UUID"].startswith("GPU-")
                   for g in gpus)
        (cause,) = causes
        labels = cause["metric"]
        assert (labels["job_id"], labels["node"], labels["rank"], labels["category"]) == \
            ("777", "gpu-01", "1", "python_exception")
        ranks = {r["metric"]["rank"]: r["metric"]["gpu"] for r in _query(prom_port, "monitor_gpu_rank")}
        assert ranks == {"0": "0", "1": "1"}
        assert {r["metric"]["rank"] for r in _query(prom_port, "monitor_rank_seconds_since_last_line")} == {"0", "1"}
        steps = _query(prom_port, 'monitor_training_step{node="gpu-01"}')
        assert steps and float(steps[0]["value"][1]) >= 1
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        run.terminate()
        _, err = run.communicate(timeout=60)
    assert b"Traceback" not in err


def test_a_taken_port_is_one_line_and_the_job_runs_without_the_endpoint(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "monitor", "run", "--headless", "--no-preflight", "--log-dir", str(tmp_path),
             "--metrics-port", str(port), "--", sys.executable, "-c", "print('hello'); raise SystemExit(3)"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 3 and result.stdout == "hello\n"
    assert (f"monitor: cannot serve metrics on 127.0.0.1 port {port}: Address already in use; "
            "the job runs without it\n") in result.stderr
    assert "Traceback" not in result.stderr


def test_usage_errors_of_the_node_and_port_options(tmp_path: Path):
    for args, message in ((["--node", "gpu-01"], "--node names this node's folder in --job-dir; give --job-dir too"),
                          (["--metrics-port", "70000"], "--metrics-port 70000: must be at most 65535")):
        # In tmp_path, with this checkout's monitor (not whichever one is installed).
        result = subprocess.run([sys.executable, "-m", "monitor", "run", *args, "--", "true"],
                                capture_output=True, text=True, timeout=60, cwd=tmp_path,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert not (tmp_path / "logs").exists()
