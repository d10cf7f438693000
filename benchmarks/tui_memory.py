"""The screen's memory and lag while a job prints 100k lines/s (issue: RSS under 150 MB after
3 M lines, the findings complete and current).

    python benchmarks/tui_memory.py [--seconds 30] [--rate 100000] [--files 8]

A writer process appends training lines (with an error every 20,000 lines) to 8 per-rank files
at ``--rate`` lines/s in total and says how many it has written. The app (``watch_app``, the same
one `monitor watch` runs, under ``App.run_test``) follows the folder; every second this process's
RSS and the app's lag (lines written minus lines the app has taken in) are sampled. At the end
the app's findings are compared with `diagnose` on the same files. Baseline in the same run: the
headless session alone (`JobSession.step` in a loop), same writer, same measures.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

WRITER = textwrap.dedent("""
    import sys, time
    folder, files, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    handles = [open(f"{folder}/rank{r}.log", "a") for r in range(files)]
    start = time.monotonic(); n = 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while n < due:
            r = n % files; step = n // files
            if n % 20000 == 7:
                line = f"[rank{r}]: RuntimeError: CUDA error: an illegal memory access was encountered"
            else:
                line = f"[rank{r}]: step {step} loss {2.5 - step * 1e-6:.4f} lr 1.0e-04 1000 tokens/s"
            handles[r].write(line + "\\n")
            n += 1
        for handle in handles:
            handle.flush()
        open(f"{folder}/.written", "w").write(str(n))
        time.sleep(0.01)
""")


def written(folder: Path) -> int:
    try:
        return int((folder / ".written").read_text() or 0)
    except (OSError, ValueError):
        return 0


def start_writer(folder: Path, files: int, rate: float, seconds: float):
    import subprocess

    for rank in range(files):
        (folder / f"rank{rank}.log").touch()
    return subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(files), str(rate), str(seconds)])


def summary(findings) -> list[tuple[str, int]]:
    return sorted((f.rule, f.count) for f in findings if f.origin == "log")


async def measure_app(folder: Path, seconds: float, catalogue, writer) -> dict:
    from monitor.tui import watch_app

    process = psutil.Process()
    app = watch_app([folder], catalogue=catalogue)
    rss, lags = [], []
    async with app.run_test(size=(160, 45)) as pilot:
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            await asyncio.sleep(1.0)
            rss.append(process.memory_info().rss)
            lags.append(written(folder) - len(app.store))
        writer.wait()
        total = written(folder)
        caught_up = time.monotonic()
        while len(app.store) < total and time.monotonic() - caught_up < 120:
            await pilot.pause(0.2)
        catch_up_s = time.monotonic() - caught_up
        await pilot.pause(1.0)  # records complete after 0.5 s of quiet
        findings = list(app._findings)
        kept = len(app.store) - app.store.first
    app.metrics_feed.close()
    return {"rss": rss, "lags": lags, "total": total, "catch_up_s": catch_up_s, "findings": findings, "kept": kept}


def measure_headless(folder: Path, seconds: float, catalogue, writer) -> dict:
    from monitor.session.job_session import JobSession

    process = psutil.Process()
    session = JobSession([folder], catalogue)
    rss, lags, read = [], [], 0
    start = next_sample = time.monotonic()
    while time.monotonic() - start < seconds:
        read += len(session.step(timeout=0.2).lines)
        if time.monotonic() >= next_sample:
            rss.append(process.memory_info().rss)
            lags.append(written(folder) - read)
            next_sample += 1.0
    writer.wait()
    session.close()
    return {"rss": rss, "lags": lags, "total": written(folder), "findings": session.diagnosis().findings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=100_000)
    parser.add_argument("--files", type=int, default=8)
    args = parser.parse_args()

    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.diagnosis.diagnose import diagnose_paths

    catalogue = load_catalogue(include_user=False)
    print(f"{args.files} files, {args.rate:,.0f} lines/s in total for {args.seconds:g} s")
    for name in ("headless session (baseline)", "app (watch_app, headless run_test)"):
        with tempfile.TemporaryDirectory(prefix="monitor-mem-bench-") as folder:
            folder = Path(folder)
            writer = start_writer(folder, args.files, args.rate, args.seconds)
            if name.startswith("app"):
                result = asyncio.run(measure_app(folder, args.seconds, catalogue, writer))
            else:
                result = measure_headless(folder, args.seconds, catalogue, writer)
            expected = summary(diagnose_paths([folder], catalogue).findings)
            rss_mb = [r / 2**20 for r in result["rss"]]
            lags = result["lags"]
            print(f"{name}: {result['total']:,} lines; RSS start {rss_mb[0]:.0f} MB, max {max(rss_mb):.0f} MB, "
                  f"end {rss_mb[-1]:.0f} MB; lag median {sorted(lags)[len(lags) // 2]:,} lines, max {max(lags):,}")
            if "catch_up_s" in result:
                print(f"  caught up {result['catch_up_s']:.1f} s after the writer stopped; lines kept for the screen "
                      f"{result['kept']:,}")
            same = summary(result["findings"]) == expected
            print(f"  findings {'equal' if same else 'DIFFER from'} diagnose's on the same files "
                  f"({sum(c for _, c in expected)} occurrences of {len(expected)} rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
