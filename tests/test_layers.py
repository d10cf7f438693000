"""The layers point one way (docs/architecture.md): each package imports only the ones below it,
and every core package runs without the UI.

Read from the source (every ``import monitor.X`` and ``from monitor.X import``, also inside
functions), so a lazy import cannot hide a wrong-way dependency.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import monitor

ROOT = Path(monitor.__file__).parent

# What each package may import (besides itself). Bottom first.
ALLOWED = {
    "text": set(),
    "units": set(),
    "untrusted": set(),  # the bounded reader process: its child starts with the standard library alone
    "model": {"text"},
    "formats": set(),  # log formats as data (formats.toml)
    "progress": {"formats"},
    "logs": {"text", "model", "files", "progress", "formats"},  # progress: the furthest step a run reached
    "diagnosis": {"text", "model", "units", "logs", "files", "formats", "progress"},  # files: the learned model written whole; progress: the formats' samples checked
    "metrics": {"text", "model", "units", "files", "diagnosis", "logs"},  # diagnosis.advice: remedies as data; logs.nodes: this node's name; files: a run's recording created new
    "checkpoints": {"text", "model", "units", "diagnosis", "untrusted"},  # diagnosis.advice: remedies as data
    "files": set(),
    "stacks": {"text", "model", "units", "files", "diagnosis", "metrics"},  # secrets masked; ranks as metrics.job reads them
    "flight_recorder": {"text", "model", "stacks", "diagnosis", "untrusted"},  # is_user_code: one idea of user code; advice
    "evidence": {"text", "model", "stacks", "flight_recorder", "diagnosis", "logs"},  # a job folder's nodes
    "straggler": {"text", "model", "stacks", "metrics", "progress", "diagnosis"},  # place_of: one reader of stacks; advice
    "collectives": {"units", "files"},  # files: a measurement read back bounded; exercise.py, run inside the job's ranks, imports the standard library and torch only
    "session": {"text", "model", "units", "files", "logs", "diagnosis", "metrics", "stacks", "flight_recorder",
                "progress", "straggler", "evidence"},  # evidence: what a finished recorded run kept beside its log  # progress: the status the Prometheus endpoint serves
    "runner": {"text", "model", "units", "files", "logs", "diagnosis", "metrics", "checkpoints", "session",
               "flight_recorder", "straggler", "collectives"},
    "demo": {"text", "model", "units", "logs", "metrics", "flight_recorder"},
    # The UI sits on the core; only the commands (and the CLI above them) may reach it.
    "tui": {"text", "model", "units", "formats", "logs", "diagnosis", "metrics", "session", "progress", "demo", "runner",
            "stacks", "files", "straggler"},  # files: the findings exported from the screen
}
CORE = [package for package in ALLOWED if package != "tui"]
# The demo's torch job and the script that records it: they are torch programs, not the monitor.
TORCH_PROGRAMS = {"monitor.demo.train", "monitor.demo.recording.make_recording"}


def imported_packages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found.update(name.split(".")[1] for name in names if name.startswith("monitor."))
    return found


def package_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return parts[0]


def test_every_package_imports_only_the_layers_below_it():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        package = package_of(path)
        if package not in ALLOWED:
            continue  # commands, cli, __main__: the top, which wires everything together
        for imported in imported_packages(path) - {package} - ALLOWED[package]:
            wrong.append(f"{path.relative_to(ROOT.parent)} imports monitor.{imported}")
    assert wrong == []


def test_the_runner_never_imports_the_ui():
    # The screen is passed in (supervise.run(..., present)): a runner that imported it would
    # break `monitor run --headless` on a machine without textual.
    users = [str(p.relative_to(ROOT.parent)) for p in ROOT.rglob("*.py")
             if package_of(p) in CORE and "tui" in imported_packages(p)]
    assert users == []


def test_every_core_module_imports_without_textual_or_torch():
    modules = sorted(
        info.name for info in pkgutil.walk_packages([str(ROOT)], "monitor.")
        if info.name.split(".")[1] in CORE and info.name not in TORCH_PROGRAMS
    )
    assert {"monitor.metrics.sampler", "monitor.session.job_session", "monitor.runner.supervise",
            "monitor.model", "monitor.text", "monitor.diagnosis.root_cause"} <= set(modules)
    code = ("import sys, importlib\n"
            f"for name in {modules!r}:\n    importlib.import_module(name)\n"
            "print(sorted(m for m in ('textual', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
