"""GPU (NVML) and host (psutil) metrics, the job's process tree, history and metric findings.

``sampler.Sampler`` takes samples (``model.Sample``), ``history.History`` keeps them in fixed
memory, ``signals.SignalDetector`` turns them into ``Finding``s, ``record`` writes and replays
them. Plain Python: nothing here imports textual or torch.
"""
