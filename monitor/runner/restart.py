"""The restart policy of ``monitor run --restart N``: retry only failures a retry can fix.

A retry on the same machines helps when the failure came from outside the program and may not
happen again: a flaky link (NCCL/Gloo network errors, collective timeouts with no earlier root),
a rendezvous that timed out while nodes were coming up, a node lost or preempted. It never helps
when the same code, data and hardware will fail the same way: out of memory, a corrupt
checkpoint, a missing libuv, a W&B login, a device-side assert, a Python exception, NaN, a full
disk. A GPU hardware fault is not retried either: ``monitor run`` restarts on the same node, so
the retry meets the same GPU; it needs the node drained or the GPU reset. A failure we cannot
explain is not retried: a blind retry of a deterministic bug only burns GPU hours. A timeout
(NCCL or Gloo) is retried once: a stalled link does not usually stall twice in a row, while a
rank that takes another code path or deadlocks does it every time.
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.model import STOPPED, Diagnosis

RETRYABLE = {
    "nccl_error": "NCCL reported a communication error (flaky link or a peer that went away)",
    "nccl_timeout": "a collective timed out with no earlier failure on any rank (network stall)",
    "gloo_timeout": "a Gloo collective timed out with no earlier failure on any rank",
    "rendezvous_timeout": "the ranks could not meet at the rendezvous (nodes slow to come up)",
    "slurm_event": "the scheduler ended the step (node failure, preemption, requeue)",
}
NOT_RETRYABLE = {
    "cuda_oom": "out of GPU memory happens again with the same batch size and model",
    "host_oom": "out of host memory happens again with the same settings",
    "corrupt_checkpoint": "the same corrupt checkpoint would be loaded again",
    "libuv": "this PyTorch build lacks libuv; a retry asks for it again",
    "wandb": "W&B credentials do not fix themselves",
    "cuda_assert": "a device-side assert or illegal access is a bug in the code or the data",
    "python_exception": "an uncaught Python exception recurs on the same code and data",
    "nan_loss": "the loss diverges again from the same checkpoint and settings",
    "gpu_hardware": "a retry on this node meets the same faulty GPU: drain the node or reset the GPU",
    "disk_full": "the disk is still full",
    "shm_exhausted": "/dev/shm is still too small",
    "port_in_use": "the port is still taken: choose another one",
    "node_failure": "a node of the job went silent: resubmit without it (--exclude)",
}
# Retried once only: a second timeout in a row means a hang in the program, not the network.
ONCE = {"nccl_timeout", "gloo_timeout"}
# Scheduler reasons that a retry in place cannot fix.
_FINAL_SLURM_REASONS = ("TIME LIMIT", "CANCELLED BY", "TIMED-OUT")


@dataclass(frozen=True)
class RestartDecision:
    retry: bool
    reason: str

    def to_json(self) -> dict:
        return {"retry": self.retry, "reason": self.reason}


def decide(diagnosis: Diagnosis, exit_code: int, attempt: int, max_restarts: int,
           stopped_by_user: bool = False, previous_category: str | None = None) -> RestartDecision:
    """Whether attempt number ``attempt`` (1-based) that ended with ``exit_code`` is retried;
    ``previous_category`` is the root cause's category of the attempt before, if it failed."""
    if exit_code == 0:
        return RestartDecision(False, "the job succeeded")
    if stopped_by_user:
        return RestartDecision(False, "the job was stopped on request")
    if attempt > max_restarts:
        return RestartDecision(False, f"no restarts left ({max_restarts} allowed)")
    root = diagnosis.root_cause
    if root is None or root.category == "launcher":
        return RestartDecision(False, f"no retryable cause found for exit code {exit_code}; "
                                      "a retry of an unexplained failure is not attempted")
    if root.category == STOPPED:
        return RestartDecision(False, f"{root.title}: whoever stopped it meant it (a preempted SLURM "
                                      "job is requeued by the scheduler, with --requeue)")
    title = f"{root.category} ({root.title})"
    if root.category == "slurm_event":
        why = " ".join(root.fields.values()).upper() + " " + root.title.upper()
        if any(reason in why for reason in _FINAL_SLURM_REASONS):
            return RestartDecision(False, f"{title}: a retry in place does not give more time "
                                          "or undo a cancellation")
    if not root.retryable:
        return RestartDecision(False, f"{title}: not retried, a retry meets the same cause")
    if root.category in ONCE and previous_category == root.category:
        return RestartDecision(False, f"{title}: the same timeout ended the previous attempt too; "
                                      "a hang that repeats is in the program, not the network")
    if root.category in RETRYABLE:
        return RestartDecision(True, f"{title}: {RETRYABLE[root.category]}; restart "
                                     f"{attempt} of {max_restarts}")
    why = NOT_RETRYABLE.get(root.category, "not known to be transient")
    return RestartDecision(False, f"{title}: not retried, {why}")
