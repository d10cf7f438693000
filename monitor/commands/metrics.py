"""`monitor metrics`: Print GPU and host metrics samples."""

from __future__ import annotations

import argparse

from monitor.commands.options import PID, PORT, add_metrics_addr_option, check_number, check_seconds


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "metrics",
        help="Print GPU and host metrics samples.",
        description=(
            "Print GPU (NVML) and host (psutil) metrics, and the process tree of a job given by --pid. "
            "Without a GPU it prints the host metrics and why there are no GPU metrics. "
            "Metric findings (GPU memory near full, idle GPUs, throttling, Xid...) are printed as they arise."
        ),
    )
    parser.add_argument("--once", action="store_true", help="print one sample and exit")
    parser.add_argument(
        "--json", action="store_true",
        help="one JSON object per sample (numbers only; units are in the field names, e.g. memory_used_bytes)",
    )
    parser.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between samples (default 1)")
    parser.add_argument("--count", type=int, default=None, metavar="N", help="stop after N samples")
    parser.add_argument("--pid", type=int, action="append", default=[], metavar="PID",
                        help="root PID of the job to follow (repeatable)")
    parser.add_argument("--dir", action="append", default=[], metavar="DIR",
                        help="directory whose free space to report, e.g. logs or checkpoints (repeatable)")
    parser.add_argument("--record", metavar="FILE", help="also append every sample to this JSONL file")
    parser.add_argument("--serve", type=int, metavar="PORT",
                        help="serve the samples for Prometheus on PORT (/metrics), GPUs under dcgm-exporter's names")
    add_metrics_addr_option(parser, "--addr", "--metrics-addr")
    parser.add_argument("--textfile", metavar="PATH",
                        help="keep the samples in PATH for node_exporter's textfile collector (a .prom file)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import shutil
    import sys
    import time

    import psutil

    from monitor.cli import UsageError
    from monitor.metrics.samples_file import SamplesFile
    from monitor.metrics.render import render_finding, render_sample
    from monitor.metrics.sampler import Sampler
    from monitor.session.feeds import SamplerFeed
    from monitor.text import safe_text, say

    check_seconds("--interval", args.interval, at_least=0.1)
    check_number("--count", args.count, at_least=1)
    check_number("--serve", args.serve, **PORT)
    for pid in args.pid:
        check_number("--pid", pid, **PID)
        if not psutil.pid_exists(pid):
            raise UsageError(f"--pid {pid}: no such process")
    count = 1 if args.once else args.count
    recorder = None
    if args.record:
        try:
            recorder = SamplesFile(args.record)
        except OSError as exc:
            raise UsageError(f"{args.record}: {exc.strerror or exc}") from None

    exporter = _exporter(args)
    sampler = Sampler(job_pids=args.pid or None, watch_dirs=args.dir)
    # The same pipeline as a watched or launched job's (sample, history, signals, file, endpoint).
    found: list = []
    feed = SamplerFeed(sampler, found.extend, samples_file=recorder, warn=say,
                       observers=[exporter.observe] if exporter is not None else [])
    taken = 0
    redraw = sys.stdout.isatty() and not args.json and count != 1
    drawn_rows, last_gpu_message = 0, None
    try:
        # The first sample sets the baselines of CPU percentages and I/O rates.
        first = sampler.sample()
        if exporter is not None:
            exporter.observe(first)
        time.sleep(min(args.interval, 0.5) if args.once else args.interval)
        while True:
            started = time.monotonic()
            sample = feed.sample()  # a textfile the exporter cannot write is said by it, once
            findings, found[:] = list(found), []
            if args.json:
                data = sample.to_json()
                data["findings"] = [f.to_json() for f in findings]
                print(json.dumps(data, indent=2 if args.once else None), flush=True)
            else:
                # On a terminal the sample is redrawn in place, findings kept above it; into a file
                # or a pipe samples follow each other, saying why there is no GPU only when it changes.
                block = render_sample(sample, why_no_gpu=redraw or sample.gpu_message != last_gpu_message)
                last_gpu_message = sample.gpu_message
                out = sys.stdout
                if redraw and drawn_rows:
                    out.write(f"\x1b[{drawn_rows}F\x1b[J")  # up to the block's first row, erase to the end
                for finding in findings:
                    out.write(safe_text(render_finding(finding), keep_newlines=True) + "\n")
                block = safe_text(block, keep_newlines=True)
                out.write(block + "\n")
                out.flush()
                drawn_rows = _rows(block, shutil.get_terminal_size().columns) if redraw else 0
            taken += 1
            if count is not None and taken >= count:
                return 0
            # The next poll starts when this one has finished: polls never overlap.
            time.sleep(max(0.0, args.interval - (time.monotonic() - started)))
    except KeyboardInterrupt:
        return 0
    # A broken pipe (`monitor metrics | head`) is the command line's to answer, as for every
    # command (cli.py: quietly, exit 141).
    finally:
        feed.close()


def _rows(block: str, columns: int) -> int:
    """Terminal rows ``block`` takes, long lines wrapped."""
    return sum(max(1, -(-len(line) // max(1, columns))) for line in block.split("\n"))


def _exporter(args: argparse.Namespace):
    """The Prometheus endpoint and/or textfile the samples go to, or None. Raises UsageError
    when the port cannot be opened."""
    if args.serve is None and args.textfile is None:
        return None
    from monitor.cli import UsageError
    from monitor.logs.nodes import job_id, node_name
    from monitor.session.prometheus import JobExporter, ServeError
    from monitor.text import say

    exporter = JobExporter(job_id=job_id(), node=node_name())
    if args.serve is not None:
        try:
            url = exporter.serve(args.serve, args.metrics_addr)
        except ServeError as exc:
            raise UsageError(str(exc)) from None
        say(f"serving metrics for Prometheus at {url}")
    if args.textfile is not None:
        exporter.keep_textfile(args.textfile)
    return exporter
