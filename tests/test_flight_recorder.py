"""The flight recorder without torch: real dumps of a real gloo job (torch 2.13, CPU, torchrun)
read with an unpickler that refuses every class, and the collectives matched across ranks.
Checked against torch's own analyser on the same dumps."""

from __future__ import annotations

import errno
import os
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from monitor.flight_recorder import dumps, match, pipes, variables

torch = pytest.importorskip("torch")
JOB = Path(__file__).parent / "jobs" / "fr_dump_job.py"


def _job_env(dump_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    return {**env, "TORCH_FR_BUFFER_SIZE": "2000", "DUMP_DIR": str(dump_dir)}


@pytest.fixture(scope="module")
def real_dumps(tmp_path_factory) -> dict[str, Path]:
    """Each scenario's dump folder, the jobs run side by side (each takes about 10 s)."""
    started = {}
    for scenario, ranks in (("missing", 3), ("op", 2), ("size", 2)):
        folder = tmp_path_factory.mktemp(f"fr-{scenario}")
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", str(JOB), scenario]
        started[scenario] = (folder, ranks, subprocess.Popen(command, env=_job_env(folder), stdout=subprocess.PIPE,
                                                             stderr=subprocess.STDOUT))
    for folder, ranks, process in started.values():
        out, _ = process.communicate(timeout=120)
        assert len(list(folder.glob("dump-rank*"))) == ranks, out.decode(errors="replace")
    return {scenario: folder for scenario, (folder, _, _) in started.items()}


def _load(folder: Path) -> list[dumps.RankDump]:
    return [dumps.load(path) for path in dumps.find_dumps(folder)]


def test_a_rank_that_never_joined_is_named_with_the_call_sites(real_dumps):
    findings = match.analyse(_load(real_dumps["missing"]))
    missing = [f for f in findings if f.rule == match.MISSING_RULE]
    assert len(missing) == 1, [f.title for f in findings]
    finding = missing[0]
    assert finding.rank == 2 and finding.ranks == [2]
    assert finding.title.startswith("rank 2 never joined collective 4 (gloo:all_reduce) of the default group; "
                                    "ranks 0,1 wait in it at <module> (fr_dump_job.py:")
    assert finding.origin == "flight-recorder" and finding.category == "hang" and finding.severity == "error"
    assert finding.file == str(JOB)
    assert "rank 2 last enqueued collective 3 (gloo:all_reduce)" in finding.evidence[0]
    assert "(60 s here): init_process_group(timeout=...)" in finding.remedy
    assert not [f for f in findings if f.rule == match.MISMATCH_RULE]


def test_ranks_calling_different_collectives_are_a_mismatch_naming_each_call(real_dumps):
    findings = match.analyse(_load(real_dumps["op"]))
    assert [f.rule for f in findings] == [match.MISMATCH_RULE]
    title = findings[0].title
    assert title.startswith("collective 4 of the default group differs between ranks (op): ")
    assert re.search(r"rank 0 called gloo:all_reduce at <module> \(fr_dump_job\.py:\d+\)", title)
    assert re.search(r"rank 1 called gloo:broadcast at <module> \(fr_dump_job\.py:\d+\)", title)
    assert findings[0].ranks == [0, 1]  # two ranks, one each: neither is the odd one


def test_ranks_reducing_different_sizes_are_a_mismatch(real_dumps):
    findings = match.analyse(_load(real_dumps["size"]))
    assert [f.rule for f in findings] == [match.MISMATCH_RULE]
    assert "(input sizes)" in findings[0].title
    assert "rank 0 called gloo:all_reduce [[4]] Float" in findings[0].title
    assert "rank 1 called gloo:all_reduce [[2, 2]] Float" in findings[0].title


def test_the_odd_rank_of_three_is_named(real_dumps):
    """Three ranks, one calls broadcast: the minority is the rank to look at."""
    loaded = _load(real_dumps["op"])
    third = pickle.loads(Path(loaded[0].path).read_bytes())  # rank 0's dump, as rank 2's
    copy = real_dumps["op"].parent / "op-three"
    copy.mkdir(exist_ok=True)
    for path in real_dumps["op"].glob("dump-rank*"):
        (copy / path.name).write_bytes(path.read_bytes())
    (copy / "dump-rank2").write_bytes(pickle.dumps(third))
    finding = match.analyse(_load(copy))[0]
    assert finding.rank == 1 and finding.ranks == [1]
    assert finding.title.split(": ", 1)[1].startswith("rank 1 called gloo:broadcast")


def test_torch_own_analyser_names_the_same_missing_rank(real_dumps, tmp_path):
    """fr_trace on the same dumps. torch 2.13's analyser cannot read gloo dumps as written: their
    pg_config keys the default group '' while the entries call it '0' (KeyError: ('0', 0) in
    build_collectives). Renaming that key, and nothing else, lets it run."""
    for path in real_dumps["missing"].glob("dump-rank*"):
        data = pickle.loads(path.read_bytes())
        data["pg_config"] = {"0": {**data["pg_config"][""], "name": "0", "desc": "default_pg"}}
        (tmp_path / path.name).write_bytes(pickle.dumps(data))
    result = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(tmp_path),
                             "-p", "dump-rank"], capture_output=True, text=True, timeout=120)
    report = result.stdout + result.stderr  # it reports through logging, on stderr
    assert "Not all ranks joining collective, sequence number: 4" in report, report
    assert "missing ranks: {2}" in report
    ours = [f for f in match.analyse(_load(real_dumps["missing"])) if f.rule == match.MISSING_RULE][0]
    assert ours.fields["seq"] == "4" and ours.ranks == [2]


