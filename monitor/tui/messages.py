"""Messages the app's thread workers post; handlers on the app update the widgets."""

from __future__ import annotations

from textual.message import Message

from monitor.metrics.model import Sample
from monitor.straggler.model import Scores
from monitor.session.feeds import LogBatch


class LogsArrived(Message):
    def __init__(self, batch: LogBatch) -> None:
        super().__init__()
        self.batch = batch


class MetricsSampled(Message):
    def __init__(self, sample: Sample, scores: Scores | None = None) -> None:
        super().__init__()
        self.sample = sample
        self.scores = scores  # the straggler scores, where the job's ranks are sampled


class EarlierLines(Message):
    """Lines from before the first shown, read back from files opened at their end."""

    def __init__(self, lines: list) -> None:
        super().__init__()
        self.lines = lines


class LinesAround(Message):
    """Lines around a finding's line that lay before those shown, read back from its file."""

    def __init__(self, finding, lines: list) -> None:
        super().__init__()
        self.finding = finding
        self.lines = lines
