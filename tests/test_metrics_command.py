"""`monitor metrics`: the real no-GPU path, JSON of plain numbers, text, recording, usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from metrics_fake_nvml import GIB, FakeNvml, FakeProcess, make_gpus

from monitor.cli import main
from monitor.metrics import sampler as sampler_module
from monitor.metrics.samples_file import read_samples

# Fields that are text by nature; every other leaf is a number, a bool or null.
TEXT_FIELDS = {
    "gpu_status", "gpu_message", "driver_version", "name", "uuid", "status", "message", "path", "kind",
    "detail", "pid_mapping", "pid_mapping_message", "clock_event_reasons", "findings", "env",
}


def leaves(data, key=""):
    if isinstance(data, dict):
        for k, v in data.items():
            if k == "env":  # a process's environment variables: text by nature
                yield from (("env", str(value)) for value in v.values())
            else:
                yield from leaves(v, k)
    elif isinstance(data, list):
        for item in data:
            yield from leaves(item, key)
    else:
        yield key, data


def test_real_no_gpu_path_prints_host_and_why(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "monitor", "metrics", "--once", "--json", "--dir", str(tmp_path), "--pid", str(os.getpid())],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    if data["gpu_status"] == "ok":
        pytest.skip("this machine has a working NVIDIA driver")
    assert data["gpus"] == [] and data["gpu_message"]
    assert data["host"]["memory_total_bytes"] > 0 and data["host"]["dirs"][0]["path"] == str(tmp_path)
    assert data["job"]["processes"][0]["pid"] == os.getpid()
    for key, value in leaves(data):
        if key not in TEXT_FIELDS:
            assert value is None or isinstance(value, (int, float)), (key, value)


@pytest.fixture
def fake_gpus(monkeypatch):
    gpus = make_gpus(2)
    gpus[0].processes = [FakeProcess(os.getpid(), 5 * GIB)]
    gpus[1].memory_used = 79 * GIB
    gpus[1].clock_reasons = 0x40
    monkeypatch.setattr(sampler_module, "import_pynvml", lambda: FakeNvml(gpus))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return gpus


def test_json_with_gpus_is_numbers_with_units(fake_gpus, capsys):
    assert main(["metrics", "--once", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    gpu = data["gpus"][1]
    assert gpu["memory_used_bytes"] == 79 * GIB and gpu["power_w"] == 550.0 and gpu["sm_clock_mhz"] == 1980
    assert gpu["temperature_c"] == 65.0 and gpu["clock_event_reasons"] == ["hw_thermal_slowdown"]
    for key, value in leaves(data):
        if key not in TEXT_FIELDS:
            assert value is None or isinstance(value, (int, float)), (key, value)


def test_text_output_and_recording(fake_gpus, capsys, tmp_path):
    record = tmp_path / "metrics.jsonl"
    assert main(["metrics", "--count", "2", "--interval", "0.1", "--record", str(record), "--pid", str(os.getpid())]) == 0
    text = capsys.readouterr().out
    assert "GPU 1 cuda:1  NVIDIA H100 80GB HBM3  util 97%  mem 79.0 GiB/80.0 GiB  65 °C  550/700 W" in text
    assert "clocks held by hw_thermal_slowdown" in text
    assert f"pid {os.getpid()}" in text and "GPU 0 5.0 GiB" in text
    samples = list(read_samples(record))
    assert len(samples) == 2 and samples[1].gpus[1].memory_used_bytes == 79 * GIB


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "0"], "--interval 0.0: must be at least 0.1 seconds"),
        (["--pid", "4000000"], "--pid 4000000: no such process"),
        (["--count", "0"], "--count 0: must be at least 1"),
        (["--record", "/nonexistent-dir/m.jsonl", "--once"], "/nonexistent-dir/m.jsonl: No such file or directory"),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv, message, capsys):
    assert main(["metrics", *argv]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"monitor: {message}"


def test_metrics_command_stays_light():
    code = (
        "import sys\nfrom monitor.cli import main\n"
        "try:\n    main(['metrics', '--help'])\nexcept SystemExit:\n    pass\n"
        "bad = [m for m in ('textual', 'torch', 'pynvml', 'psutil') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_metrics_core_never_imports_textual_or_torch():
    modules = ["sampler", "signals", "history", "samples_file", "render", "model"]
    code = (
        "import sys\n"
        + "".join(f"import monitor.metrics.{m}\n" for m in modules)
        + "bad = [m for m in ('textual', 'torch') if m in sys.modules]\nassert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_piped_samples_say_why_there_is_no_gpu_once():
    result = subprocess.run([sys.executable, "-m", "monitor", "metrics", "--count", "3", "--interval", "0.1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.count("GPU   none:") == 1 and result.stdout.count("host  cpu") == 3


def test_on_a_terminal_the_sample_is_redrawn_in_place():
    import pty

    leader, follower = pty.openpty()
    os.set_blocking(leader, True)
    process = subprocess.Popen([sys.executable, "-m", "monitor", "metrics", "--count", "3", "--interval", "0.1"],
                               stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    screen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    process.wait(timeout=30)
    os.close(leader)
    text = screen.decode()
    # The block is written three times, the second and third after going up over the one before.
    assert text.count("host  cpu") == 3
    assert text.count("\x1b[J") == 2 and "F\x1b[J" in text
