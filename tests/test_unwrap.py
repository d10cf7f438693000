"""Pastes hard-wrapped by a terminal (monitor/logs/unwrap.py): the pieces are joined again before
the rules read them, and logs that only look like it (one format repeated at one length, frames
and their source lines, a box drawn around a traceback, a capture padded with spaces) are left as
they are."""

from __future__ import annotations

from pathlib import Path

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.logs.unwrap import Wrap, unwrap, wrap_of
from monitor.model import LogLine

# Long lines a job prints beside its error, as wide as a terminal wraps.
CONTEXT = [
    "node1:41003:41103 [3] NCCL INFO comm 0x5581a0 rank 3 nranks 8 cudaDev 3 nvmlDev 3 busId 30000 commId "
    "0x9f1c2d3e4f5a6b7c - Init COMPLETE",
    "/opt/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:92: UserWarning: None of the inputs have "
    "requires_grad=True. Gradients will be None",
]


def _terminal(lines: list[str], width: int) -> str:
    """``lines`` as a terminal ``width`` columns wide shows them, copied out: cut every ``width``."""
    return "".join("\n".join(line[i:i + width] for i in range(0, len(line), width)) + "\n" for line in lines)


def _lines(text: str) -> list[LogLine]:
    return [LogLine("paste.log", n, t) for n, t in enumerate(text.splitlines(), start=1)]


def test_every_rules_example_is_found_in_a_paste_from_an_80_column_terminal(tmp_path: Path) -> None:
    catalogue = load_catalogue(include_user=False)
    log = tmp_path / "paste.log"
    missed, tried = [], 0
    for rule in catalogue.rules:
        for example in rule.examples_match:
            example = example.strip()
            if "\n" in example or len(example) <= 80:
                continue
            tried += 1
            log.write_text(_terminal([*CONTEXT, example], 80))
            if rule.id not in [f.rule for f in diagnose_paths([log], catalogue).findings]:
                missed.append((rule.id, example[:100]))
    assert tried > 100 and not missed, missed


def test_the_pieces_are_one_line_again_numbered_as_its_first() -> None:
    error = ("torch.distributed.DistStoreError: use_libuv was requested but PyTorch was built without libuv "
             "support, run with USE_LIBUV=0 to disable it.")
    text = _terminal(["[rank0]: step 1 loss 2.31", *CONTEXT, error, "[rank0]: exiting"], 80)
    wrap = wrap_of(text.encode())
    assert wrap == Wrap(80)
    joined = list(unwrap(_lines(text), wrap))
    assert [line.text for line in joined] == ["[rank0]: step 1 loss 2.31", *CONTEXT, error, "[rank0]: exiting"]
    assert [line.line for line in joined] == [1, 2, 4, 6, 8]


def test_a_padded_capture_joins_only_the_lines_whose_last_column_is_written() -> None:
    width = 70
    long = "RuntimeError: CUDA error: uncorrectable ECC error encountered while copying the model to cuda:3"
    other = "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node-7]:29500 (errno: 111)"
    rows = ["Epoch 1: loss 2.31", "Epoch 2: loss 2.12", long[:width], long[width:], "Epoch 3: loss 2.05",
            other[:width], other[width:], "Traceback (most recent call last):"]
    text = "".join(row.ljust(width) + "\n" for row in rows)
    wrap = wrap_of(text.encode())
    assert wrap == Wrap(width, padded=True)
    texts = [line.text.rstrip() for line in unwrap(_lines(text), wrap)]
    assert texts == ["Epoch 1: loss 2.31", "Epoch 2: loss 2.12", long, "Epoch 3: loss 2.05", other,
                     "Traceback (most recent call last):"]


def test_logs_that_only_look_wrapped_are_left_alone() -> None:
    assert_device = ("/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1141: indexSelectLargeIndex: block: [19,0,0], "
                     "thread: [{t},0,0] Assertion `srcIndex < srcSelectDimSize` failed.")
    repeated = "\n".join(assert_device.format(t=t) for t in range(90, 99)) + "\n"
    glog_and_logging = "".join(
        f"E0526 15:34:12.01{t}717 1405695259461{t} basic_session_run_hooks.py:760] Model diverged with loss = NaN.\n"
        "ERROR:tensorflow:Model diverged with loss = NaN.\n" for t in range(4))
    frames = "".join(
        f'  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/engine_{t}.py", line 45{t}, in step\n'
        f"    self._take_model_step(lr_kwargs, block_eigenvalue={t})\n" for t in range(4))
    box = "".join("│ " + f"/home/u/train.py:{t} in main".ljust(60) + " │\n" for t in range(6)) + \
        "╰" + "─" * 62 + "╯\nAssertionError: Check batch related parameters.\n"
    # IPython's ruler and header are its 75 columns wide, and the longest lines of a short paste.
    notebook = ("-" * 75 + "\n" + "ValueError".ljust(42) + "Traceback (most recent call last)\n"
                "Cell In[3], line 5\n----> 5 train(model)\n\nValueError: bad batch\n")
    for text in (repeated, glog_and_logging, frames, box, notebook):
        assert wrap_of(text.encode()) is None, text[:80]


def test_one_long_line_is_no_sign_of_a_wrap() -> None:
    text = "x" * 200 + "\nshort line\n"
    assert wrap_of(text.encode()) is None
