"""`monitor run` keeps the job's metrics beside its log, so a post-mortem has them too."""

from monitor.metrics.record import Recorder, read_recording
from monitor.metrics.sampler import Sampler
from monitor.tui.feeds import SamplerFeed


def test_sampler_feed_records_every_sample_it_takes(tmp_path):
    path = tmp_path / "run-1.metrics.jsonl"
    feed = SamplerFeed(Sampler(watch_dirs=[str(tmp_path)]), recorder=Recorder(path))
    taken = [feed.sample()[0] for _ in range(3)]
    feed.close()
    recorded = list(read_recording(path))
    assert [s.time for s in recorded] == [s.time for s in taken]
    assert recorded[-1].host.memory_total_bytes == taken[-1].host.memory_total_bytes > 0
