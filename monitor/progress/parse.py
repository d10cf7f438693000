"""Recognising progress in one log line, in the formats training scripts commonly print.

Covered: HF Trainer dicts (``{'loss': 2.1, 'epoch': 0.5}``), tqdm bars (``45%|███ | 450/1000
[01:23<01:42, 5.38it/s, loss=0.23]``, which is also what Lightning prints), Megatron
(``iteration 100/ 5000 | ... | lm loss: 7.1E+00``), DeepSpeed (``steps: 10 loss: 2.3 ...
samples/sec: 100``) and free-form ``step 100 loss 2.34`` / ``iter 100: loss 2.3`` /
``Step 100/1000, loss=2.3``. Every line of a job passes through here, so a cheap keyword test
comes first and most lines never reach the field patterns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from monitor.formats import progress_patterns

MAX_PARSED = 1024
# The line shapes are data: ``formats.toml``, ``[[progress]]`` (with samples).
_PATTERNS = progress_patterns()
(_KEYWORDS, _TQDM, _LOSS, _STEP, _EPOCH, _NAMED_THROUGHPUT, _UNIT, _KEYED_BEFORE, _VALUE_AFTER, _NOT_PROGRESS,
 _TOTAL_KEY, _METRIC) = (_PATTERNS[name] for name in (
    "keywords", "tqdm", "loss", "step", "epoch", "named_throughput", "rate_unit", "keyed_before", "value_after",
    "not_progress", "total_key", "metric"))
_NUMBER_CHARS = frozenset("0123456789.eE+-")
LONGEST_NUMBER = 24


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """What one line says about progress; fields the line does not mention are None."""

    step: int | None = None
    total: int | None = None
    epoch: float | None = None
    loss: float | None = None
    throughput: float | None = None
    # "it/s", "samples/s" or "tokens/s" (s/it is turned into it/s).
    throughput_unit: str | None = None

    @property
    def loss_is_finite(self) -> bool:
        return self.loss is None or math.isfinite(self.loss)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _number_before(text: str, end: int) -> float | None:
    """The number that ends just before ``end`` (spaces allowed between), as in "12.5 it/s"."""
    while end > 0 and text[end - 1] == " ":
        end -= 1
    start = end
    while start > 0 and end - start < LONGEST_NUMBER and text[start - 1] in _NUMBER_CHARS:
        start -= 1
    digits = text[start:end].lstrip("eE+-.")
    return _number(digits) if digits and digits[0].isdigit() else None


def _throughput(text: str, lower: str) -> tuple[float | None, str | None]:
    match = None
    if "per_second" in lower or "/sec" in lower:
        match = _NAMED_THROUGHPUT.search(text)
    if match:
        value, unit = _number(match.group("value")), match.group("unit").lower()
    elif "/s" in lower or "s/it" in lower:
        unit_match = _UNIT.search(text)
        if not unit_match:
            return None, None
        unit = unit_match.group("unit").lower()
        value = _number_before(text, unit_match.start())
        # "tokens/s 12345" names its value after the unit: in "grad_norm 0.469 tokens/s 12345" the
        # number before it is another key's value ("12345 tokens/s 16 GPUs" keeps the one before).
        if value is None or _KEYED_BEFORE.search(text, 0, unit_match.start()):
            after = _VALUE_AFTER.match(text, unit_match.end())
            if after:
                value = _number(after.group("value"))
    else:
        return None, None
    if value is None:
        return None, None
    if unit == "s/it":
        return (1.0 / value if value > 0 else None), "it/s"
    if "tok" in unit:
        return value, "tokens/s"
    if "sample" in unit:
        return value, "samples/s"
    return value, "it/s"


def parse_progress(text: str) -> ProgressEvent | None:
    """The progress a line reports, or None when it reports none."""
    # Progress is reported in short lines; a huge line (a dumped tensor) is not read past this.
    text = text[:MAX_PARSED]
    if not _KEYWORDS.search(text):
        return None
    if _NOT_PROGRESS.search(text):
        return None
    lower = text.lower()
    step = total = None
    epoch = loss = None
    # Cheap substring tests decide which patterns can match at all.
    tqdm = _TQDM.search(text) if "%|" in text else None
    if tqdm:
        step, total = int(tqdm.group("step")), int(tqdm.group("total"))
        if tqdm.group("epoch") is not None:
            epoch = float(tqdm.group("epoch"))
    loss_match = _LOSS.search(text) if "loss" in lower else None
    if loss_match:
        loss = _number(loss_match.group("loss"))
    config_total = None
    if step is None:
        for total_match in _TOTAL_KEY.finditer(text) if "=" in text else ():
            config_total = int(total_match.group("total"))
        if config_total is not None:
            # Blanked so that the step pattern does not read the total as the current step.
            text = _TOTAL_KEY.sub(lambda match: " " * len(match.group(0)), text)
        step_match = _STEP.search(text)
        if step_match:
            step = int(step_match.group("step"))
            if step_match.group("total"):
                total = int(step_match.group("total"))
    if epoch is None and "epoch" in lower:
        epoch_match = _EPOCH.search(text)
        if epoch_match:
            epoch = float(epoch_match.group("epoch"))
    throughput, unit = _throughput(text, lower)
    if step is not None and not tqdm and loss is None and throughput is None and total is None:
        # A bare step number ("step 3: the batch has 33 rows") is not progress without a metric beside it.
        if not _METRIC.search(text):
            step = None
    if step is None and loss is None and throughput is None:
        # An epoch alone ("Epoch 3 finished") is not worth a redraw, and "epoch" appears in prose;
        # a configuration line still tells the total.
        return ProgressEvent(total=config_total) if config_total is not None else None
    return ProgressEvent(step=step, total=total if total is not None else config_total, epoch=epoch, loss=loss,
                         throughput=throughput, throughput_unit=unit)
