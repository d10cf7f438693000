"""The end of a run: the engine's diagnosis of the recorded logs plus what only the runner knows
(how the job ended, preflight results, checkpoint checks), as one ``Diagnosis``."""

from __future__ import annotations

from pathlib import Path

from monitor.diagnosis.model import STOPPED, Diagnosis, Finding
from monitor.runner.processes import signal_name


_SIGNAL_REMEDIES = {
    "SIGKILL": "Something outside the job killed it. Check the kernel log (`journalctl -k` or "
               "`dmesg`) for 'Out of memory: Killed process', and the scheduler's accounting "
               "(`sacct -j $SLURM_JOB_ID`) for a time or memory limit.",
    "SIGSEGV": "A native crash: run with `python -X faulthandler` to get the stack, and check "
               "for mismatched CUDA/NCCL/driver versions.",
    "SIGABRT": "An abort, usually a C++ exception (NCCL watchdog, CUDA error): look for "
               "'terminate called after throwing' in the log.",
    "SIGBUS": "Often /dev/shm too small for DataLoader workers: raise the container's "
              "--shm-size or use fewer workers.",
}


def load_catalogue(extra_dirs: list[Path], warn) -> object | None:
    """The rule catalogue, or None when the diagnosis engine is not available.

    A launch never fails over rules: a broken extra rule directory falls back to the shipped
    catalogue, a broken engine to the runner's own findings; ``warn`` gets one line about it."""
    try:
        from monitor.diagnosis.catalogue import load_catalogue as load
    except ImportError:
        return None
    for dirs in ([*extra_dirs], []) if extra_dirs else ([],):
        try:
            return load(dirs)
        except Exception as exc:  # a rule file typo must not stop the training job
            warn(f"rules not loaded ({type(exc).__name__}: {exc})")
    return None


def exit_finding(log_path: Path, exit_code: int, stop_signal: str | None) -> Finding | None:
    """How the job ended, as a finding (None for a clean exit)."""
    if exit_code == 0:
        return None
    name = signal_name(exit_code)
    if stop_signal:
        title = f"Stopped on request ({stop_signal} sent to every process of the job), exit code {exit_code}"
        return _finding("job-stopped", "launcher", "warning", title, log_path, exit_code, name,
                        "The job was stopped on request; nothing to fix.")
    if name:
        title = f"The job was ended by {name} (exit code {exit_code})"
        remedy = _SIGNAL_REMEDIES.get(name, "Find out who sent the signal (scheduler, OOM killer, a user).")
    else:
        title = f"The job exited with code {exit_code}"
        remedy = "See the first error in the log above the exit."
    return _finding("job-exit", "launcher", "error", title, log_path, exit_code, name, remedy)


def _finding(rule: str, category: str, severity, title: str, log_path: Path, exit_code: int,
             name: str | None, remedy: str) -> Finding:
    fields = {"exit_code": str(exit_code)}
    if name:
        fields["signal"] = name
    return Finding(rule=rule, category=category, severity=severity, role="root", title=title,
                   rank=None, ranks=[], file=str(log_path), line=0, count=1, evidence=[],
                   fields=fields, remedy=remedy)


def diagnose_run(paths: list[Path], catalogue, extra: list[Finding]) -> Diagnosis:
    """Diagnose the run's log files and add the runner's own findings.

    The engine's root cause wins; the exit finding is the root cause only when the engine found
    none (a bare 'exited with 1' says less than 'CUDA out of memory on rank 3'). After a stop on
    request, the launcher's own report of that stop is no failure (see ``_note_forwarded_stop``)."""
    files = [str(p) for p in paths]
    diagnosis = Diagnosis(root_cause=None, findings=[], files=files)
    if catalogue is None:
        diagnosis.problems.append("diagnosis engine not available: only the runner's findings are shown")
    else:
        try:
            from monitor.diagnosis.diagnose import diagnose_paths
            diagnosis = diagnose_paths([str(p) for p in paths], catalogue)
        except Exception as exc:  # report what we know rather than nothing
            diagnosis.problems.append(f"diagnosis failed ({type(exc).__name__}: {exc})")
    if any(f.rule == "job-stopped" for f in extra):
        _note_forwarded_stop(diagnosis)
    for finding in extra:
        finding.seq = len(diagnosis.findings)
        if diagnosis.root_cause is not None and finding.rule == "job-exit":
            finding.role = "confirm"  # the exit only confirms the failure the engine explained
        diagnosis.findings.append(finding)
    if diagnosis.root_cause is None:
        diagnosis.root_cause = next(
            (f for f in extra if f.severity == "error" and f.role == "root"), None)
    return diagnosis


def _note_forwarded_stop(diagnosis: Diagnosis) -> None:
    """The runner forwarded a stop request to the job, so the launcher's report of a stop
    (category ``stopped``: torchrun's "Received 15 death signal") is that request arriving, not
    someone outside stopping the job: it is kept as information and is no root cause; the
    runner's 'Stopped on request' says it."""
    for finding in diagnosis.findings:
        if finding.category == STOPPED:
            finding.severity = "info"
            finding.title = "the launcher received the stop request and stopped its workers"
            finding.remedy = ("This is the stop request that monitor run forwarded to the job (see "
                              "'Stopped on request'), not a failure.")
    if diagnosis.root_cause is not None and diagnosis.root_cause.category == STOPPED:
        diagnosis.root_cause = None  # every other error the engine saw came after it


def write(diagnosis: Diagnosis, stream) -> None:
    """The text report on ``stream`` (fitted to the terminal when it is one). A broken renderer
    must not cost the user the end of the run, so the plain form stands in for it."""
    try:
        from monitor.diagnosis.report import write_report
        write_report(diagnosis, stream)
    except Exception:
        stream.write(_render_plain(diagnosis))
    stream.flush()


def _render_plain(diagnosis: Diagnosis) -> str:
    lines = []
    root = diagnosis.root_cause
    lines.append(f"Root cause: {root.title}" if root else "No failure found.")
    if root and root.remedy:
        lines.append(f"  What to do: {root.remedy.strip()}")
    for finding in diagnosis.findings:
        if finding is not root:
            lines.append(f"[{finding.severity}] {finding.title}")
    lines.extend(f"problem: {p}" for p in diagnosis.problems)
    return "\n".join(lines)
