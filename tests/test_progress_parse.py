"""Progress parsing from the formats training scripts print, and the tracker's state."""

import math

import pytest

from monitor.progress import ProgressTracker, parse_progress

CASES = [
    # HF Trainer log dicts
    ("{'loss': 2.3456, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': 0.5}", dict(loss=2.3456, epoch=0.5, step=None)),
    ("{'train_runtime': 12.3, 'train_samples_per_second': 81.2, 'train_loss': 0.5, 'epoch': 3.0}",
     dict(loss=0.5, throughput=81.2, throughput_unit="samples/s")),
    # tqdm and Lightning
    (" 45%|████▌     | 450/1000 [01:23<01:42,  5.38it/s]", dict(step=450, total=1000, throughput=5.38, throughput_unit="it/s")),
    ("Epoch 3:  20%|██        | 20/100 [00:02<00:08,  9.50it/s, v_num=1, train_loss=0.523]",
     dict(step=20, total=100, epoch=3.0, loss=0.523)),
    ("Loading shards: 100%|██████████| 2/2 [00:03<00:00,  2.50s/it]", dict(step=2, total=2, throughput=0.4, throughput_unit="it/s")),
    # Megatron and DeepSpeed
    (" iteration      100/  500000 | consumed samples:        12800 | lm loss: 7.123456E+00 | loss scale: 65536.0 |",
     dict(step=100, total=500000, loss=7.123456)),
    ("steps: 10 loss: 2.3051 iter time (s): 0.512 samples/sec: 125.0", dict(step=10, loss=2.3051, throughput=125.0)),
    # free-form
    ("step 100 loss 2.345", dict(step=100, loss=2.345)),
    ("[rank0]: step=7 loss=1.25", dict(step=7, loss=1.25)),
    ("iter 100: loss 2.3456, time 35.21ms, mfu 40.1%", dict(step=100, loss=2.3456)),
    ("Step 100/1000, loss=1.5, 1234 tokens/s", dict(step=100, total=1000, loss=1.5, throughput=1234.0, throughput_unit="tokens/s")),
]


@pytest.mark.parametrize("line,expected", CASES)
def test_formats(line, expected):
    event = parse_progress(line)
    assert event is not None
    for key, value in expected.items():
        assert getattr(event, key) == value, key


@pytest.mark.parametrize("line", [
    "hello world", "ValueError: bad loss in step", "Epoch 2 done", "[rank1]: Traceback (most recent call last):",
    "loss scale: 65536.0", "",
])
def test_lines_without_progress(line):
    assert parse_progress(line) is None


@pytest.mark.parametrize("line", ["{'loss': nan, 'grad_norm': nan, 'epoch': 1.2}", "step 5 loss inf", "Step 3, loss=-nan"])
def test_non_finite_loss(line):
    event = parse_progress(line)
    assert event is not None and not math.isfinite(event.loss) and not event.loss_is_finite


def test_tracker_follows_lowest_rank_and_estimates_eta():
    tracker = ProgressTracker(clock=lambda: 0.0)
    assert tracker.feed("[rank1]: step 10/110 loss 3.0", rank=1, now=0.0)
    assert tracker.feed("[rank0]: step 10/110 loss 2.0", rank=0, now=0.0)
    # rank 1 is not followed any more: its (different) loss must not move the state
    assert not tracker.feed("[rank1]: step 20/110 loss 9.0", rank=1, now=1.0)
    assert tracker.feed("[rank0]: step 20/110 loss 1.5", rank=0, now=10.0)
    state = tracker.state
    assert (state.step, state.total, state.loss, state.rank) == (20, 110, 1.5, 0)
    assert state.losses[-2:] == (2.0, 1.5)
    # 10 steps took 10 s; 90 steps remain
    assert state.eta_seconds == pytest.approx(90.0)
    assert not state.nonfinite_seen


def test_tracker_keeps_nan_from_any_rank():
    tracker = ProgressTracker(clock=lambda: 0.0)
    tracker.feed("step 1 loss 2.0", rank=0)
    assert tracker.feed("step 2 loss nan", rank=3)
    state = tracker.state
    assert state.nonfinite_seen and state.nonfinite_step == 2 and state.nonfinite_rank == 3
    assert state.loss == 2.0  # rank 0 is still the followed rank
    tracker.feed("step 3 loss 1.0", rank=0)
    assert tracker.state.nonfinite_seen  # stays visible


def test_lines_of_other_ranks_left_unparsed_change_nothing_they_would_have():
    """Once rank 0 with a loss is followed, the other ranks' lines are not parsed: a non-finite
    loss and a configured total on them still count, as when every line was parsed."""
    def states(parse_all: bool) -> list:
        tracker = ProgressTracker(clock=lambda: 0.0)
        if parse_all:
            tracker._cannot_change = lambda text, rank: False
        lines = [(f"step {i // 4} loss {2 - i / 1e3:.3f} 1000 tokens/s", i % 4) for i in range(400)]
        lines.insert(200, ("steps=900 lr=0.1", 2))
        lines.insert(300, ("step 75 loss NaN", 3))
        seen = []
        for i, (text, rank) in enumerate(lines):
            tracker.feed(text, rank, now=i * 0.1)
            seen.append(tracker.state)
        return seen

    fast, full = states(False), states(True)
    assert fast == full
    assert fast[-1].total == 900 and fast[-1].nonfinite_rank == 3 and fast[-1].rank == 0


