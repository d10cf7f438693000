"""The text report of ``monitor diagnose``: root cause first, then the other findings grouped by
category, a short timeline and any problems with the input.

Every piece of log text goes into ``rich.text.Text`` objects, never through markup, so a log
line holding ``[bold]`` or ``[/]`` prints as written.
"""

from __future__ import annotations

import io
import os
from collections import defaultdict
from dataclasses import replace
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from monitor.diagnosis.advice import advice
from monitor.model import RANK_SOURCES, STOPPED_RULE, Diagnosis, Finding, chronological, who
from monitor.text import safe_text

TIMELINE_ENTRIES = 12
NEW_LINES_SHOWN = 12
EVIDENCE_LINES = 6
# The narrowest width a report is wrapped at ($COLUMNS below it is ignored).
MIN_WIDTH = 40
# The width a report not to be wrapped is measured at: wider than any line it holds.
UNBOUNDED = 1 << 20
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _indented(text: Text, by: int) -> Padding:
    """``text`` indented by ``by`` columns, wrapped lines too."""
    return Padding(text, (0, 0, 0, by), expand=False)


# Findings no log line made have line 0: preflight checks (rule ``preflight-*``, no file), the
# job's exit (an ``exit_code`` field, the log's name as file), samplers and watchers.
def _phase(finding: Finding) -> int:
    """0 before the job started, 1 during it, 2 at its exit: the timeline's order."""
    return {"preflight": 0, "exit": 2}.get(finding.origin, 1)


# Where a finding that no log line made came from, during the job and without a file of its own.
_SOURCES = {"metrics": "the GPU and host metrics", "stall": "the job's silence", "stacks": "the ranks' stacks",
            "flight-recorder": "the flight recorder", "straggler": "the ranks' step times", "model": "the model",
            "checkpoint": "the checkpoint check", "node": "the nodes' records"}


def _where(finding: Finding) -> str:
    """``file:line``, or for a finding no log line made, when it happened or its file."""
    if finding.line > 0:
        return f"{finding.file}:{finding.line}"
    if _phase(finding) == 1 and not finding.file:
        return f"during the job, from {_SOURCES.get(finding.origin, 'the monitor')}"
    return ("before the job started", finding.file, "at exit")[_phase(finding)]


def _root_cause(finding: Finding, confidence: str | None, note: str) -> list[RenderableType]:
    rank = "" if finding.rank is None else f"rank {finding.rank}"
    if rank and finding.rank_source in RANK_SOURCES:
        rank += advice("report-rank-from", source=advice(f"rank-from-{finding.rank_source}"))
    node = f"node {finding.node}: " if finding.node else ""
    label = advice("report-root-cause")
    # "Root cause: " and "根本原因：": a space after the ASCII colon only.
    header = Text.assemble((label + (" " if label[-1:].isascii() else ""), "bold red"), (node + finding.title, "bold"))
    where = " · ".join(part for part in (finding.category, rank, _where(finding), f"rule {finding.rule}") if part)
    parts: list[RenderableType] = [header, _indented(Text(where, style="dim"), 2)]
    if finding.count > 1:
        seen = (advice("report-seen-on", count=str(finding.count), who=ranks) if (ranks := who(finding))
                else advice("report-seen", count=str(finding.count)))
        parts.append(_indented(Text(seen, style="dim"), 2))
    if confidence is not None:
        parts.append(_indented(Text(advice("report-confidence", level=confidence) + (f" ({note})" if note else ""),
                                    style="dim" if confidence == "certain" else "yellow"), 2))
    if finding.evidence:  # a job killed by a signal has no line to show
        parts.append(Text("  " + advice("report-evidence"), style="bold"))
        parts.extend(_indented(Text(line, style="italic"), 4) for line in finding.evidence[:EVIDENCE_LINES])
    if finding.remedy:
        parts.append(Text("  " + advice("report-what-to-do"), style="bold"))
        parts.extend(_indented(Text(line), 4) for line in finding.remedy.splitlines())
    return parts


