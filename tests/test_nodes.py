"""Jobs of several nodes, from their files: global ranks in a node's folder, a node that went
silent or whose monitor stopped (post-mortem and live), and `diagnose` of a job folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from monitor.diagnosis import node_health
from monitor.logs import nodes
from monitor.logs.ranks import FileRanks
from monitor.logs.nodes import Node, write_node
from monitor.session.job_session import JobSession
from monitor.diagnosis.catalogue import load_catalogue
from tests.clock_helpers import FakeClock

SAMPLES = Path(__file__).resolve().parents[1] / "sample_logs"


def make_node(job: Path, name: str, ranks: dict[int, int] | None = None, offset: int | None = None) -> Path:
    folder = job / name
    folder.mkdir(parents=True)
    assert write_node(folder, Node(name, str(folder), "host-" + name, "99", ranks or {}, offset)) is None
    nodes.forget()
    return folder


def write_run(folder: Path, log: str, *, log_at: float, metrics_at: float | None, reported: bool) -> Path:
    stem = folder / "run-20261125-100000"
    path = stem.with_suffix(".log")
    path.write_text(log)
    os.utime(path, (log_at, log_at))
    if metrics_at is not None:
        metrics = Path(f"{stem}.metrics.jsonl")
        metrics.write_text("{}\n")
        os.utime(metrics, (metrics_at, metrics_at))
    if reported:
        Path(f"{stem}.diagnosis.json").write_text("{}")
    return path


def test_a_nodes_local_ranks_become_global(tmp_path: Path):
    folder = make_node(tmp_path, "gpu-07", ranks={0: 28, 1: 29})
    ranks = FileRanks(str(folder / "run-1.log"))
    assert ranks.of("[default1]:step 3 loss 0.5") == 29          # torchrun --tee: the local rank
    assert ranks.of("[rank5]: Traceback (most recent call last):") == 5  # the excepthook's: already global
    assert ranks.of("[default0]:[rank28]: boom") == 28
    assert ranks.of("plain") is None
    assert FileRanks(str(folder / "logs/none_x/attempt_0/1/stderr.log")).file_rank == 29  # --log-dir: local
    # Before the ranks ran, the command's --node-rank x --nproc-per-node says it.
    started = make_node(tmp_path, "gpu-08", offset=30)
    assert FileRanks(str(started / "run-1.log")).of("[default1]: x") == 31
    # A node whose ranks had not started when the file was opened: its map is read again.
    late = make_node(tmp_path, "gpu-09")
    waiting = FileRanks(str(late / "run-1.log"))
    assert waiting.of("[default1]: x") == 1
    write_node(late, Node("gpu-09", str(late), ranks={0: 40, 1: 41}))
    waiting._next_look = 0.0  # (the next look is due at once, not in 2 s)
    assert waiting.of("[default1]: x") == 41
    # Outside a job folder nothing changes: one machine, local is global.
    assert FileRanks(str(tmp_path / "rank3.log")).of("[default1]: x") == 1


def test_findings_name_their_node_and_the_root_cause_names_node_and_rank(tmp_path: Path):
    job = tmp_path / "job"
    make_node(job, "gpu-01", ranks={0: 0, 1: 1})
    b = make_node(job, "gpu-02", ranks={0: 2, 1: 3})
    now = time.time()
    write_run(job / "gpu-01", "[default0]:step 1 loss 0.5\n[default1]:step 1 loss 0.5\n", log_at=now, metrics_at=now, reported=True)
    write_run(b, "[default0]:step 1 loss 0.5\n[default1]:Traceback (most recent call last):\n"
                 '[default1]:  File "train.py", line 7, in <module>\n[default1]:ValueError: bad batch\n',
              log_at=now, metrics_at=now, reported=True)
    result = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--json", str(job)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    root = json.loads(result.stdout)["root_cause"]
    assert (root["node"], root["rank"], root["title"]) == ("gpu-02", 3, "ValueError on rank 3")
    text = subprocess.run([sys.executable, "-m", "monitor", "diagnose", str(job)], capture_output=True, text=True, timeout=60)
    assert text.stdout.startswith("Root cause: node gpu-02: ValueError on rank 3")


def test_a_node_that_went_silent_is_named_with_the_schedulers_remedy(tmp_path: Path):
    job = tmp_path / "job"
    a, b = make_node(job, "gpu-01", offset=0), make_node(job, "gpu-02", offset=2)
    end = time.time()
    # gpu-01's ranks time out waiting for gpu-02's (the text of the real gloo timeout, demo job);
    # gpu-02 stopped writing everything 4 minutes earlier and never reported.
    hang = (SAMPLES / "demo/hang-gloo-2ranks.log").read_text()
    write_run(a, hang, log_at=end, metrics_at=end, reported=True)
    write_run(b, "[rank2] step 1 loss 0.5\n", log_at=end - 240, metrics_at=end - 241, reported=False)
    (finding,) = node_health.post_mortem(job)
    assert (finding.rule, finding.node, finding.severity, finding.role) == ("node-silent", "gpu-02", "error", "root")
    assert "--exclude=gpu-02" in finding.remedy and "scontrol update nodename=gpu-02 state=drain" in finding.remedy
    assert "4m00s before the other nodes ended" in finding.remedy
    result = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--json", str(job)],
                            capture_output=True, text=True, timeout=60)
    diagnosis = json.loads(result.stdout)
    assert diagnosis["root_cause"]["rule"] == "node-silent", [f["rule"] for f in diagnosis["findings"]]
    # Both nodes wrote to the end: nobody went silent.
    for path in b.glob("run-*"):
        os.utime(path, (end, end))
    assert node_health.post_mortem(job) == []


def test_a_monitor_that_stopped_while_its_job_went_on(tmp_path: Path):
    job = tmp_path / "job"
    a, b = make_node(job, "gpu-01"), make_node(job, "gpu-02")
    end = time.time()
    write_run(a, "x\n", log_at=end, metrics_at=end, reported=True)
    write_run(b, "y\n", log_at=end - 1, metrics_at=end - 40, reported=False)
    (finding,) = node_health.post_mortem(job)
    assert (finding.rule, finding.node, finding.severity) == ("node-monitor-lost", "gpu-02", "warning")
    # Its report written: the monitor was there at the end after all.
    Path(b / "run-20261125-100000.diagnosis.json").write_text("{}")
    assert node_health.post_mortem(job) == []


def test_live_a_node_goes_quiet_and_comes_back(tmp_path: Path):
    job = tmp_path / "job"
    a, b = make_node(job, "gpu-01"), make_node(job, "gpu-02")
    now = time.time()
    write_run(a, "x\n", log_at=now, metrics_at=now, reported=False)
    log_b = write_run(b, "y\n", log_at=now, metrics_at=now - 30, reported=False)
    clock = FakeClock(monotonic=0.0)
    session = JobSession([job], load_catalogue(include_user=False), clock=clock)
    try:
        update = session.step(timeout=0.05)
        lost = [f for f in update.new_findings if f.rule == "node-monitor-lost"]
        assert [f.node for f in lost] == ["gpu-02"] and "its log still grows" in lost[0].remedy
        # Its monitor samples again: the finding is withdrawn at the next check.
        os.utime(Path(f"{log_b.with_suffix('')}.metrics.jsonl"), None)
        clock.advance(node_health.CHECK_EVERY_S)
        update = session.step(timeout=0.05)
        assert lost[0].id in update.cleared
        assert not [f for f in session.findings if f.rule == "node-monitor-lost"]
    finally:
        session.close()


def test_a_nodes_kernel_log_with_an_xid_names_the_node_to_exclude(tmp_path: Path):
    """dmesg keeps no host name: the node is the folder's, and the remedy excludes it."""
    job = tmp_path / "job"
    make_node(job, "gpu-01")
    b = make_node(job, "gpu-05")
    now = time.time()
    write_run(job / "gpu-01", "[rank0] step 1 loss 0.5\n", log_at=now, metrics_at=now, reported=True)
    write_run(b, "[rank1] step 1 loss 0.5\n", log_at=now, metrics_at=now, reported=True)
    (b / "dmesg.txt").write_text((SAMPLES / "documented/gpu-xid79-node/dmesg-gpu-node-04.txt").read_text())
    result = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--json", "--no-user-rules", str(job)],
                            capture_output=True, text=True, timeout=60)
    root = json.loads(result.stdout)["root_cause"]
    assert (root["rule"], root["node"], root["fields"]["xid"]) == ("gpu-xid", "gpu-05", "79")
    assert "--exclude=gpu-05" in root["remedy"] and "nodename=gpu-05" in root["remedy"]


