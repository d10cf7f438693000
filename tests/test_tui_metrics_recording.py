"""`monitor run` keeps the job's metrics beside its log, so a post-mortem has them too."""

from monitor.metrics.samples_file import SamplesFile, read_samples
from monitor.metrics.sampler import Sampler
from monitor.session.feeds import SamplerFeed


def test_sampler_feed_records_every_sample_it_takes(tmp_path):
    path = tmp_path / "run-1.metrics.jsonl"
    posted = []
    feed = SamplerFeed(Sampler(watch_dirs=[str(tmp_path)]), posted.extend, samples_file=SamplesFile(path))
    taken = [feed.sample() for _ in range(3)]
    feed.close()
    recorded = list(read_samples(path))
    assert [s.time for s in recorded] == [s.time for s in taken]
    assert recorded[-1].host.memory_total_bytes == taken[-1].host.memory_total_bytes > 0
