"""The end of a run: how the job ended, as a finding for the job session, and the end report."""

from __future__ import annotations

from pathlib import Path

from monitor.diagnosis.advice import advice
from monitor.model import STOPPED_RULE, Category, Diagnosis, Finding
from monitor.runner.processes import signal_name


# Advice for the signals that end jobs most often (rules/advice.toml).
_SIGNAL_ADVICE = {"SIGKILL": "exit-sigkill", "SIGSEGV": "exit-sigsegv", "SIGABRT": "exit-sigabrt", "SIGBUS": "exit-sigbus"}


def exit_finding(log_path: Path, exit_code: int, stop_signal: str | None, killed: bool = False) -> Finding | None:
    """How the job ended, as a finding (None for a clean exit). ``killed``: the stop escalated to
    SIGKILL (the grace period ran out, or a second stop request)."""
    if exit_code == 0:
        return None
    name = signal_name(exit_code)
    if stop_signal:
        if killed:
            title = advice("title-exit-stopped-killed", signal=stop_signal, exit_code=str(exit_code))
        else:
            title = advice("title-exit-stopped", signal=stop_signal, exit_code=str(exit_code))
        return _finding(STOPPED_RULE, "launcher", "warning", title, log_path, exit_code, name,
                        advice("exit-stopped"))
    if name:
        title = advice("title-exit-signal", signal=name, exit_code=str(exit_code))
        remedy = advice(_SIGNAL_ADVICE.get(name, "exit-other-signal"), shm=advice("shm"))
    else:
        title = advice("title-exit-code", exit_code=str(exit_code))
        remedy = advice("exit-code")
    return _finding("job-exit", "launcher", "error", title, log_path, exit_code, name, remedy)


def _finding(rule: str, category: str, severity, title: str, log_path: Path, exit_code: int,
             name: str | None, remedy: str) -> Finding:
    fields = {"exit_code": str(exit_code)}
    if name:
        fields["signal"] = name
    return Finding(rule=rule, category=Category(category), severity=severity, role="root", title=title,
                   file=str(log_path), fields=fields, remedy=remedy, origin="exit",
                   confidence="weak", confidence_note=advice("confidence-exit"))


def write(diagnosis: Diagnosis, stream, exit_code: int | None = None) -> None:
    """The text report on ``stream`` (fitted to the terminal when it is one) of a job that exited
    with ``exit_code``. A broken renderer must not cost the user the end of the run, so the
    plain form stands in for it."""
    try:
        from monitor.diagnosis.report import write_report
        write_report(diagnosis, stream, exit_code)
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
