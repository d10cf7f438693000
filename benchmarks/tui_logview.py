"""The log view with millions of lines: memory, appending, filtering, drawing a screen.

    python benchmarks/tui_logview.py [--lines 2000000]

Baselines in the same run: the lines kept as a list of LogLine objects (what a view holding
its lines as Python objects costs), and a regex filter that tests line by line.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

import psutil

import regex

from monitor.model import LogLine
from monitor.tui.log_store import LineFilter, LogStore


def make_lines(count: int, ranks: int = 8) -> list[LogLine]:
    lines = []
    for i in range(count):
        rank, step = i % ranks, i // ranks
        if i % 1000 == 999:
            text = f"[rank{rank}]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (step {step})"
        else:
            text = f"[rank{rank}]: step {step} loss {2.5 - step * 1e-6:.4f} lr 1.0e-04 {900 + i % 200} tokens/s"
        lines.append(LogLine(f"logs/rank{rank}.log", step + 1, text, rank))
    return lines


def measure(label: str, action):
    gc.collect()
    before = psutil.Process().memory_info().rss
    began = time.perf_counter()
    result = action()
    took = time.perf_counter() - began
    gc.collect()
    held = psutil.Process().memory_info().rss - before
    print(f"{label:52s} {took:7.2f} s   RSS +{held / 2**20:7.1f} MiB")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    args = parser.parse_args()
    source = make_lines(args.lines)
    text_mib = sum(len(line.text) + 1 for line in source) / 2**20
    print(f"{args.lines:,} lines, {text_mib:.1f} MiB of text")

    def as_objects():
        # baseline: the lines as objects, each with its own text (as a view reading a file would hold them)
        return [LogLine(line.file, line.line, line.text.encode().decode(), line.rank) for line in source]

    def as_store():
        store = LogStore()
        for line in source:
            store.append(line)
        return store

    objects = measure("baseline: list of LogLine objects", as_objects)
    del objects
    store = measure("LogStore.append (text buffer + typed arrays)", as_store)

    pattern = "out of memory"
    compiled = regex.compile(pattern, regex.IGNORECASE)
    rows = measure(f"filter /{pattern}/: whole-buffer search", lambda: store.select(LineFilter(pattern=pattern)))
    baseline = measure(f"baseline: filter /{pattern}/ line by line",
                       lambda: [i for i in range(len(store)) if compiled.search(store.text(i))])
    assert list(rows) == baseline
    measure("filter rank 3 and errors", lambda: store.select(LineFilter(ranks=frozenset({3}), min_level=2)))
    print(f"{len(rows):,} matching lines")

    import asyncio

    from textual.app import App

    from monitor.tui.log_view import LogView

    class ViewOnly(App):
        def compose(self):
            yield LogView(store)

    async def draw() -> None:
        app = ViewOnly()
        async with app.run_test(size=(200, 60)) as pilot:
            view = app.query_one(LogView)
            view.lines_added(0)
            await pilot.pause()
            timings = []
            for target in (len(store) // 3, len(store) // 2, len(store) - 100):
                view.jump_to(target)
                began = time.perf_counter()
                strips = [view.render_line(y) for y in range(view.size.height)]
                timings.append(time.perf_counter() - began)
                assert strips[view.size.height // 2].text.strip()
            print(f"{'draw one 200x60 screen after a jump (uncached)':52s} {max(timings) * 1000:7.2f} ms (worst of 3)")

    asyncio.run(draw())
    return 0


if __name__ == "__main__":
    sys.exit(main())
