"""Templates: fields, dropped lines, and the wording when a finding's rank is not known."""

from __future__ import annotations

import pytest
from diagnosis_helpers import run_lines

from pathlib import Path

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.diagnosis.engine import Engine
from monitor.diagnosis.templates import render

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def shipped_engine() -> Engine:
    return Engine(load_catalogue([], include_user=False))


def test_rank_phrases_are_reworded_when_no_rank_is_known():
    no_rank = {"rank": "", "node": "n1", "source_rank": "0"}
    assert render("NCCL error on rank {rank}", no_rank, missing="?") == "NCCL error"
    assert render("Rank {rank} could not reach the store", no_rank, missing="?") == "A rank could not reach the store"
    assert render("Checkpoint is corrupt (rank {rank})", no_rank, missing="?") == "Checkpoint is corrupt"
    assert render("ECC error on rank {rank}'s GPU", no_rank, missing="?") == "ECC error on a GPU"
    assert render("OOM killer killed rank {rank} on {node}", no_rank, missing="?") == "OOM killer killed a rank on n1"
    assert render("Rank {rank} waited for rank {source_rank}", no_rank) == "A rank waited for rank 0"
    # With the rank known nothing is reworded.
    assert render("Rank {rank} waited on rank {rank}", {"rank": "3"}) == "Rank 3 waited on rank 3"


def test_a_finding_without_rank_names_none_and_takes_the_rank_of_the_same_line_seen_later():
    engine = run_lines(shipped_engine(), "step 2 loss nan")
    (finding,) = engine.findings
    assert finding.rank is None and finding.title == "loss became nan" and "?" not in finding.remedy
    # The same line again through a rank prefix (torchrun --tee prints it twice): its rank.
    engine = run_lines(shipped_engine(), "step 2 loss nan\n[rank1]: step 2 loss nan")
    (finding,) = engine.findings
    assert finding.rank == 1 and finding.title == "loss became nan on rank 1"
    # Another rank's later line says nothing of who printed the first: no rank is claimed.
    engine = run_lines(shipped_engine(), "step 2 loss nan\n[rank1]: step 3 loss nan")
    (finding,) = engine.findings
    assert finding.rank is None and finding.ranks == [1] and finding.title == "loss became nan"


def test_store_timeout_remedy_without_rank_reads_a_rank():
    diagnosis = diagnose_paths([SAMPLES / "demo/store-connect-timeout.log"], load_catalogue([], include_user=False))
    root = diagnosis.root_cause
    assert root.title == "A rank could not reach the rendezvous store"
    assert "A rank tried for 5000ms" in root.remedy and "?" not in root.remedy


def test_size_format_shows_a_byte_count_as_a_human_size():
    assert render("{b} bytes ({b:size})", {"b": "33762398024"}) == "33762398024 bytes (31.4 GiB)"
    assert render("{b:size}", {"b": "512"}) == "512 bytes"
    assert render("{b:size}", {"b": "1536"}) == "1.5 KiB"
    assert render("{b:size}", {"b": "2.00 GiB"}) == "2.00 GiB"  # not a count: as it is
    assert render("a\n{b:size}", {}) == "a"  # missing: the line is left out like any field


def test_sigterm_to_workers_after_a_user_stop_claims_no_failure():
    stop = ("W1121 10:06:50.886000 5952 site-packages/torch/distributed/elastic/multiprocessing/api.py:1028] "
            "Sending process 5998 closing signal SIGTERM")
    (finding,) = run_lines(shipped_engine(), stop).findings
    assert finding.rule == "torchrun-sigterm-peers"
    assert "After one rank failed" not in finding.remedy
    assert "either because another rank failed or because torchrun itself was stopped" in finding.remedy


def test_segfault_remedy_says_how_to_see_a_crash_that_printed_nothing():
    line = ("E0302 13:05:22.220000 5500 torch/distributed/elastic/multiprocessing/api.py:869] failed "
            "(exitcode: {code}) local_rank: 1 (pid: 5511) of binary: /usr/bin/python3")
    (segv,) = run_lines(shipped_engine(), line.format(code=-11)).findings
    assert "PYTHONFAULTHANDLER=1" in segv.remedy and "ulimit -c unlimited" in segv.remedy
    assert "Its own output" not in segv.remedy
    (failed,) = run_lines(shipped_engine(), line.format(code=1)).findings
    assert "Its own output, just before, says why." in failed.remedy and "PYTHONFAULTHANDLER" not in failed.remedy


@pytest.mark.parametrize("line, shown, hidden", [
    ("RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped.",
     "clip_grad_norm_(error_if_nonfinite=True)", ["Megatron", "Autograd anomaly"]),
    ("RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output.",
     "Autograd anomaly mode found NaN in the 0th output of LogSoftmaxBackward0", ["clip_grad_norm_", "Megatron"]),
    ("AssertionError: Rank 5: found NaN in local grad norm in backward pass before data-parallel communication collective.",
     "Megatron-LM's check found NaN in local grad norm", ["clip_grad_norm_", "Autograd anomaly"]),
])
def test_each_framework_nan_check_explains_only_itself(line, shown, hidden):
    (finding,) = run_lines(shipped_engine(), line).findings
    assert finding.rule == "nan-detected-by-framework" and shown in finding.remedy
    assert not any(text in finding.remedy for text in hidden)


def test_deepspeed_loss_scale_at_minimum_gets_the_fp16_remedy():
    line = "[rank0]: Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run."
    (finding,) = run_lines(shipped_engine(), line).findings
    assert finding.rule == "fp16-loss-scale-at-minimum" and finding.rank == 0
    assert "bf16" in finding.remedy and "min_loss_scale" in finding.remedy and "clip_grad_norm_" not in finding.remedy