def _others(findings: list[Finding], root: Finding | None) -> list[RenderableType]:
    others = [f for f in findings if root is None or (f.rule, f.file, f.line) != (root.rule, root.file, root.line)]
    if not others:
        return []
    groups: dict[str, list[Finding]] = defaultdict(list)
    for finding in others:
        groups[finding.category].append(finding)
    parts: list[RenderableType] = [Text(""), Text(advice("report-other-findings"), style="bold")]
    for category, members in groups.items():
        parts.append(Text(f"  {category}", style="bold"))
        for finding in members:
            parts.append(_indented(Text.assemble(
                ("• ", ""), (finding.severity, _SEVERITY_STYLE.get(finding.severity, "")),
                (f" [{finding.role}] ", "dim"), (finding.title, ""),
                (" — " + ", ".join(p for p in (who(finding), f"×{finding.count}", _where(finding), _unsure(finding)) if p)
                 + f" ({finding.rule})", "dim"),
            ), 4))
    return parts


def _unsure(finding: Finding) -> str:
    """``likely``/``weak`` for a finding that is not certain; "" for one that is."""
    return "" if finding.confidence == "certain" else finding.confidence


def _new_since(diagnosis: Diagnosis) -> list[RenderableType]:
    """The lines no good run printed, first printed first, and what changed since it."""
    if diagnosis.against is None:
        return []
    lines = diagnosis.new_lines
    heading = f"New since the last good run ({diagnosis.against}): "
    heading += f"{len(lines)} line{'s' if len(lines) != 1 else ''} it never printed" if lines else "nothing it did not print"
    parts: list[RenderableType] = [Text(""), Text(heading, style="bold")]
    for new in lines[:NEW_LINES_SHOWN]:
        where = ", ".join(p for p in (f"rank {new['rank']}" if new["rank"] is not None else "",
                                       f"x{new['count']}" if new["count"] > 1 else "", f"{new['file']}:{new['line']}") if p)
        parts.append(_indented(Text.assemble((f"{new['level']:<7} ", _SEVERITY_STYLE.get(new["level"], "dim")),
                                             (new["text"].strip(), ""), (f"  ({where})", "dim")), 2))
    if len(lines) > NEW_LINES_SHOWN:
        parts.append(Text(f"  … {len(lines) - NEW_LINES_SHOWN} more (--json lists them all)", style="dim"))
    if diagnosis.changes:
        parts.append(Text("  What changed since then:", style="bold"))
        parts.extend(_indented(Text(change), 4) for change in diagnosis.changes)
    return parts


def _timeline(findings: list[Finding]) -> list[RenderableType]:
    if len(findings) < 2:
        return []
    ordered = sorted(chronological(findings), key=_phase)[:TIMELINE_ENTRIES]  # stable: keeps the order within a phase
    parts: list[RenderableType] = [Text(""), Text(advice("report-timeline"), style="bold")]
    for finding in ordered:
        line = "  ".join(part for part in (_where(finding), who(finding), finding.rule, finding.title) if part)
        parts.append(_indented(Text(line), 2))
    if len(findings) > TIMELINE_ENTRIES:
        parts.append(Text(f"  … {len(findings) - TIMELINE_ENTRIES} more", style="dim"))
    return parts


def build(diagnosis: Diagnosis, exit_code: int | None = None) -> Group:
    """The report; ``exit_code``: how the job ended, when the report is of a job that was run
    (``monitor run``), so that a clean one says so rather than counting files."""
    diagnosis = replace(
        diagnosis, root_cause=diagnosis.root_cause and diagnosis.root_cause.for_display(),
        findings=[finding.for_display() for finding in diagnosis.findings],
        problems=[safe_text(problem) for problem in diagnosis.problems],
        notes=[safe_text(note) for note in diagnosis.notes],
        against=safe_text(diagnosis.against) if diagnosis.against is not None else None,
        new_lines=[{**new, "text": safe_text(new["text"]), "file": safe_text(new["file"])} for new in diagnosis.new_lines],
        changes=[safe_text(change) for change in diagnosis.changes],
    )
    parts: list[RenderableType] = [Text(note, style="dim") for note in diagnosis.notes]
    if diagnosis.root_cause is not None:
        parts.extend(_root_cause(diagnosis.root_cause, diagnosis.confidence, safe_text(diagnosis.confidence_note)))
    elif diagnosis.failed:
        parts.append(Text("Errors found, but none is a root cause on its own:", style="bold red"))
    elif stop := next((f for f in diagnosis.findings if f.rule == STOPPED_RULE), None):
        # A stop the user asked for is no failure, but "No failure found" above it reads as if the
        # stop went unseen.
        parts.append(Text(f"{stop.title}; no failure before it.", style="bold yellow"))
    elif exit_code == 0:
        parts.append(Text("The job exited 0 and its log shows no failure.", style="bold green"))
    else:
        parts.append(Text(advice("report-no-failure", files=str(len(diagnosis.files))), style="bold green"))
        if diagnosis.empty:
            every = "it is" if len(diagnosis.files) == 1 else f"{len(diagnosis.empty)} of them are"
            shown = ", ".join(safe_text(name) for name in diagnosis.empty[:3]) + (" ..." if len(diagnosis.empty) > 3 else "")
            parts.append(Text(f"  but {every} empty: {shown}", style="yellow"))
    parts.extend(_others(diagnosis.findings, diagnosis.root_cause))
    parts.extend(_new_since(diagnosis))
    parts.extend(_timeline(diagnosis.findings))
    if diagnosis.problems:
        parts.append(Text(""))
        parts.append(Text("Problems reading the input", style="bold yellow"))
        parts.extend(_indented(Text(problem), 2) for problem in diagnosis.problems)
    return Group(*parts)


