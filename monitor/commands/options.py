"""Options several commands share, declared once: the rule directories, and the stall threshold.

``add_rules_options(parser)`` declares ``--rules DIR`` (repeatable) and ``--no-user-rules``;
``load_rules(args, extra=())`` loads the catalogue they name or raises ``UsageError`` with the
rule loader's one line (``file:line: rule <id>: message``): every command fails the same way on a
rule file with a typo, ``monitor run`` included, before anything is launched.
"""

from __future__ import annotations

import argparse
import math
from typing import TypedDict


def add_rules_options(parser: argparse.ArgumentParser) -> None:
    add_rule_dirs_options(parser)
    parser.add_argument("--model", metavar="FILE",
                        help="the second opinion's model, trained with `monitor rules learn`, used where the rules "
                             "are unsure ('none': the rules alone; default: the last rule directory's model.json)")
    add_language_option(parser)


def add_rule_dirs_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rules", action="append", default=[], metavar="DIR",
                        help="add a directory of rule files (repeatable)")
    parser.add_argument("--no-user-rules", action="store_true", help="ignore ~/.config/monitor/rules")


def add_language_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lang", choices=("en", "zh"), default=None,
                        help="the language of titles and remedies (default: zh when LC_ALL, LC_MESSAGES or LANG "
                             "says Chinese, else en); names, variables and commands stay as they are")


def language(args: argparse.Namespace, env=None) -> str:
    """``--lang``, else the locale's (LC_ALL, then LC_MESSAGES, then LANG: the first one set)."""
    import os

    if getattr(args, "lang", None):
        return args.lang
    env = os.environ if env is None else env
    locale = next((env[name] for name in ("LC_ALL", "LC_MESSAGES", "LANG") if env.get(name)), "")
    return "zh" if locale.lower().startswith("zh") else "en"


def load_rules(args: argparse.Namespace, extra: tuple[str, ...] = ()):
    """The catalogue: the shipped rules, the user's (unless ``--no-user-rules``), ``--rules``
    directories and ``extra``. Raises ``UsageError`` naming the file and line of a bad rule."""
    from monitor.cli import UsageError
    from monitor.diagnosis.advice import use_language
    from monitor.diagnosis.catalogue import RuleError, load_catalogue

    use_language(language(args))  # before the rules: their texts and all other advice read it
    try:
        catalogue = load_catalogue([*args.rules, *extra], include_user=not args.no_user_rules)
    except RuleError as exc:
        raise UsageError(str(exc)) from None
    if (model := getattr(args, "model", None)) is not None:
        catalogue.model_path = None if model == "none" else model
    return catalogue


# The longest wait an option may ask for. Longer is a typo, and ``time.sleep`` and a thread's wait
# refuse a few hundred years with an OverflowError.
LONGEST_WAIT_S = 7 * 24 * 3600
# A TCP port, and a process id (Linux's PID_MAX_LIMIT: a bigger one overflows os.kill).
class NumberRange(TypedDict, total=False):
    """Bounds of check_number, kept together to pass as ``**PORT``."""

    at_least: float
    at_most: float


PORT: NumberRange = {"at_least": 1, "at_most": 65535}
PID: NumberRange = {"at_least": 1, "at_most": 4194304}


def check_number(option: str, value: float | None, *, at_least: float | None = None,
                 more_than: float | None = None, at_most: float | None = None, unit: str = "") -> None:
    """The check of every numeric option (``value`` None: not given): a finite number in range,
    else UsageError, one line such as ``--grace nan: not a finite number``. float() takes 'nan',
    'inf' and '1e999' as argparse hands them over; NaN fails every comparison (``< 0`` lets it
    through, and a deadline of NaN never comes) and inf overflows a sleep."""
    from monitor.cli import UsageError

    if value is None:
        return
    if not math.isfinite(value):
        raise UsageError(f"{option} {value}: not a finite number")
    if at_least is not None and value < at_least:
        problem = f"at least {at_least}"
    elif more_than is not None and value <= more_than:
        problem = f"more than {more_than}"
    elif at_most is not None and value > at_most:
        problem = f"at most {at_most}"
    else:
        return
    raise UsageError(f"{option} {value}: must be {problem}{unit}")


