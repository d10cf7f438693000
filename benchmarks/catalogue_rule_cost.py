"""Benchmark: what the shipped rule catalogue costs the engine, in total and per rule.

    python benchmarks/catalogue_rule_cost.py [--lines 200000] [--top 10]

Corpus: every sample log in sample_logs/ (real recordings and documented texts, with their NCCL
INFO noise, tqdm bars, warnings and tracebacks), repeated until --lines lines. Three figures,
best of --repeat runs:

- baseline: the line-by-line engine (Engine.feed on every line) with an empty catalogue:
  prefix parsing and record building only;
- catalogue: the same with the shipped catalogue (prefilter, patterns, remedies);
- per rule: how many lines its prefilter lets through and the time its patterns spend on
  them (searched directly, outside the engine), to find the rules worth tightening;
- hostile lines: the slowest single search per rule on 64 KB lines made of its own literals.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from monitor.diagnosis.catalogue import Catalogue, load_catalogue  # noqa: E402
from monitor.diagnosis.engine import Engine  # noqa: E402
from monitor.model import LogLine  # noqa: E402
from monitor.text import clean  # noqa: E402

SAMPLES = HERE.parent / "sample_logs"


def corpus(lines: int) -> list[str]:
    base: list[str] = []
    for path in sorted(SAMPLES.rglob("*")):
        if path.is_file() and path.parent.name != "make" and path.suffix not in (".toml", ".md"):
            base.extend(clean(raw) for raw in path.read_bytes().split(b"\n"))
    out: list[str] = []
    while len(out) < lines:
        out.extend(base)
    return out[:lines]


def time_engine(catalogue: Catalogue, texts: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        engine = Engine(catalogue)
        started = time.perf_counter()
        for number, text in enumerate(texts, start=1):
            engine.feed(LogLine("bench.log", number, text))
        engine.flush()
        best = min(best, time.perf_counter() - started)
    return best


def per_rule(catalogue: Catalogue, texts: list[str], repeat: int) -> list[tuple[float, int, str]]:
    """(seconds, candidate lines, rule id) per rule, best of ``repeat`` passes (GC pauses and
    cold caches land on whichever rule runs at that moment)."""
    prefilter = catalogue.prefilter
    candidates: dict[int, list[str]] = {index: [] for index in range(len(catalogue.rules))}
    for text in texts:
        for index in prefilter.line_hits(text)[0]:
            candidates[index].append(text)
    costs = []
    for index, lines in candidates.items():
        patterns = catalogue.rules[index].patterns
        best = float("inf")
        for _ in range(repeat):
            started = time.perf_counter()
            for text in lines:
                for pattern in patterns:
                    pattern.search(text)
            best = min(best, time.perf_counter() - started)
        costs.append((best, len(lines), catalogue.rules[index].id))
    return sorted(costs, reverse=True)


def hostile(catalogue: Catalogue, size: int = 64 * 1024) -> list[tuple[float, str]]:
    """Slowest single search per rule on lines of ``size`` bytes built from the rule's own
    prefilter literals (repeated, then followed by junk): where backtracking would show."""
    worst = []
    for rule in catalogue.rules:
        texts = []
        for literal in rule.prefilter:
            texts += [
                (literal + " ") * (size // (len(literal) + 1)),
                (literal + " 1.0 GiB (") * (size // (len(literal) + 10)),
                literal + " " + "a" * size,
                literal + ": " + "[" * size,
            ]
        slowest = 0.0
        for pattern in rule.patterns:
            for text in texts:
                started = time.perf_counter()
                pattern.search(text)
                slowest = max(slowest, time.perf_counter() - started)
        worst.append((slowest, rule.id))
    return sorted(worst, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()

    texts = corpus(args.lines)
    catalogue = load_catalogue(include_user=False)
    empty = Catalogue([])
    baseline = time_engine(empty, texts, args.repeat)
    full = time_engine(catalogue, texts, args.repeat)
    print(f"corpus: {len(texts)} lines from {SAMPLES.name}/, {len(catalogue.rules)} rules, "
          f"{sum(len(r.patterns) for r in catalogue.rules)} patterns")
    print(f"baseline (empty catalogue): {baseline:.2f} s = {len(texts) / baseline:,.0f} lines/s")
    print(f"shipped catalogue:          {full:.2f} s = {len(texts) / full:,.0f} lines/s "
          f"({full / baseline:.2f}x the baseline)")
    costs = per_rule(catalogue, texts, args.repeat)
    total = sum(s for s, _, _ in costs)
    print(f"pattern time, all rules: {total * 1000:.0f} ms on their candidate lines; top {args.top}:")
    print(f"  {'rule':28} {'candidate lines':>15} {'ms':>8}")
    for seconds, count, rule in costs[: args.top]:
        print(f"  {rule:28} {count:15,} {seconds * 1000:8.1f}")
    slow = hostile(catalogue)
    print("slowest search on a hostile 64 KB line: "
          + ", ".join(f"{rule} {seconds * 1000:.1f} ms" for seconds, rule in slow[:3]))


if __name__ == "__main__":
    main()