def verdict(diagnosis: Diagnosis) -> list[str]:
    """The root cause, its rank and where, and the first line of what to do, in two lines for
    the end of a long output (``monitor run``), where the report's top has scrolled off by then;
    [] when nothing failed."""
    root = diagnosis.root_cause and diagnosis.root_cause.for_display()
    if root is None:
        return ["errors found, but none is a root cause on its own (the report above lists them)"] if diagnosis.failed else []
    ranks = who(root)
    named = root.title if not ranks or "rank" in root.title else f"{root.title} ({ranks})"
    lines = [f"root cause: {named} " + (f"at {_where(root)}" if root.line > 0 else f"({_where(root)})")]
    if first := next((line.strip() for line in root.remedy.splitlines() if line.strip()), ""):
        lines.append(f"what to do first: {first}")
    return lines


def render_jobs(jobs: list[Diagnosis], files: int) -> str:
    """Several jobs' diagnoses (a folder of unrelated logs), each read on its own: one line
    saying so, then each failed job's name and verdict, then the jobs with no failure, in one
    line. Plain text, each entry one line."""
    failed = [job for job in jobs if job.failed]
    lines = [f"These {files} files look like {len(jobs)} separate jobs (nothing in their names or folders ties "
             f"them together), so each is diagnosed on its own; name one for its full report, or add --one-job "
             f"to read them as one job."]
    for job in failed:
        lines += ["", _job_name(job.files)] + ["  " + line for line in verdict(job)]
    if clean := [_job_name(job.files) for job in jobs if not job.failed]:
        lines += ["", f"No failure found in {len(clean)} of them: " + ", ".join(clean)]
    if problems := [problem for job in jobs for problem in job.problems]:
        lines += ["", "Problems reading the input"] + ["  " + problem for problem in problems]
    return "".join(safe_text(line) + "\n" for line in lines)


def _job_name(files: list[str]) -> str:
    """A job by its files: the one file, or the folder they share and how many."""
    if len(files) == 1:
        return files[0]
    return f"{os.path.commonpath(files)}{os.sep} ({len(files)} files)"


def render_text(diagnosis: Diagnosis, width: int | None = None, exit_code: int | None = None) -> str:
    """The report as plain text (no colour codes, no trailing spaces), wrapped at ``width``;
    None: not wrapped at all, each entry one line (for a pipe, ``grep``, ``less``)."""
    report = build(diagnosis, exit_code)
    buffer = io.StringIO()
    console = Console(file=buffer, width=width or MIN_WIDTH, color_system=None, highlight=False, emoji=False)
    if width is None:  # as wide as its longest line: a measure not bounded by the console's width
        console.width = max(MIN_WIDTH, console.measure(report, options=console.options.update_width(UNBOUNDED)).maximum)
    console.print(report)
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def write_report(diagnosis: Diagnosis, stream: TextIO, exit_code: int | None = None) -> None:
    """The report on ``stream``: styled and fitted to the terminal when it is one; else plain
    text (a file, a pipe, CI logs), without the spaces rich pads lines with, not wrapped unless
    ``$COLUMNS`` asks for a width. ``exit_code``: see ``build``."""
    if getattr(stream, "isatty", lambda: False)():  # a writer that is no file is none
        Console(file=stream, highlight=False, emoji=False).print(build(diagnosis, exit_code))
        return
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) >= MIN_WIDTH else None
    stream.write(render_text(diagnosis, width, exit_code))
