"""PyTorch's flight recorder without torch: turning it on for a job (``variables.py``), asking
a running job for a dump (``pipes.py``), reading dumps safely (``dumps.py``) and matching the
collectives of every rank to name the rank that never joined and the calls that differ
(``match.py``). ``serve.py`` is the one module meant to run inside a training job.
"""