def test_a_dump_that_names_a_class_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "dump-rank0"
    path.write_bytes(pickle.dumps({"entries": [Evil()]}, protocol=2))
    assert dumps.looks_like_dump(path)
    with pytest.raises(dumps.DumpError) as caught:
        dumps.load(path)
    assert str(caught.value).startswith(f"{path}: refused: it names posix.system")
    assert "\n" not in str(caught.value)
    assert not marker.exists()


def test_a_cut_dump_and_a_stranger_are_one_line_each(real_dumps, tmp_path):
    real = next(real_dumps["missing"].glob("dump-rank0")).read_bytes()
    (tmp_path / "dump-rank0").write_bytes(real[: len(real) // 2])
    (tmp_path / "dump-rank1").write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    (tmp_path / "notes").write_bytes(pickle.dumps({}, protocol=2))  # no rank in the name
    for name, expected in (("dump-rank0", "not a readable flight-recorder dump"),
                           ("dump-rank1", "not a flight-recorder dump"), ("notes", "no rank at the end")):
        with pytest.raises(dumps.DumpError) as caught:
            dumps.load(tmp_path / name)
        assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_the_pipes_beside_the_dumps_are_never_opened_for_reading(tmp_path):
    os.mkfifo(tmp_path / "pipe-rank0.pipe")
    (tmp_path / "dump-rank0").write_bytes(pickle.dumps({"entries": []}, protocol=2))
    assert dumps.find_dumps(tmp_path) == [tmp_path / "dump-rank0"]  # would block on the FIFO otherwise


def test_a_dump_request_reaches_a_reading_rank_and_skips_a_gone_one(tmp_path):
    prefix = str(tmp_path / "pipe-rank")
    os.mkfifo(prefix + "0.pipe")
    os.mkfifo(prefix + "1.pipe")  # nobody reads it: its rank ended
    got = []
    reader = threading.Thread(target=lambda: got.append(open(prefix + "0.pipe", "rb").read()))
    reader.start()
    for _ in range(200):  # the reader has the FIFO open once a write end can be opened
        try:
            os.close(os.open(prefix + "0.pipe", os.O_WRONLY | os.O_NONBLOCK))
            break
        except OSError as exc:
            assert exc.errno == errno.ENXIO
            threading.Event().wait(0.01)
    reader.join(5)  # that probe open/close ended the first read with b""; ask for real now
    got.clear()
    reader = threading.Thread(target=lambda: got.append(open(prefix + "0.pipe", "rb").read()))
    reader.start()
    asked: list[str] = []
    for _ in range(200):
        asked = pipes.request_dumps(prefix)
        if asked:
            break
        threading.Event().wait(0.01)
    reader.join(5)
    assert asked == [prefix + "0.pipe"] and got == [b"1"]


def test_one_name_per_variable_the_current_one_on_a_recent_torch(tmp_path):
    folder = tmp_path / "run-1.fr"
    plan = variables.plan(folder, {}, torch_version=(2, 13))
    assert plan.set == {"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_FR_DUMP_TEMP_FILE": str(folder / "dump-rank"),
                        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(folder / "pipe-rank")}
    old = variables.plan(folder, {}, torch_version=(2, 4))
    assert set(old.set) == {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                            "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"}
    assert variables.plan(folder, {}).set == plan.set  # torch 2.13 is installed here


def test_what_the_job_set_itself_is_kept_under_either_name(tmp_path):
    plan = variables.plan(tmp_path / "run-1.fr", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "500",
                                                  "TORCH_FR_DUMP_TEMP_FILE": "/data/fr/trace_"}, torch_version=(2, 13))
    assert plan.kept == {"TORCH_NCCL_TRACE_BUFFER_SIZE": "500", "TORCH_FR_DUMP_TEMP_FILE": "/data/fr/trace_"}
    assert set(plan.set) == {"TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"}
    assert plan.dump_prefix == "/data/fr/trace_"
    line = plan.describe()
    assert "kept the job's own TORCH_NCCL_TRACE_BUFFER_SIZE=500" in line and "--no-flight-recorder" in line


def test_torch_reads_the_names_we_set():
    """The CPU build of torch 2.13 knows the recorder's names (the NCCL watchdog's live in the
    CUDA build): a renamed variable would silently turn the recorder off."""
    library = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    text = library.read_bytes()
    for name in (*variables.BUFFER_SIZE, *variables.DUMP_FILE):
        assert name.encode() + b"\x00" in text, name