def test_the_nodes_files_are_ordered_by_their_clocks_not_by_which_was_read_first(tmp_path):
    """Seen in CI: node-a's agent failed to shut the rendezvous down (a time-stamped root line)
    after rank 3 raised on node-b (a traceback: no time), and node-a's file is read first. The
    traceback happened before the first time written after it in node-b's file."""
    job = tmp_path / "job"
    a, b = make_node(job, "node-a", ranks={0: 0, 1: 1}), make_node(job, "node-b", ranks={0: 2, 1: 3})
    now = time.time()
    write_run(a, "[rank0] step 7\n"
                 "W1125 16:48:00.054000 8296 site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1298] "
                 "The node 'localhost_8296_0' has failed to shutdown the rendezvous 'job-4242' due to an error of type "
                 "RendezvousConnectionError.\n", log_at=now, metrics_at=now, reported=True)
    write_run(b, "[rank3]: Traceback (most recent call last):\n[rank3]:   File \"train.py\", line 9, in <module>\n"
                 "[rank3]: ValueError: bad batch\n"
                 "W1125 16:47:59.487000 8302 site-packages/torch/distributed/elastic/multiprocessing/api.py:1028] "
                 "Sending process 8313 closing signal SIGTERM\n", log_at=now, metrics_at=now, reported=True)
    result = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--json", "--no-user-rules", str(job)],
                            capture_output=True, text=True, timeout=60)
    root = json.loads(result.stdout)["root_cause"]
    assert (root["rule"], root["node"], root["rank"]) == ("python-exception", "node-b", 3)
    assert root["first_seen"] is None  # its time is only bounded, never shown as its own


