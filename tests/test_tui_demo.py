"""`monitor demo`: the bundled recording, its replay through the real live pipeline, headless and in the app."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from monitor.demo.replay import BUNDLED, RecordedMetrics, RecordingFormatError, Replayer, load_recording
from monitor.diagnosis.catalogue import load_catalogue
from tests.runner_helpers import run_session
from monitor.tui import demo_app, job_ending, run_app
from monitor.tui.findings_panel import FindingsPanel
from monitor.tui.log_view import LogView


def test_the_bundled_recording_is_a_real_small_four_rank_crash():
    size = sum(p.stat().st_size for p in BUNDLED.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert size < 1_000_000
    recording = load_recording()
    assert recording.meta["exit_code"] == 1
    assert {name.split("/")[2] for name in recording.streams if name.startswith("logs/")} == {"0", "1", "2", "3"}
    rank2 = [text for _, text in recording.streams["logs/attempt_0/2/stderr.log"]]
    assert rank2[-1].startswith("[rank2]: ValueError: step 24")
    # times only grow within a file, and the metrics cover the run, with the ranks' processes
    for lines in recording.streams.values():
        assert [t for t, _ in lines] == sorted(t for t, _ in lines)
    assert recording.samples[0][0] < 2 and recording.samples[-1][0] >= recording.duration - 2
    assert recording.samples[10][1].gpu_status != "ok"  # recorded without a GPU, and it says so
    assert {p.rank for p in recording.samples[10][1].job.processes} >= {0, 1, 2, 3}


def test_a_broken_recording_is_named_in_one_line(tmp_path):
    with pytest.raises(RecordingFormatError, match="meta.json"):
        load_recording(tmp_path)
    (tmp_path / "meta.json").write_text('{"replay": ["a.log"]}')
    (tmp_path / "lines").mkdir()
    (tmp_path / "lines" / "a.log.jsonl").write_text('[0.1, "ok"]\nnot json\n')
    with pytest.raises(RecordingFormatError, match=r"a\.log\.jsonl:2: not a \[time, text\] pair"):
        load_recording(tmp_path)


def test_replay_writes_every_line_in_order_with_its_timing(tmp_path):
    recording = load_recording()
    replayer = Replayer(recording, tmp_path, speed=20)
    started = time.monotonic()
    replayer.start()
    assert all(path.exists() for path in replayer.paths)  # created before the first line
    assert replayer.done.wait(10)
    took = time.monotonic() - started
    # 26 s of recording, its 11 s start-up silence cut to 2 s, at ×20: not faster than that
    assert replayer.duration < recording.duration - 9
    assert took >= replayer.duration / 20 * 0.9
    for name, lines in recording.streams.items():
        expected = "".join(text + "\n" for _, text in lines)
        assert (tmp_path / name).read_text(encoding="utf-8") == expected
    metrics = RecordedMetrics(recording, replayer)
    sample = metrics.sample()
    assert sample.host.memory_total_bytes > 0


def test_demo_headless_prints_the_diagnosis_without_textual():
    code = (
        "import sys\nfrom monitor.cli import main\n"
        "rc = main(['demo', '--headless', '--speed', '40'])\n"
        "assert 'textual' not in sys.modules and 'torch' not in sys.modules\n"
        "sys.exit(rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert "Root cause: ValueError on rank 2" in out.stdout
    # Printed live, as it appeared, at the time the recorded job wrote it (not when the record
    # completed: at 40x, the half second of idle that completes it is 20 recorded seconds).
    assert "[  24.6s] ERROR   rank 2: ValueError on rank 2" in out.stdout


def test_demo_rejects_a_bad_speed(capsys):
    from monitor.cli import main

    assert main(["demo", "--speed", "0", "--headless"]) == 2
    assert "--speed 0.0: must be at least 0.01" in capsys.readouterr().err


async def test_demo_app_follows_the_replay_and_ends_on_the_root_cause(tmp_path):
    replayer = Replayer(load_recording(), tmp_path, speed=20)
    replayer.start()
    app = demo_app(replayer, catalogue=load_catalogue())
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(300):
                await pilot.pause(0.05)
                if app.finished_note:
                    break
            await pilot.pause(0.1)
            assert app.finished_note.startswith("replay ended: the recorded job exited with code 1")
            assert len(app.store) == load_recording().line_count
            assert app.store.ranks_seen == {0, 1, 2, 3}
            assert "163 lines from 8 files" in str(app.query_one("#log-status").render())
            panel = app.query_one(FindingsPanel)
            assert panel.root.rule == "python-exception" and panel.root.rank == 2
            view = app.query_one(LogView)
            assert app.store.text(view.cursor_index).startswith("[rank2]: ValueError: step 24")
            # Every "first" time is the recorded line's time since the recorded job's start (a clock
            # time would mix the recording's day, in the glog stamps, with the replay's today).
            firsts = {f.rule: panel.first_time(f) for f in panel.findings}
            assert all(t.startswith("+00:") for t in firsts.values()), firsts
            root_at = int(firsts[panel.root.rule][4:])
            assert all(int(t[4:]) >= root_at for t in firsts.values()), firsts  # consequences come after
            for _ in range(60):  # the next metrics sample: the recording's last, after the ranks ended
                metrics = str(app.query_one("#metrics").render())
                if "ranks" not in metrics:
                    break
                await pilot.pause(0.05)
            assert "GPU none:" in metrics
            assert "job    replay ended: the recorded job exited with code 1" in metrics and "running" not in metrics
            assert app.progress.step == 23
    finally:
        replayer.stop()


def test_job_ending_words():
    assert job_ending(None) is None
    assert job_ending(1) == "job exited with code 1"
    assert job_ending(137) == "job exited with code 137 (SIGKILL)"


async def test_run_app_follows_a_real_job_and_quits_without_stopping_it(tmp_path: Path):
    from monitor.runner.job import Job, CaptureOptions, new_log_path

    code = (
        "import time\n"
        "for i in range(5):\n    print(f'step {i} loss {1.0 / (i + 1):.3f}', flush=True)\n    time.sleep(0.05)\n"
        "raise ValueError('bad batch')\n"
    )
    job = Job.start([sys.executable, "-c", code], new_log_path(tmp_path), CaptureOptions(use_pty=False))
    app = run_app(job, *run_session(job))
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            for _ in range(300):
                await pilot.pause(0.05)
                if app.finished_note:
                    break
            assert app.finished_note == "job exited with code 1"
            assert app.progress.step == 4
            assert app.query_one(FindingsPanel).root.title.startswith("ValueError")
            await pilot.press("q")  # the job has ended: no question
        assert app.return_value == 1
    finally:
        app.metrics_feed.close()
        app.log_feed.session.close()
        job.wait(10)


async def test_watch_app_follows_growing_files_with_real_metrics(tmp_path: Path):
    from monitor.tui import watch_app

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank0.log").write_text("step 1 loss 2.0\n")
    app = watch_app([logs], catalogue=load_catalogue())
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(100):
                await pilot.pause(0.05)
                if len(app.store) >= 1 and app.query_one("#metrics").sample is not None:
                    break
            with open(logs / "rank1.log", "a") as rank1:
                rank1.write("step 1 loss 2.1\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. "
                            "Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.11 GiB\n")
            for _ in range(200):
                await pilot.pause(0.05)
                if app.query_one(FindingsPanel).findings:
                    break
            assert app.store.ranks_seen == {0, 1}
            root = app.query_one(FindingsPanel).root
            assert (root.rule, root.rank) == ("cuda-oom", 1)
            text = str(app.query_one("#metrics").render())
            assert "host" in text and "ram" in text  # real psutil numbers
    finally:
        app.metrics_feed.close()
        app.log_feed.session.close()


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_demo_removes_its_scratch_folder_when_killed_by_a_stop_signal(tmp_path, signum):
    import os
    import signal

    env = dict(os.environ, TMPDIR=str(tmp_path))
    code = "import sys\nfrom monitor.cli import main\nsys.exit(main(['demo', '--headless', '--speed', '0.5']))\n"
    proc = subprocess.Popen([sys.executable, "-c", code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert "monitor demo: replaying" in proc.stdout.readline()
        deadline = time.monotonic() + 10
        while not list(tmp_path.glob("monitor-demo-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(tmp_path.glob("monitor-demo-*"))
        proc.send_signal(getattr(signal, signum))
        assert proc.wait(10) == -getattr(signal, signum)  # still dies of the signal
    finally:
        proc.kill()
        proc.wait()
    assert list(tmp_path.glob("monitor-demo-*")) == []


def test_the_recording_shows_no_path_of_the_machine_that_made_it():
    """#14: the demo showed /work/... and /root/.pyenv/... paths; a user's job has its own."""
    from pathlib import Path

    recording = Path(__file__).resolve().parents[1] / "monitor" / "demo" / "recording" / "crash"
    text = "".join(p.read_text(encoding="utf-8") for p in recording.rglob("*.json*"))
    for mine in ("/work/", "/root/", "/tmp/monitor-recording"):
        assert mine not in text
    assert "/home/user/project/monitor/demo/train.py" in text
