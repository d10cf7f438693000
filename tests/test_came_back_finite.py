"""A gradient norm that went NaN or inf and whose last value in its log is finite again (a step
the fp16 loss scaler skipped; mmcv and HF Trainer log such a step's grad_norm as nan) did not end
the run: read post-mortem, it is a warning and the root cause is chosen from the rest; a norm that
stays non-finite, a log that ends on it, or a loss that went NaN is still the failure; live it
stays an error."""

from __future__ import annotations

import pytest

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths

# mmcv's TextLoggerHook line (mmcv/runner/hooks/logger/text.py: "Epoch [{epoch}][{iter}/{len}]\t" then
# "name: value" pairs joined by ", "), with Fp16OptimizerHook's grad_norm.
LINE = ("2021-11-22 01:{minute:02d}:34,502 - mmocr - INFO - Epoch [1][{step}/62598]\tlr: 1.000e-03, time: 0.539, "
        "loss_ce: 1.2757, loss: {loss}, grad_norm: {norm}\n")


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def write(tmp_path, *rows: tuple[str, str]) -> str:
    log = tmp_path / "train.log"
    log.write_text("".join(LINE.format(minute=n, step=100 * (n + 1), loss=loss, norm=norm)
                           for n, (loss, norm) in enumerate(rows)))
    return str(log)


def test_a_grad_norm_nan_followed_by_finite_ones_is_a_warning_and_no_root_cause(tmp_path, catalogue):
    diagnosis = diagnose_paths([write(tmp_path, ("1.9091", "nan"), ("0.9186", "3.9772"), ("0.8812", "2.1040"))], catalogue)
    assert diagnosis.root_cause is None and not diagnosis.failed
    (finding,) = [f for f in diagnosis.findings if f.rule == "nan-loss"]
    assert (finding.severity, finding.role) == ("warning", "cascade")
    assert finding.title == "grad_norm became nan (finite again later)"
    assert finding.remedy.startswith("The log's last value of grad_norm is finite (2.1040)")


def test_a_metric_that_stays_non_finite_is_still_the_failure(tmp_path, catalogue):
    diagnosis = diagnose_paths([write(tmp_path, ("1.9091", "2.5"), ("nan", "nan"), ("nan", "nan"))], catalogue)
    root = diagnosis.root_cause
    assert root is not None and (root.rule, root.severity) == ("nan-loss", "error")
    assert "finite again" not in root.title


def test_a_nan_loss_is_the_failure_even_when_later_losses_are_finite(tmp_path, catalogue):
    root = diagnose_paths([write(tmp_path, ("1.9091", "2.5"), ("nan", "2.1"), ("0.9186", "2.0"))], catalogue).root_cause
    assert root is not None and (root.rule, root.severity, root.fields["metric"]) == ("nan-loss", "error", "loss")


def test_a_log_that_ends_on_the_nan_is_still_the_failure(tmp_path, catalogue):
    diagnosis = diagnose_paths([write(tmp_path, ("1.9091", "2.5"), ("0.9186", "nan"))], catalogue)
    root = diagnosis.root_cause
    assert root is not None and (root.rule, root.category) == ("nan-loss", "nan_loss")


def test_another_failure_after_a_recovered_nan_becomes_the_root_cause(tmp_path, catalogue):
    log = write(tmp_path, ("1.9091", "nan"), ("0.9186", "3.9772"))
    with open(log, "a") as stream:
        stream.write("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; "
                     "13.10 GiB already allocated; 1.02 GiB free; 13.60 GiB reserved in total by PyTorch)\n")
    root = diagnose_paths([log], catalogue).root_cause
    assert root is not None and root.category == "cuda_oom"


def test_live_the_nan_is_an_error_until_the_run_says_more(tmp_path, catalogue):
    from monitor.diagnosis.conclude import conclude
    from monitor.diagnosis.engine import Engine
    from monitor.diagnosis.scan import scan_file

    log = write(tmp_path, ("1.9091", "nan"), ("0.9186", "3.9772"))
    engine = Engine(catalogue)
    scan_file(log, engine)
    engine.flush(log)
    root = conclude(engine.diagnosis([log]), catalogue).root_cause  # not finished: the job still runs
    assert root is not None and (root.rule, root.severity) == ("nan-loss", "error")


