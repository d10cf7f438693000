"""Benchmark: `monitor diagnose` on a large realistic log against `grep -E -c -f patterns.txt`.

    python benchmarks/diagnose_bench.py                 # ~200 MB log, grep vs diagnose, peak RSS
    python benchmarks/diagnose_bench.py --size-mb 1000  # the 1 GB run
    python benchmarks/diagnose_bench.py --sizes 50,200  # memory must stay flat as the file grows
    python benchmarks/diagnose_bench.py --prefilters    # compare prefilter techniques on one chunk set
    python benchmarks/diagnose_bench.py --reference     # also time the line-by-line engine path

The log (benchmarks/data/, gitignored, reused when present): 8 ranks with `[rankN]:` prefixes,
NCCL INFO noise, tqdm `\\r` progress bars, HF-style metric dicts, deprecation warnings, and one
failure near the end (a CUDA OOM traceback on rank 5, watchdog timeouts on the others, the
torchelastic summary). grep gets the catalogue's patterns converted to ERE (patterns that
cannot be converted are left out and counted). Times are wall-clock of the whole command,
best of --repeat runs; peak RSS is sampled every 5 ms (psutil) while the command runs.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE.parent))

FAILURE = """\
[rank5]: Traceback (most recent call last):
[rank5]:   File "/home/user/project/train.py", line 212, in <module>
[rank5]:     main()
[rank5]:   File "/home/user/project/train.py", line 187, in main
[rank5]:     loss = model(**batch).loss
[rank5]:   File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1736, in _wrapped_call_impl
[rank5]:     return self._call_impl(*args, **kwargs)
[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total capacity of 79.11 GiB of which 1.19 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in use. Of the allocated memory 71.30 GiB is allocated by PyTorch, and 5.12 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)
"""
WATCHDOG = (
    "[rank{r}]:[E1121 10:{m:02d}:{s:02d}.426415540 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=81234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
    "ran for 600046 milliseconds before timing out.\n"
)
SUMMARY = """\
E1121 10:20:41.170000 11505 site-packages/torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 1) local_rank: 5 (pid: 11562) of binary: /opt/venv/bin/python
Traceback (most recent call last):
  File "/opt/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-21_10:20:41
  host      : node1
  rank      : 5 (local_rank: 5)
  exitcode  : 1 (pid: 11562)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def noise_block(rng: random.Random, step: int) -> str:
    """About 100 lines of one training step's chatter from 8 ranks."""
    out = []
    for _ in range(12):
        r = rng.randrange(8)
        out.append(f"node1:{41000 + r}:{41100 + r} [{r}] NCCL INFO Channel {rng.randrange(32):02d}/32 : {r}[{r}] -> {(r + 1) % 8}[{(r + 1) % 8}] via P2P/CUMEM/read\n")
    for r in range(8):
        bar = "".join(f"\r[rank{r}]: Epoch 3:  {p:3d}%|{'#' * (p // 10):<10}| {step * 10 + p // 10}/{40000} [12:{p % 60:02d}<3:10:00,  3.{p % 10}it/s]" for p in range(0, 100, 25))
        out.append(bar + "\n")
        out.append(f"[rank{r}]: {{'loss': {rng.uniform(1.5, 2.5):.4f}, 'grad_norm': {rng.uniform(0.2, 1.2):.4f}, 'learning_rate': 2.9e-05, 'epoch': {step / 4000:.2f}}}\n")
        out.append(f"[rank{r}]: step {step} | loss {rng.uniform(1.5, 2.5):.4f} | tokens/s {rng.randrange(30000, 36000)} | mem 61.2 GiB\n")
    for _ in range(4):
        out.append("/opt/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:92: UserWarning: None of the inputs have requires_grad=True. Gradients will be None\n")
    out.extend(f"node1:{41000 + r}:{41100 + r} [{r}] NCCL INFO comm 0x5581 rank {r} nranks 8 cudaDev {r} busId {r}0000 commId 0x9f - Init COMPLETE\n" for r in range(rng.randrange(0, 3)))
    return "".join(out)


