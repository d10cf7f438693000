"""The straggler scores on plain data: a window of looks scored, the rule that names a slow rank
(and names nobody in a balanced job's noise), its finding's words, the step times, and each
rank's GPU read through the metrics sampler on the fake NVML."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import deque

import pynvml
import pytest

from metrics_fake_nvml import FakeNvml, FakeProcess, make_gpus
from monitor.metrics.sampler import Sampler
from monitor.straggler.finding import ranks_words, slow_rank_finding, summary
from monitor.straggler.look import rank_gpus
from monitor.straggler.model import RankGpu, RankLook, Round
from monitor.straggler.score import Rule, Steadiness, score
from monitor.straggler.steps import StepTimes


def rounds(shares: dict[int, float], count: int, seed: int = 0, start: float = 1000.0) -> list[Round]:
    """``count`` looks, each rank waiting in all_reduce with the probability ``shares`` gives it."""
    rng = random.Random(seed)
    return [Round(start + t, tuple(RankLook(rank, "all_reduce" if rng.random() < share else "")
                                   for rank, share in shares.items())) for t in range(count)]


def test_the_rank_the_others_wait_for_is_the_candidate_with_how_long_they_wait():
    found = score(rounds({0: 0.5, 1: 0.5, 2: 0.05, 3: 0.5}, 40))
    slow = found.candidate
    assert slow is not None and slow.rank == 2 and slow.waiters == (0, 1, 3)
    assert 0.3 < slow.wait_share < 0.6 and slow.own_wait < 0.15 and slow.z > 3
    assert found.rounds == 40 and found.window_s == 39
    assert set(found.wait_fractions()) == {0, 1, 2, 3}


@pytest.mark.parametrize("share", [0.1, 0.3, 0.5, 0.8])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_a_balanced_jobs_noise_names_nobody_over_an_hour_of_windows(share, ranks):
    """Every rank waits alike: one look a second for an hour, scored over a sliding minute as the
    watch does, never names a rank (sampling noise is what a balanced job shows)."""
    rule = Rule()
    steadiness = Steadiness(rule)
    window: deque[Round] = deque(maxlen=60)
    named = []
    for one in rounds({r: share for r in range(ranks)}, 3600, seed=ranks * 10 + int(share * 10)):
        window.append(one)
        if (found := steadiness.judge(score(window, rule=rule))).slow is not None:
            named.append((one.taken, found.slow.rank))
    assert named == []


def test_too_few_looks_or_too_small_a_gap_names_nobody():
    assert score(rounds({0: 0.9, 1: 0.0}, 11)).candidate is None  # under min_looks
    assert score(rounds({0: 0.35, 1: 0.2}, 400)).candidate is None  # significant, but 15 points is noise to the job
    assert score(rounds({0: 0.5}, 100)).candidate is None  # one rank: nobody to wait


def test_a_candidate_is_named_only_after_it_held_and_a_change_starts_over():
    rule = Rule(hold=3)
    steadiness = Steadiness(rule)
    slow_one = score(rounds({0: 0.6, 1: 0.05}, 30))
    slow_zero = score(rounds({0: 0.05, 1: 0.6}, 30))
    balanced = score(rounds({0: 0.3, 1: 0.3}, 30))
    assert [steadiness.judge(s).slow is not None for s in (slow_one, slow_one, slow_one, slow_one)] == \
        [False, False, True, True]
    assert steadiness.judge(slow_zero).slow is None  # another rank: it must hold again
    assert steadiness.judge(balanced).slow is None
    assert steadiness.judge(slow_zero).slow is None


def test_the_finding_names_the_rank_its_waiters_their_share_and_its_gpu():
    shares = {r: 0.5 for r in range(8)} | {5: 0.05}
    gpus = {5: RankGpu("GPU 5", 1110, 99.0, ("sw_power_cap",))}
    found = Steadiness(Rule(hold=1)).judge(score(rounds(shares, 60, seed=3), {5: 0.52}, gpus))
    assert found.slow is not None
    finding = slow_rank_finding(found, found.slow, pid=4242)
    share = round(100 * found.slow.wait_share)
    assert finding.title == f"rank 5 is slow: ranks 0-4,6,7 wait for it {share} % of each step; its GPU is at 1,110 MHz (power cap)"
    assert finding.severity == "warning" and finding.category == "straggler" and finding.rank == 5
    assert finding.origin == "straggler" and finding.source_key == "straggler:5"
    assert "py-spy top --pid 4242" in finding.remedy and "a step takes 0.52 s" in finding.remedy
    assert any(line.startswith("rank 5: in a collective") and "GPU 5 at 1,110 MHz" in line for line in finding.evidence)
    assert summary(found).endswith("rank 5 is slow")


def test_one_waiter_and_no_gpu():
    found = Steadiness(Rule(hold=1)).judge(score(rounds({0: 0.6, 1: 0.05}, 40)))
    assert found.slow is not None
    title = slow_rank_finding(found, found.slow).title
    assert title.startswith("rank 1 is slow: rank 0 waits for it ") and "GPU" not in title


@pytest.mark.parametrize("ranks, words", [((3,), "rank 3"), ((0, 1), "ranks 0,1"), ((0, 1, 2, 3, 4, 6, 7), "ranks 0-4,6,7"),
                                          ((1, 2, 4, 5, 6, 9), "ranks 1,2,4-6,9")])
def test_ranks_in_words(ranks, words):
    assert ranks_words(ranks) == words


def test_step_times_per_rank_from_their_progress_lines():
    steps = StepTimes()
    for n in range(1, 8):
        steps.feed(0, f"step {n} loss 0.5", 10.0 + 0.5 * n)
        steps.feed(0, f"{{'loss': 0.5, 'step': {n}}}", 10.0 + 0.5 * n + 0.01)  # the same step again
        steps.feed(1, f"step {n} loss 0.5 step_time 1.0", 20.0 + 1.0 * n)
    steps.feed(2, "loading the data", 1.0)
    steps.feed(None, "step 3 loss 0.1", 1.0)
    assert steps.seconds() == pytest.approx({0: 0.5, 1: 1.0})
    steps.feed(1, "step 1 loss 0.5", 100.0)  # a restart: the old times no longer apply
    assert set(steps.seconds()) == {0}


def test_each_ranks_gpu_from_the_metrics_sampler_on_the_fake_nvml(tmp_path):
    ranks = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2"}) for r in range(2)]
    try:
        gpus = make_gpus(2)
        gpus[1].sm_clock, gpus[1].clock_reasons = 1110, pynvml.nvmlClocksThrottleReasonSwPowerCap
        for gpu, rank in zip(gpus, ranks):
            gpu.processes = [FakeProcess(rank.pid, 1 << 30)]
        sampler = Sampler(job_pids=[p.pid for p in ranks], nvml=FakeNvml(gpus))
        found = rank_gpus(sampler.sample())
        sampler.close()
    finally:
        for rank in ranks:
            rank.kill()
            rank.wait()
    assert found[1] == RankGpu("GPU 1", 1110, found[1].utilization_percent, ("sw_power_cap",))
    assert found[0].sm_clock_mhz == 1980 and found[0].throttle_reasons == ()


def test_no_gpu_no_job():
    from monitor.metrics.model import HostSample, Sample

    host = HostSample(0.0, [], 1, 0, 1, 0, 0, None, None, None)
    assert rank_gpus(Sample(0.0, host, "no_driver", "no NVIDIA driver")) == {}


def test_a_job_of_one_rank_gets_no_scores_line():
    """Seen on a one-GPU machine: "rank 0 17 %; no rank is slower than the others" said nothing."""
    alone = Steadiness(Rule(hold=1)).judge(score(rounds({0: 0.17}, 10)))
    assert summary(alone) == ""
    assert summary(Steadiness(Rule(hold=1)).judge(score(rounds({0: 0.3, 1: 0.3}, 10)))).endswith("no rank is slower than the others")