def test_a_hang_after_a_recovered_nan_still_names_the_rank_that_stalled(tmp_path, catalogue):
    """The root cause chosen again weighs the engine's rank evidence, as the engine's own choice
    does: three of four ranks time out, so rank 1 is the one they waited for."""
    log = tmp_path / "job.log"
    steps = "".join(f"[rank0]: {LINE.format(minute=n, step=100 * (n + 1), loss=loss, norm=norm)}"
                    for n, (loss, norm) in enumerate([("1.9091", "nan"), ("0.9186", "3.9772")]))
    log.write_text(
        "".join(f"[rank{r}]: Initialized process group, world_size=4\n" for r in range(4)) + steps
        + "".join(f"[rank{r}]:[E ProcessGroupNCCL.cpp:1250] [Rank {r}] Watchdog caught collective operation timeout: "
                  "WorkNCCL(SeqNum=4412, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800562 milliseconds before "
                  "timing out.\n" for r in (0, 2, 3)))
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.category, root.rank) == ("nccl_timeout", 1)


def test_infinity_as_json_writes_it_and_a_later_nan_loss_keep_the_failure(tmp_path, catalogue):
    """Python's json writes inf as Infinity (the HF Trainer's log_history, JSON-lines loggers)."""
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"loss": 2.31, "grad_norm": NaN, "epoch": 0.01}\n{"loss": 2.12, "grad_norm": 3.1, "epoch": 0.02}\n'
                   '{"loss": 14.2, "grad_norm": Infinity, "epoch": 0.03}\n')
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and root.rule == "nan-loss" and root.severity == "error"
    log.write_text('{"loss": 2.31, "grad_norm": NaN, "epoch": 0.01}\n{"loss": NaN, "grad_norm": 3.1, "epoch": 0.02}\n')
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and root.rule == "nan-loss" and root.severity == "error"


def test_apex_below_one_then_finite_losses_recovered_and_without_them_is_the_failure(tmp_path, catalogue):
    """apex/amp/handle.py: "Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to
    {}": a scale below 1 is a failure unless the loss the log prints later is finite."""
    overflows = "".join(f"Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to {2.0 ** (15 - n)}\n"
                        for n in range(17))
    log = tmp_path / "train.log"
    log.write_text(overflows)
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.confidence) == ("apex-loss-scale-below-one", "likely")
    log.write_text(overflows + "".join(f"Epoch 1 step {s} Loss: 2.{s:03d}\n" for s in range(5)))
    diagnosis = diagnose_paths([str(log)], catalogue)
    assert diagnosis.root_cause is None
    assert [f.severity for f in diagnosis.findings if f.rule == "apex-loss-scale-below-one"] == ["warning"]


RECOVERING_RULE = '''
[[rule]]
id = "scaler-gave-up"
category = "nan_loss"
severity = "error"
role = "root"
title = "the loss scaler gave up"
patterns = ['scaler gave up at step \\d+']
remedy = "Lower the learning rate."
{recovers}
[rule.examples]
match = ["scaler gave up at step 7"]
no_match = ["scaler went on at step 7"]
'''


def test_a_rule_names_the_metric_that_says_its_run_went_on(tmp_path):
    """`recovers` in a rule's own data (the shipped apex rule's too): a run whose last value of
    that metric is finite went on past the message; without the field the message is the failure."""
    log = tmp_path / "train.log"
    log.write_text("scaler gave up at step 7\n" + "".join(f"step {s} ppl: 3.{s}\n" for s in range(8, 12)))
    roots = {}
    for recovers in ("", 'recovers = "ppl"'):
        rules = tmp_path / f"rules-{len(recovers)}"
        rules.mkdir()
        (rules / "own.toml").write_text(RECOVERING_RULE.format(recovers=recovers))
        diagnosis = diagnose_paths([str(log)], load_catalogue([rules], include_user=False, include_shipped=False))
        roots[recovers] = diagnosis.root_cause.rule if diagnosis.root_cause else None
    assert roots == {"": "scaler-gave-up", 'recovers = "ppl"': None}


@pytest.mark.parametrize(("line", "category", "message"), [
    ("recovers = 3", "nan_loss", "'recovers' must name one metric"),
    ('recovers = "grad norm"', "nan_loss", "'recovers' must name one metric"),
    ('recovers = "loss"', "cuda_oom", "'recovers' is for nan_loss rules"),
])
def test_a_bad_recovers_is_a_one_line_error_naming_its_line(tmp_path, line, category, message):
    from monitor.diagnosis.catalogue import RuleError, load_file

    path = tmp_path / "own.toml"
    path.write_text(RECOVERING_RULE.format(recovers=line).replace('"nan_loss"', f'"{category}"'))
    with pytest.raises(RuleError) as caught:
        load_file(path)
    text = str(caught.value)
    assert message in text and f"{path}:10:" in text and "\n" not in text
