"""Training progress read from log lines: step, epoch, loss, throughput, ETA (plain Python)."""

from monitor.progress.parse import ProgressEvent, parse_progress
from monitor.progress.tracker import ProgressState, ProgressTracker

__all__ = ["ProgressEvent", "ProgressState", "ProgressTracker", "parse_progress"]
