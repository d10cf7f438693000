"""monitor: watch multi-GPU training jobs live and explain why they failed."""

__version__ = "0.1.0"