def generate(path: Path, size_mb: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    target = size_mb * 1_000_000
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    written = 0
    step = 0
    with open(tmp, "w", encoding="utf-8") as out:
        out.write("".join(f"[rank{r}]: world_size=8 rank={r} local_rank={r} master=node1:29500\n" for r in range(8)))
        while written < target * 0.995:
            block = noise_block(rng, step)
            out.write(block)
            written += len(block)
            step += 1
        out.write(FAILURE)
        out.write("".join(WATCHDOG.format(r=r, m=20, s=30 + r) for r in range(8) if r != 5))
        out.write(SUMMARY)
    os.replace(tmp, path)


def ere(pattern: str) -> str | None:
    """A Python regex as POSIX ERE for grep -E, or None when it cannot be said in ERE."""
    if re.search(r"\(\?[=!<]|\(\?[aiLmsux]|\\[AZGpPNxuU]|\(\?P=|\\\d", pattern):
        return None
    out = re.sub(r"\(\?P<\w+>", "(", pattern)
    out = out.replace("(?:", "(").replace("(?>", "(")
    out = re.sub(r"(?<!\\)([*+?}])\?", r"\1", out)  # lazy quantifiers
    out = out.replace(r"\d", "[0-9]").replace(r"\s", "[[:space:]]").replace(r"\S", "[^[:space:]]")
    out = out.replace(r"\w", "[[:alnum:]_]").replace(r"\W", "[^[:alnum:]_]")
    return out


def patterns_file(catalogue) -> tuple[Path, int, int]:
    converted, skipped = [], 0
    for rule in catalogue.rules:
        for pattern in rule.patterns:
            text = ere(pattern.pattern)
            if text is None or subprocess.run(["grep", "-E", "-e", text, "/dev/null"], capture_output=True).returncode == 2:
                skipped += 1
            else:
                converted.append(text)
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / "patterns.txt"
    path.write_text("\n".join(converted) + "\n")
    return path, len(converted), skipped


def installed_bytecode() -> None:
    """The package's bytecode written once, as pip writes it when it installs monitor: a machine
    that sets PYTHONDONTWRITEBYTECODE (this one does) would otherwise compile every module from
    source in every timed run (~0.1 s of a small diagnose), which no installed monitor does."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(HERE.parent / "monitor")],
                   stdout=subprocess.DEVNULL, check=True)


def timed(argv: list[str], repeat: int) -> tuple[float, int, str]:
    """(best wall seconds, peak RSS in MiB sampled every 5 ms, stdout) of running argv, with the
    package's bytecode in place."""
    import tempfile

    import psutil

    installed_bytecode()
    best, peak, output = float("inf"), 0, ""
    for _ in range(repeat):
        with tempfile.TemporaryFile() as out:
            start = time.perf_counter()
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
            watched = psutil.Process(child.pid)
            while child.poll() is None:
                try:
                    peak = max(peak, watched.memory_info().rss // (1 << 20))
                except psutil.Error:
                    pass
                time.sleep(0.005)
            best = min(best, time.perf_counter() - start)
            out.seek(0)
            output = out.read().decode(errors="replace")
    return best, peak, output


def compare_prefilters(path: Path, catalogue, limit_mb: int = 40) -> None:
    """Time candidate-line search techniques over the first ``limit_mb`` of the log."""
    import ahocorasick_rs

    from monitor.diagnosis.prefilter import Prefilter

    with open(path, "rb") as handle:
        data = handle.read(limit_mb * 1_000_000)
    prefilter = Prefilter(catalogue)
    literals = [lit.encode() for rule in catalogue.rules for lit in rule.prefilter]
    chunks = [data[i:i + (4 << 20)] for i in range(0, len(data), 4 << 20)]

    def run(name, fn):
        start = time.perf_counter()
        hits = sum(fn(chunk) for chunk in chunks)
        seconds = time.perf_counter() - start
        print(f"  {name:<44} {seconds:6.2f} s  {len(data) / seconds / 1e6:7.0f} MB/s  hits {hits}")

    print(f"prefilter techniques over {len(data) / 1e6:.0f} MB, {len(literals)} literals:")
    run("ahocorasick-rs (engine's chunk automaton)", lambda c: len(prefilter.chunk_hits(c)[0]))
    plain = ahocorasick_rs.BytesAhoCorasick(literals, matchkind=ahocorasick_rs.MatchKind.LeftmostFirst)
    run("ahocorasick-rs, rule literals only", lambda c: len(plain.find_matches_as_indexes(c)))
    big = re.compile(b"|".join(re.escape(lit) for lit in literals))
    run("re: one alternation of literals", lambda c: sum(1 for _ in big.finditer(c)))
    run("bytes.find per literal", lambda c: sum(c.count(lit) for lit in literals))
    run("bytes.lower() alone (case-folding cost)", lambda c: len(c.lower()) * 0)
    try:
        import ahocorasick  # pyahocorasick, optional

        automaton = ahocorasick.Automaton()
        for index, lit in enumerate(literals):
            automaton.add_word(lit.decode(), index)
        automaton.make_automaton()
        run("pyahocorasick (str: decode + search)", lambda c: sum(1 for _ in automaton.iter(c.decode("utf-8", "replace"))))
    except ImportError:
        print("  pyahocorasick not installed: skipped")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=200)
    parser.add_argument("--sizes", help="comma-separated sizes in MB (memory-growth check)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--reference", action="store_true", help="also time the line-by-line engine path")
    parser.add_argument("--prefilters", action="store_true", help="compare prefilter techniques")
    parser.add_argument("--rules", action="append", default=[], metavar="DIR", help="extra rule directory (as diagnose --rules)")
    args = parser.parse_args()

    from monitor.diagnosis.catalogue import load_catalogue

    catalogue = load_catalogue(args.rules, include_user=False)
    extra = [arg for d in args.rules for arg in ("--rules", d)]
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else [args.size_mb]
    pattern_path, converted, skipped = patterns_file(catalogue)
    print(f"catalogue: {len(catalogue)} rules; grep gets {converted} patterns as ERE ({skipped} not convertible)")
    for size in sizes:
        log = DATA / f"train-{size}mb.log"
        if not log.exists():
            start = time.perf_counter()
            generate(log, size)
            print(f"generated {log} in {time.perf_counter() - start:.1f} s")
        with open(log, "rb") as handle:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 24), b""))
        print(f"\n{log.name}: {log.stat().st_size / 1e6:.0f} MB, {lines:,} lines")
        grep_s, grep_rss, grep_out = timed(["grep", "-E", "-c", "-f", str(pattern_path), str(log)], args.repeat)
        print(f"  grep -E -c -f patterns.txt   {grep_s:7.2f} s  peak RSS {grep_rss:5d} MiB  ({grep_out.strip()} matching lines)")
        diag_s, diag_rss, diag_out = timed([sys.executable, "-m", "monitor", "diagnose", "--json", "--no-user-rules", *extra, str(log)], args.repeat)
        root = re.search(r'"root_cause": \{\s*"rule": "([^"]+)"', diag_out)
        print(f"  monitor diagnose (fast path) {diag_s:7.2f} s  peak RSS {diag_rss:5d} MiB  ({diag_s / grep_s:.2f}x grep; root cause {root.group(1) if root else None})")
        if args.reference:
            code = (
                "import sys\nfrom monitor.diagnosis.catalogue import load_catalogue\n"
                "from monitor.diagnosis.diagnose import diagnose_paths\n"
                "d = diagnose_paths([sys.argv[1]], load_catalogue(include_user=False), fast=False)\n"
                "print(d.root_cause.rule if d.root_cause else None)\n"
            )
            ref_s, ref_rss, ref_out = timed([sys.executable, "-c", code, str(log)], 1)
            print(f"  line-by-line engine          {ref_s:7.2f} s  peak RSS {ref_rss:5d} MiB  ({ref_s / grep_s:.1f}x grep; root cause {ref_out.strip()})")
        if args.prefilters:
            compare_prefilters(log, catalogue)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