def test_tracker_eta_from_tqdm_rate_and_restart():
    tracker = ProgressTracker(clock=lambda: 0.0)
    tracker.feed(" 10%|█         | 100/1000 [00:10<01:30,  10.00it/s]", now=5.0)
    assert tracker.state.eta_seconds == pytest.approx(90.0)
    tracker.feed(" 0%|          | 1/50 [00:00<?, ?it/s]", now=6.0)  # a new bar starts
    assert tracker.state.step == 1 and tracker.state.total == 50


@pytest.mark.parametrize("line", ["loss=" + "9" * 65000, "9" * 65000 + " it/s", "step " * 13000, "1." * 32000])
def test_huge_lines_are_read_only_at_their_start(line):
    # Quadratic backtracking on a 64 KiB line would hang here; only the first MAX_PARSED characters count.
    event = parse_progress(line)
    assert event is None or event.step is not None or event.loss is not None


def test_progress_and_replay_are_plain_python():
    import subprocess
    import sys

    code = (
        "import sys\nimport monitor.progress, monitor.demo.replay, monitor.commands.demo, monitor.tui\n"
        "print(sorted(m for m in ('textual', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _track(path):
    from monitor.logs.reader import read_log

    tracker = ProgressTracker(clock=lambda: 0.0)
    for line in read_log(path):
        tracker.feed(line.text, line.rank)
    return tracker.state


@pytest.mark.parametrize("line", [
    "[rank1] world_size=2 scenario=crash steps=6 lr=0.1 timeout=10s pid=11498",
    "[rank1] world_size=2 scenario=ok steps=200 lr=0.1 timeout=10s pid=1[rank0] world_size=2 scenario=ok steps=200 lr=0.1",
    "max_steps=1000",
])
def test_configured_steps_are_the_total_not_the_step(line):
    event = parse_progress(line)
    assert event is not None and event.step is None and event.total in (6, 200, 1000)


@pytest.mark.parametrize("line", [
    "[rank1]: ValueError: step 3: target batch has 33 rows but the input has 32",
    "[rank0]: FloatingPointError: loss is nan at step 3; stopping",
    '[rank0]:     raise FloatingPointError(f"loss is nan at step {step}; stopping")',
    "step 3: the batch has 33 rows",
])
def test_error_text_and_bare_step_numbers_are_no_progress(line):
    assert parse_progress(line) is None


def test_crash_log_follows_unprefixed_rank0_lines_with_loss():
    # Config lines carry [rankN], the training lines none, the traceback [rankN]: again.
    state = _track("sample_logs/demo/crash-2ranks.log")
    assert (state.step, state.total, state.loss) == (2, 6, 5.2471)
    assert state.losses == (3.8365, 5.2471)  # "step N loss X" and the dict of the same step: one point
    assert state.rank is None


def test_ok_log_reaches_the_last_step_and_tee_log_follows_rank0():
    state = _track("sample_logs/demo/ok-2ranks.log")
    assert (state.step, state.total, state.loss, len(state.losses)) == (6, 6, 3.2579, 6)
    tee = _track("sample_logs/demo/ok-tee-2ranks.log")
    assert tee.rank == 0 and tee.step == tee.total and tee.loss is not None


def test_tracker_prefers_the_stream_with_loss_and_config_gives_eta():
    tracker = ProgressTracker(clock=lambda: 0.0)
    tracker.feed("[rank1] world_size=2 scenario=ok steps=200 lr=0.1", rank=1, now=0.0)
    assert tracker.state.step is None and tracker.state.total == 200
    tracker.feed("[rank1]: step 1 lr 0.1", rank=1, now=0.0)  # progress without loss on rank 1
    tracker.feed("step 1 loss 3.8", rank=None, now=0.0)
    tracker.feed("[rank1]: step 2 lr 0.1", rank=1, now=1.0)
    tracker.feed("step 2 loss 3.5", rank=None, now=1.0)
    state = tracker.state
    assert (state.step, state.loss, state.rank, state.losses) == (2, 3.5, None, (3.8, 3.5))
    assert state.eta_seconds == pytest.approx(198.0)


@pytest.mark.parametrize("line, rate", [
    ("step 10 loss 1.23 lr 3e-4 grad_norm 0.469 tokens/s 12345", 12345.0),  # seen in #14: read as 0.469
    ("step 3 | loss 2.0 | 1234.5 tokens/s", 1234.5),
    ("1234.5 tokens/s 16 GPUs", 1234.5),
    ("speed 12.5 it/s", 12.5),
    ("throughput tokens/s: 880.5", 880.5),
])
def test_a_rate_is_the_number_its_unit_names(line, rate):
    assert parse_progress(line).throughput == rate


def test_steps_read_from_a_backlog_give_no_rate_until_steps_come_live():
    """A watch opened mid-run reads 15 steps at once: they say nothing of the job's speed (the
    screen showed 'ETA 21s' for 45 steps left at one a second)."""
    tracker = ProgressTracker(clock=lambda: 0.0)
    tracker.feed("steps=60", now=0.0)
    for step in range(1, 16):
        tracker.feed(f"step {step} loss 0.5", now=100.0 + step * 1e-4)
    assert tracker.state.step == 15 and tracker.state.eta_seconds is None
    tracker.feed("step 16 loss 0.5", now=101.0)
    tracker.feed("step 17 loss 0.5", now=102.0)
    assert tracker.state.eta_seconds == pytest.approx(43.0, rel=0.05)
