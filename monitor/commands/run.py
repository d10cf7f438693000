"""`monitor run`: Launch a training job, record its output, watch it and explain how it ended."""

from __future__ import annotations

import argparse
from pathlib import Path

from monitor.commands.options import (
    PORT, add_bell_option, add_metrics_addr_option, add_rules_options, add_stall_option, check_number, check_seconds,
    check_stall_option, load_rules,
)


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "run",
        help="Launch a training job, record its output, watch it and explain how it ended.",
        description="Launch a training job, record its output, watch it and explain how it ended. "
                    "The job's output is written byte for byte to a log file by a detached "
                    "recorder, so it survives the monitor. Exit code: the job's (128+N for signal N).",
        usage="monitor run [options] -- CMD [ARGS...]",
    )
    parser.add_argument("--log-dir", type=Path, default=Path("logs"), metavar="DIR",
                        help="where run-YYYYmmdd-HHMMSS.log and its side files go (default: ./logs)")
    parser.add_argument("--headless", action="store_true",
                        help="no UI: pass the job's output through to the terminal unchanged")
    add_rules_options(parser)
    parser.add_argument("--no-preflight", action="store_true", help="skip the checks before launch")
    parser.add_argument("--check-collectives", nargs="?", const="warn", choices=("warn", "strict"), metavar="strict",
                        help="before each launch, the job's launcher and rendezvous run a short collective test "
                             "(all_reduce, all_gather, send/recv between ranks) and name a slow node, rank or "
                             "link; =strict: then do not launch (exit 1). Kept in run-X.collectives.json")
    parser.add_argument("--restart", type=int, default=0, metavar="N",
                        help="restart up to N times after failures a retry can fix")
    parser.add_argument("--watch-ckpt", type=Path, action="append", default=[], metavar="DIR",
                        help="check each new checkpoint in DIR once it is complete (repeatable)")
    parser.add_argument("--restart-delay", type=float, default=5.0, metavar="SECONDS",
                        help="pause before a restart (default 5)")
    parser.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                        help="after a stop signal, SIGKILL what is left after this long (default 10)")
    add_stall_option(parser, "on the screen and headless,")
    add_bell_option(parser)
    parser.add_argument("--no-flight-recorder", action="store_true",
                        help="leave the job's PyTorch flight-recorder variables alone (by default they are set "
                             "unless the job set them: dumps go to run-X.fr/ beside the log)")
    parser.add_argument("--straggler-interval", type=float, default=1.0, metavar="SECONDS",
                        help="look at every rank's stack this often (py-spy, without pausing the ranks) to name a "
                             "rank the others steadily wait for (default 1; 0: never)")
    nodes = parser.add_argument_group("jobs of several nodes, and Prometheus")
    nodes.add_argument("--job-dir", type=Path, metavar="DIR",
                       help="one folder for the whole job on a shared file system: this node's files go to "
                            "DIR/<node>/ (instead of --log-dir); run one `monitor run` per node")
    nodes.add_argument("--node", metavar="NAME",
                       help="this node's name (default: SLURMD_NODENAME, else the short host name)")
    nodes.add_argument("--metrics-port", type=int, metavar="PORT",
                       help="serve the job's metrics for Prometheus on PORT (/metrics): GPUs under "
                            "dcgm-exporter's names, and the job's ranks, findings, root cause and progress")
    add_metrics_addr_option(nodes, "--metrics-addr")
    nodes.add_argument("--textfile", type=Path, metavar="PATH",
                       help="keep the same metrics in PATH for node_exporter's textfile collector (a .prom file)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the job: -- CMD ARGS...")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import os
    import secrets

    from monitor.cli import UsageError
    from monitor.files import create_new
    from monitor.runner.supervise import RunOptions, run as supervise

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("run: no command given (monitor run -- CMD ARGS...)")
    check_number("--restart", args.restart, at_least=0)
    check_seconds("--restart-delay", args.restart_delay, at_least=0)
    check_seconds("--grace", args.grace, at_least=0)
    check_stall_option(args)
    check_seconds("--straggler-interval", args.straggler_interval, at_least=0)
    check_number("--metrics-port", args.metrics_port, **PORT)
    node = None
    if args.node is not None and args.job_dir is None:
        raise UsageError("run: --node names this node's folder in --job-dir; give --job-dir too")
    if args.job_dir is not None:
        from monitor.logs.nodes import node_name
        from monitor.runner.node import node_folder

        node = node_name(given=args.node)
        args.log_dir = node_folder(args.job_dir, node)
    catalogue = load_rules(args)  # a rule file with a typo stops here, before the launch
    before_launch = _collectives_gate(command, args.check_collectives)
    try:
        args.log_dir.mkdir(parents=True, exist_ok=True)
        # A file of our own, new and never through a link someone planted at a known name (F1).
        probe, fd = create_new(args.log_dir / f".monitor-write-test.{secrets.token_hex(8)}" for _ in range(8))
        os.close(fd)
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"run: cannot write logs to {args.log_dir}: {exc.strerror}") from None
    options = RunOptions(
        command=command, log_dir=args.log_dir, headless=args.headless,
        preflight=not args.no_preflight, max_restarts=args.restart,
        checkpoint_dirs=args.watch_ckpt, grace_s=args.grace, restart_delay_s=args.restart_delay,
        stall_after_s=args.stall_after, flight_recorder=not args.no_flight_recorder,
        node=node, metrics_port=args.metrics_port, metrics_addr=args.metrics_addr, textfile=args.textfile,
        straggler_interval_s=args.straggler_interval,
        before_launch=before_launch,
    )
    return supervise(options, catalogue, None if args.headless else _presenter(bell=not args.no_bell))


def _collectives_gate(command: list[str], mode: str | None):
    """The collectives check before each launch (``--check-collectives``), or None. A launch it
    cannot ride on is said in one line (and, strict, a usage error: the job would never be checked)."""
    if mode is None:
        return None
    from monitor.cli import UsageError
    from monitor.runner.collectives_check import before_launch, cannot_check
    from monitor.text import say

    if reason := cannot_check(command):
        if mode == "strict":
            raise UsageError(f"run: --check-collectives=strict: {reason}")
        say(f"collectives not checked: {reason}")
        return None
    return before_launch(command, strict=mode == "strict")


def _presenter(*, bell: bool):
    """The screen that shows the job, or None (headless) when textual cannot be loaded."""
    from functools import partial

    from monitor.text import say

    try:
        from monitor.tui import launch_run
    except ImportError as exc:
        say(f"the terminal UI is not available ({exc}); running headless")
        return None
    return partial(launch_run, bell=bell)