def check_seconds(option: str, value: float | None, *, at_least: float | None = None,
                  more_than: float | None = None) -> None:
    """A wait or a threshold in seconds: ``check_number`` up to ``LONGEST_WAIT_S``."""
    check_number(option, value, at_least=at_least, more_than=more_than, at_most=LONGEST_WAIT_S, unit=" seconds")


def add_stall_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--stall-after", type=float, default=None, metavar="SECONDS",
                        help=f"{what} report a possible hang after this much silence "
                             "(default: max(60, 10x the usual gap))")


def check_stall_option(args: argparse.Namespace) -> None:
    check_seconds("--stall-after", args.stall_after, more_than=0)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--run", metavar="NAME", help="in a folder of several runs, read this one (a name or part of it) instead of the newest")
    group.add_argument("--all-runs", action="store_true", help="in a folder of several runs, read them all as one job")


def _choices(paths: list[str], args: argparse.Namespace):
    """(path, Choice or None) for each path: None where the path is read as it is."""
    from pathlib import Path

    from monitor.cli import UsageError
    from monitor.logs.runs import RunError, choose, runs_in

    for path in paths:
        runs = runs_in(Path(path)) if not args.all_runs and Path(path).is_dir() else []
        if not runs or len(runs) < 2 and args.run is None:
            yield path, None
            continue
        try:
            yield path, choose(Path(path), runs, args.run)
        except RunError as exc:
            raise UsageError(str(exc)) from None


def pick_run_specs(paths: list[str], args: argparse.Namespace):
    """For a live follow: each folder of several runs replaced by what to follow of the run to
    read (its files, also those written later); and the choices made (``runs.Choice``: the
    line that says which run)."""
    chosen: list[str] = []
    choices = []
    for path, choice in _choices(paths, args):
        if choice is None:
            chosen.append(path)
            continue
        chosen += choice.run.specs
        if choice.note:
            choices.append(choice)
    return chosen, choices


def pick_runs(paths: list[str], args: argparse.Namespace):
    """``paths`` with each folder of several runs replaced by the log files of the run to read
    (``monitor.logs.runs``); also that run's other files (stacks, dumps: evidence, not logs), and
    one line per folder saying which run was read. Raises UsageError for an unknown ``--run``."""
    from monitor.logs.runs import log_files

    chosen: list[str] = []
    beside = []
    notes: list[str] = []
    for path, choice in _choices(paths, args):
        if choice is None:
            chosen.append(path)
            continue
        logs = log_files(choice.run)
        chosen += [str(log) for log in logs]
        beside += [p for p in choice.run.paths if p not in logs]
        if choice.note:
            notes.append(choice.note)
    return chosen, beside, notes


def add_metrics_addr_option(parser, *flags: str) -> None:
    """The address the Prometheus endpoint listens on (``args.metrics_addr``): loopback unless
    asked, since the metrics name the job, its host, its findings and what its log says."""
    parser.add_argument(*flags, dest="metrics_addr", default="127.0.0.1", metavar="ADDR",
                        help="the address the metrics endpoint listens on (default 127.0.0.1: this machine "
                             "only). For a Prometheus on another machine (a cluster), give this node's address "
                             "on the cluster's network, or 0.0.0.0 for every interface: whoever can reach the "
                             "port can then read the job's id, host, findings and root cause")


def headless_off_a_terminal(args: argparse.Namespace) -> None:
    """Turn ``args.headless`` on when stdin or stdout is not a terminal (a batch job, ``> out.txt``):
    the screen would be drawn into the file as escape codes, waiting for keys that never come.
    Said in one line, as ``monitor run`` says it."""
    import sys

    from monitor.text import say

    if not args.headless and not (sys.stdin.isatty() and sys.stdout.isatty()):
        say("not attached to a terminal (batch job?); running headless")
        args.headless = True


def add_bell_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-bell", action="store_true",
                        help="on the screen, do not ring the terminal's bell when a root cause appears")
