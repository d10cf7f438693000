"""Recording samples beside the logs and replaying them exactly."""

from __future__ import annotations

import json

import pytest
from metrics_fake_nvml import GIB, FakeNvml, FakeProcess, make_gpus

from monitor.metrics.samples_file import SamplesFile, SamplesFileError, read_samples, samples_path
from monitor.metrics.sampler import Sampler


def real_samples(count=3):
    gpus = make_gpus(2)
    gpus[0].processes = [FakeProcess(4_000_000, 3 * GIB)]
    gpus[1].unsupported = {"nvmlDeviceGetFanSpeed"}
    fake = FakeNvml(gpus)
    sampler = Sampler(job_pids=[1], nvml=fake, cuda_visible_devices="1,0", watch_dirs=["/"])
    samples = []
    for n in range(count):
        if n == 1:
            fake.emit_xid(0, 79)
        samples.append(sampler.sample())
    return samples


def test_round_trip_of_real_samples(tmp_path):
    path = samples_path(tmp_path / "run-20261121-101500.log")
    assert path == tmp_path / "run-20261121-101500.metrics.jsonl"
    samples = real_samples()
    recorder = SamplesFile(path)
    for sample in samples:
        assert recorder.write(sample)
    recorder.close()
    assert list(read_samples(path)) == samples
    replayed = list(read_samples(path))
    assert replayed[1].events[0].code == 79 and replayed[0].gpus[1].fan_percent is None
    assert replayed[0].gpus[0].cuda_index == 1


def test_reopening_appends_without_a_second_header(tmp_path):
    path = tmp_path / "m.jsonl"
    first, second = real_samples(2)
    for sample in (first, second):
        recorder = SamplesFile(path)
        recorder.write(sample)
        recorder.close()
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"monitor_metrics": 1} and len(lines) == 3
    assert list(read_samples(path)) == [first, second]


def test_a_last_line_cut_by_a_crash_is_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    (sample,) = real_samples(1)
    recorder = SamplesFile(path)
    recorder.write(sample)
    recorder.close()
    with open(path, "a") as handle:
        handle.write('{"time": 17, "host": {"cpu_')
    assert list(read_samples(path)) == [sample]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"monitor_metrics": 1}\nnot json\n{"time": 1}\n', ":2: not JSON"),
        # Valid JSON syntax that json.loads refuses with a plain ValueError (no .msg): Python's
        # limit on the digits of an int.
        pytest.param(b'{"monitor_metrics": 1}\n{"time": ' + b"1" * 5000 + b'}\n', ":2: not JSON (Exceeds the limit",
                     id="int-of-5000-digits"),
        (b'{"monitor_metrics": 1}\n\xff\xfe\x00garbage\n', ":2: not UTF-8"),
        (b'{"monitor_metrics": 1}\n{"time": 1}\n', ":2: not a metrics sample"),
        (b'{"monitor_metrics": 9}\n', ":1: recording format 9 is not supported"),
    ],
)
def test_bad_recordings_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(SamplesFileError) as error:
        list(read_samples(path))
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_missing_recording(tmp_path):
    with pytest.raises(SamplesFileError, match="No such file"):
        list(read_samples(tmp_path / "absent.jsonl"))


def test_write_failure_stops_recording_not_the_caller(tmp_path):
    (sample,) = real_samples(1)
    recorder = SamplesFile("/dev/full")
    assert recorder.write(sample) is False
    assert "No space left on device" in recorder.error and str("/dev/full") in recorder.error
    assert recorder.write(sample) is False


def test_a_samples_file_that_fails_is_said_once_and_sampling_goes_on():
    """The pipeline every mode shares (feeds.SamplerFeed): a samples file that can no longer be
    written (a full disk) is said in one line, once; the samples and their findings go on."""
    from monitor.metrics.sampler import Sampler
    from monitor.session.feeds import SamplerFeed

    class FullDisk:
        error = "metrics.jsonl: recording stopped: No space left on device"
        writes = 0

        def write(self, sample):
            self.writes += 1
            return False

        def close(self):
            pass

    said, posted, disk = [], [], FullDisk()
    feed = SamplerFeed(Sampler(), posted.extend, samples_file=disk, warn=said.append)  # this machine, real psutil
    try:
        samples = [feed.sample() for _ in range(3)]
    finally:
        feed.close()
    assert said == [FullDisk.error] and disk.writes == 1
    assert len(samples) == 3 and all(s.host.memory_total_bytes > 0 for s in samples)
