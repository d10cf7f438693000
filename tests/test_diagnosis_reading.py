"""Reading real files: the fast chunk scan equals the line-by-line engine; bad input; the CLI."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from diagnosis_helpers import OOM_TRACEBACK, VALUE_ERROR_TRACEBACK, catalogue_from, tricky_log, write_rules, RULES

from monitor.cli import main
from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.diagnose import MissingPath, diagnose_paths
from monitor.diagnosis.engine import Engine
from monitor.logs.reader import UnreadableLog, find_logs, read_log
from monitor.diagnosis.report import render_text
from monitor.diagnosis.scan import scan_file
from monitor.logs.decode import LineAssembler
from monitor.text import clean

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def _full_catalogue(tmp_path):
    """The shipped catalogue plus the test rules (so equivalence covers both)."""
    return load_catalogue([write_rules(tmp_path / "extra", RULES).parent], include_user=False)


def _reference(path: Path, catalogue) -> Engine:
    engine = Engine(catalogue)
    for line in read_log(path):
        engine.feed(line)
    engine.flush()
    return engine


def _fast(path: Path, catalogue, chunk_bytes: int) -> Engine:
    """Scans ``path`` with the chunk prefilter."""
    engine = Engine(catalogue)
    scan_file(path, engine, chunk_bytes=chunk_bytes)
    engine.flush()
    return engine


def _as_json(engine: Engine) -> dict:
    return engine.diagnosis(["x"]).to_json()


def test_read_log_matches_line_assembler_and_clean(tmp_path):
    data = tricky_log()
    path = tmp_path / "job.log"
    path.write_bytes(data)
    assembler = LineAssembler()
    expected = [clean(raw) for raw in assembler.feed(data)] + [clean(assembler.flush())]
    lines = list(read_log(path))
    assert [line.text for line in lines] == expected
    assert [line.line for line in lines] == list(range(1, len(expected) + 1))


def test_fast_scan_equals_line_by_line_on_a_tricky_log(tmp_path):
    catalogue = _full_catalogue(tmp_path)
    path = tmp_path / "job.log"
    path.write_bytes(tricky_log(lines=16000))
    reference = _reference(path, catalogue)
    assert {f.rule for f in reference.findings} >= {"cuda-oom", "nccl-watchdog-timeout", "python-exception"}
    lines = sum(1 for _ in read_log(path))
    for chunk_bytes in (4093, 65536, 4 << 20):  # odd sizes cut lines and literals anywhere
        fast = Engine(catalogue)
        fed = []
        feed = fast.feed
        fast.feed = lambda line, feed=feed: fed.append(line.line) or feed(line)
        assert scan_file(path, fast, chunk_bytes=chunk_bytes) == lines
        fast.flush()
        assert _as_json(fast) == _as_json(reference), chunk_bytes
        assert len(fed) < lines * 0.6  # the fast path really skipped lines


def test_a_big_chunk_searched_in_two_halves_gives_the_hits_of_one_search(tmp_path):
    """Post-mortem, a chunk of 1 MiB or more is searched on two threads, cut at a line's end
    near its middle; hits just before and after the cut are all kept."""
    prefilter = Engine(_full_catalogue(tmp_path)).prefilter
    data = tricky_log(lines=3000)
    assert len(data) >= 2 << 20
    middle = data.index(b"\n", len(data) // 2) + 1
    data = data[:middle] + b"torch.OutOfMemoryError: CUDA out of memory.\n" + data[middle:]
    view = memoryview(data)
    assert prefilter.chunk_hits(view, halves=True) == prefilter.chunk_hits(view)


def test_fast_scan_equals_line_by_line_on_every_sample_log(tmp_path):
    """Chunks that cut lines and literals anywhere (257 bytes) and the default size, and each folder
    as one job. The real corpus's logs are one chunk at the default size, and
    tests/test_rules_eval.py compares the two readings of each of its cases as `diagnose` runs them:
    here they are cut small only, and its folders (unrelated jobs) are not read as one."""
    catalogue = _full_catalogue(tmp_path)
    files = [f for f in find_logs(SAMPLES) if f.is_file()]
    assert files, "sample_logs/ holds no logs"
    real = SAMPLES / "real"
    for path in files:
        reference = _as_json(_reference(path, catalogue))
        for chunk_bytes in (257,) if real in path.parents else (257, 4 << 20):
            assert _as_json(_fast(path, catalogue, chunk_bytes)) == reference, path
    # Whole folders (several files, one engine) too.
    for folder in sorted({f.parent for f in files if real not in f.parents}):
        assert diagnose_paths([folder], catalogue).to_json() == diagnose_paths([folder], catalogue, fast=False).to_json()


def test_gzip_and_torchrun_log_dir_layout(tmp_path):
    attempt = tmp_path / "logs" / "none_x" / "attempt_0"
    for rank in (0, 1):
        (attempt / str(rank)).mkdir(parents=True)
        (attempt / str(rank) / "stdout.log").write_text("step 1\n")
    body = VALUE_ERROR_TRACEBACK.replace("[rank1]: ", "")
    with gzip.open(attempt / "1" / "stderr.log.gz", "wt") as handle:
        handle.write(body + "\n")
    (tmp_path / "logs" / "model.bin").write_bytes(b"\x00" * 100)
    diagnosis = diagnose_paths([tmp_path / "logs"], catalogue_from(tmp_path))
    assert len(diagnosis.files) == 3
    root = diagnosis.root_cause
    assert (root.rule, root.rank) == ("python-exception", 1)  # rank from the folder name
    assert root.file.endswith("stderr.log.gz")


def test_binary_and_unreadable_files_are_reported_and_skipped(tmp_path):
    (tmp_path / "core.log").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 10)
    (tmp_path / "job.log").write_text(OOM_TRACEBACK + "\n")
    diagnosis = diagnose_paths([tmp_path], catalogue_from(tmp_path))
    assert diagnosis.problems == [f"{tmp_path / 'core.log'}: binary file, skipped"]
    assert diagnosis.root_cause.rule == "cuda-oom"
    with pytest.raises(UnreadableLog, match="binary file"):
        list(read_log(tmp_path / "core.log"))
    with pytest.raises(MissingPath, match="nope.log: no such file"):
        diagnose_paths([tmp_path / "job.log", tmp_path / "nope.log"], catalogue_from(tmp_path))


def test_report_prints_log_markup_literally(tmp_path):
    (tmp_path / "job.log").write_text(VALUE_ERROR_TRACEBACK + "\n[rank0]: NCCL communicator was aborted on rank 0.\n")
    text = render_text(diagnose_paths([tmp_path / "job.log"], catalogue_from(tmp_path)), width=200)
    assert text.startswith("Root cause: ValueError on rank 1")
    assert "ValueError: shapes [bold]do not[/bold] match" in text
    assert "What to do:" in text and "Other findings" in text and "Timeline" in text
    assert "\x1b" not in text


def test_cli_diagnose_exit_codes_and_json(tmp_path, capsys):
    rules = write_rules(tmp_path / "rules", RULES).parent
    failed = tmp_path / "failed.log"
    failed.write_text(OOM_TRACEBACK + "\n")
    ok = tmp_path / "ok.log"
    ok.write_text("step 1 loss 0.5\nIf out-of-memory error occurs, reduce the batch size\n")
    base = ["diagnose", "--no-user-rules", "--rules", str(rules)]
    assert main(base + [str(ok)]) == 0
    assert "No failure found" in capsys.readouterr().out
    assert main(base + ["--json", str(failed)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["root_cause"]["rule"] == "cuda-oom" and data["root_cause"]["rank"] == 3
    assert set(data) == {"root_cause", "findings", "files", "problems", "notes", "empty", "against", "new_since_good_run",
                         "changes"}
    assert main(base + [str(tmp_path / "missing.log")]) == 2
    assert "missing.log: no such file" in capsys.readouterr().err
    # One path of several missing (a log rotated away): the rest is still diagnosed, the missing
    # one is said on stderr and in the problems, and the exit code says an input was wrong.
    assert main(base + ["--json", str(tmp_path / "missing.log"), str(failed)]) == 2
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["root_cause"]["rule"] == "cuda-oom"
    assert data["problems"] == [f"{tmp_path / 'missing.log'}: no such file or directory"]
    assert out.err == f"monitor: {tmp_path / 'missing.log'}: no such file or directory\n"


def test_diagnose_does_not_import_textual_or_torch(tmp_path):
    import subprocess
    import sys

    log = tmp_path / "job.log"
    log.write_text(VALUE_ERROR_TRACEBACK + "\n")
    code = (
        "import sys\nfrom monitor.cli import main\n"
        f"rc = main(['diagnose', '--no-user-rules', {str(log)!r}])\n"
        "assert rc == 1, rc\n"
        "assert 'textual' not in sys.modules and 'torch' not in sys.modules, 'heavy import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_huge_line_and_truncated_gzip_lose_nothing(tmp_path):
    catalogue = catalogue_from(tmp_path)
    huge = tmp_path / "huge.log"
    with open(huge, "wb") as out:
        out.write(b"start\n" + b"\x1b[31m[bold]" + b"q" * (12 << 20) + b" CUDA out of memory. Tried to allocate 1 GiB\n")
        out.write((OOM_TRACEBACK + "\n").encode())
    diagnosis = diagnose_paths([huge], catalogue)
    # The huge line keeps its end, where this OOM message is (#31): it is the first occurrence.
    assert diagnosis.root_cause.rule == "cuda-oom" and diagnosis.root_cause.line == 2
    assert diagnosis.root_cause.count == 2
    assert diagnosis.to_json() == diagnose_paths([huge], catalogue, fast=False).to_json()
    assert len(next(line for line in read_log(huge) if line.line == 2).text) < 70_000

    cut = tmp_path / "cut.log.gz"
    whole = gzip.compress((OOM_TRACEBACK + "\n" + "".join(f"step {i} {i * 7919 % 10007}\n" for i in range(50000))).encode())
    cut.write_bytes(whole[: len(whole) // 2])
    diagnosis = diagnose_paths([cut], catalogue)
    assert diagnosis.root_cause.rule == "cuda-oom"
    assert len(diagnosis.problems) == 1 and diagnosis.problems[0].startswith(f"{cut}: read error after line")


def test_a_file_named_twice_is_read_once(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(OOM_TRACEBACK + "\n")
    diagnosis = diagnose_paths([log, tmp_path, log], catalogue_from(tmp_path))
    assert diagnosis.files == [str(log)] and diagnosis.root_cause.count == 1


def test_cli_exit_2_when_no_log_could_be_read(tmp_path, capsys):
    (tmp_path / "core.log").write_bytes(b"\x7fELF" + bytes(range(256)) * 8)
    assert main(["diagnose", "--no-user-rules", str(tmp_path / "core.log")]) == 2
    assert capsys.readouterr().err == f"monitor: {tmp_path / 'core.log'}: binary file, skipped\n"


@pytest.mark.parametrize("sample, title, quoted", [
    ("host-oom-dmesg", "Host out of memory: the OOM killer killed rank 5 (SIGKILL)",
     "The kernel's OOM killer killed python3 (pid 7015) holding 198234520kB of anonymous memory"),
    ("host-oom-slurm.out", "Host out of memory: SLURM's OOM killer killed rank 3 on gpu-node-07",
     "SLURM counted 1 OOM kill event(s) in StepId=81234.0."),
])
def test_host_oom_samples_end_with_the_oom_killer_and_its_numbers(sample, title, quoted):
    diagnosis = diagnose_paths([SAMPLES / "documented" / sample], load_catalogue(include_user=False))
    root = diagnosis.root_cause
    assert (root.category, root.role, root.severity, root.fields["confirmed_by"]) == ("host_oom", "root", "error", "host-oom-kill")
    assert root.title == title
    assert quoted in root.remedy.splitlines()[1]


def test_cli_text_report_into_a_pipe_is_plain_unwrapped_without_padding(tmp_path):
    import os
    import subprocess
    import sys

    rules = write_rules(tmp_path / "rules", RULES).parent
    log = tmp_path / "job.log"
    log.write_text(VALUE_ERROR_TRACEBACK.replace("shapes", "shapes " + "x" * 150) + "\n")
    command = [sys.executable, "-m", "monitor", "diagnose", "--no-user-rules", "--rules", str(rules), str(log)]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE")}
    longest = next(line for line in log.read_text().splitlines() if "x" * 150 in line).strip()
    for columns in (None, "60"):
        if columns:
            env["COLUMNS"] = columns
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "Root cause: ValueError on rank 1"
        assert all(line == line.rstrip() for line in lines)  # no padding
        if columns:
            assert max(map(len, lines)) == 60  # the long evidence line fills the width asked for
        else:
            assert any(line.strip() == longest for line in lines)  # not wrapped: one line, as in the log
        assert "[/bold] match" in done.stdout and "\x1b" not in done.stdout  # markup-safe, no colour


def test_fast_scan_cuts_an_overlong_progress_line_as_the_line_path_does(tmp_path):
    # A tqdm bar redrawn with \r for more than MAX_LINE_BYTES, ending in the error: the line
    # path keeps the bar's last state; the fast path must cut the line the same way, in one
    # chunk and across chunks, or it never sees the error.
    bar = b"".join(b"\r %3d%%|" % (i % 100) + b"#" * 40 for i in range(2600))
    log = tmp_path / "tqdm.log"
    log.write_bytes(
        b"".join(b"step %d loss 1.0\n" % i for i in range(2001))
        + bar + b"\r[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        + b"x" * 300_000 + b"\rtorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB.\n"
    )
    catalogue = load_catalogue(include_user=False)
    slow = [(f.rule, f.line, f.count) for f in diagnose_paths([str(log)], catalogue, fast=False).findings]
    assert slow == [("cuda-oom", 2002, 2)]
    for chunk in (64 * 1024, 1 << 20, 4 << 20):
        engine = Engine(catalogue)
        scan_file(log, engine, chunk_bytes=chunk)
        engine.flush()
        assert [(f.rule, f.line, f.count) for f in engine.findings] == slow, chunk


def test_a_gz_cut_in_its_first_bytes_is_one_line_not_a_traceback(tmp_path):
    """gzip raises EOFError (no strerror) on a stream cut before its end: mypy found the reader
    reading .strerror from it."""
    import gzip
    import subprocess
    import sys
    log = tmp_path / "rank0.log.gz"
    log.write_bytes(gzip.compress(b"step 1 loss 2.0\n" * 100)[:5])
    out = subprocess.run([sys.executable, "-m", "monitor", "diagnose", str(log)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith(f"monitor: {log}: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr


# torch's flight recorder after a watchdog timeout (ProcessGroupNCCL.cpp printTraceback; frames as
# FlightRecorder.cpp Entry::getTraceback writes them): the rank's prefix on the first line only.
_STACK = """[rank{rank}]:[E1127 20:44:40.196565214 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: 
#0 all_reduce from /opt/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:3068
#1 wrapper from /opt/venv/lib/python3.12/site-packages/torch/distributed/c10d_logger.py:83
#2 {caller} from /home/user/train.py:{line}
#3 <module> from /home/user/train.py:90
"""


@pytest.mark.parametrize("fast", [True, False])
def test_the_collective_that_timed_out_is_traced_to_the_jobs_own_call(tmp_path, fast):
    """Recorded on an H200 (torch 2.11): the rank's stack follows its prefixed header unprefixed;
    the first frame outside torch and installed packages is where the job called it."""
    catalogue = load_catalogue(include_user=False)
    recorded = diagnose_paths([str(SAMPLES / "gpu" / "nccl-timeout-1rank.log")], catalogue, fast=fast)
    assert recorded.root_cause is not None and recorded.root_cause.rule == "nccl-watchdog-timeout"
    (site,) = [f for f in recorded.findings if f.rule == "nccl-failed-collective-site"]
    assert (site.rank, site.severity, site.fields["caller"]) == (0, "info", "main")
    assert site.fields["site"].endswith("tests/jobs/gpu_job.py:49")
    # Two ranks in one file, each stack after its own header, a prefixed line between them.
    log = tmp_path / "job.log"
    log.write_text(_STACK.format(rank=1, caller="train_step", line=57)
                   + "[rank1]:[E1127 20:44:40.2 ProcessGroupNCCL.cpp:2636] First PG on this rank to signal dumping.\n"
                   + _STACK.format(rank=3, caller="evaluate", line=71))
    sites = [(f.rank, f.fields["caller"], f.fields["site"]) for f in diagnose_paths([str(log)], catalogue, fast=fast).findings
             if f.rule == "nccl-failed-collective-site"]
    assert sites == [(1, "train_step", "/home/user/train.py:57"), (3, "evaluate", "/home/user/train.py:71")]
    # Frames without the header are no stack of a collective; a stack of torch's frames alone names none.
    alone = tmp_path / "alone.log"
    alone.write_text("#2 main from /home/user/train.py:52\n" + _STACK.format(rank=0, caller="", line="").split("#2")[0])
    assert not [f for f in diagnose_paths([str(alone)], catalogue, fast=fast).findings
                if f.rule == "nccl-failed-collective-site"]
    # Once the stack is read, another stream's lines go to their own records again: rank 1's
    # traceback, interleaved with rank 0's, is its own (and the job's root cause).
    interleaved = tmp_path / "interleaved.log"
    interleaved.write_text(_STACK.format(rank=0, caller="main", line=49) + "".join(
        f"[rank{rank}]: {text}\n" for rank, text in [
            (0, "Traceback (most recent call last):"), (1, "Traceback (most recent call last):"),
            (0, '  File "/home/user/train.py", line 49, in main'), (1, '  File "/home/user/train.py", line 61, in main'),
            (1, "    batch = load(idx)"), (0, "    dist.all_reduce(grads)"), (1, "KeyError: 'labels'"),
            (0, "torch.distributed.DistBackendError: NCCL communicator was aborted on rank 0.")]))
    root = diagnose_paths([str(interleaved)], catalogue, fast=fast).root_cause
    assert root is not None and (root.rank, root.fields["exc_type"]) == (1, "KeyError")