def test_the_commands_node_rank_is_trusted_only_with_a_static_rendezvous():
    from monitor.runner.launchers import parse
    from monitor.runner.node import rank_offset

    static = parse(["torchrun", "--nnodes", "2", "--nproc-per-node", "4", "--node-rank", "1", "train.py"], {})
    assert rank_offset(static) == 4
    # c10d gives node ranks in the order the agents join: --node-rank says nothing then.
    c10d = parse(["torchrun", "--nnodes", "2", "--nproc-per-node", "4", "--node-rank", "1", "--rdzv-backend", "c10d",
                  "--rdzv-endpoint", "host:29500", "train.py"], {})
    assert rank_offset(c10d) is None


def test_files_named_after_their_nodes_name_them_and_other_names_do_not(tmp_path):
    """SLURM's --output=%N.out (or %j_%N.out): a file per node, named after it."""
    from monitor.logs.nodes import nodes_from_names

    slurm = [tmp_path / f"gpu-{n:03d}.out" for n in (7, 8, 12)]
    assert nodes_from_names(slurm) == {str(f): f.name[:-4] for f in slurm}
    jobs = [tmp_path / f"4242_nid00{n}.out" for n in (4069, 4070)]
    assert nodes_from_names(jobs) == {str(jobs[0]): "nid004069", str(jobs[1]): "nid004070"}
    assert nodes_from_names([tmp_path / "rank0.log", tmp_path / "rank1.log"]) == {}
    assert nodes_from_names([tmp_path / "gpu-007.out"]) == {}  # one file: a host, or not
    assert nodes_from_names([tmp_path / "train.out", tmp_path / "train.err"]) == {}


def test_diagnose_of_a_slurm_folder_names_the_node_of_the_root_cause(tmp_path):
    """A file per node, srun --label's global ranks inside: rank 301's error is on gpu-037."""
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.diagnosis.diagnose import diagnose_paths

    _slurm_folder(tmp_path)
    root = diagnose_paths([tmp_path], load_catalogue(include_user=False)).root_cause
    assert (root.rank, root.node, root.fields["node"]) == (301, "gpu-037", "gpu-037")


def test_watch_names_the_node_of_a_slurm_folder_as_diagnose_does(tmp_path):
    import io
    import json
    import threading

    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.session.headless import watch_headless

    _slurm_folder(tmp_path)
    stop, out = threading.Event(), io.StringIO()
    threading.Timer(2.0, stop.set).start()
    watch_headless([str(tmp_path)], load_catalogue(include_user=False), as_json=True, out=out, stop=stop)
    root = json.loads(out.getvalue().splitlines()[-1])["diagnosis"]["root_cause"]
    assert (root["rank"], root["node"]) == (301, "gpu-037")


def _slurm_folder(folder) -> None:
    """srun --label --output=%N.out: gpu-036..039.out, 8 ranks each; rank 301 (on gpu-037) raises."""
    for n in range(36, 40):
        lines = [f"{n * 8 + r}: step {i} loss 0.5" for i in range(20) for r in range(8)]
        if n == 37:
            lines += ["301: Traceback (most recent call last):", '301:   File "/work/train.py", line 8, in <module>',
                      "301: ValueError: bad batch"]
        (folder / f"gpu-{n:03d}.out").write_text("\n".join(lines) + "\n")
