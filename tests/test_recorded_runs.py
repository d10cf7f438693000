"""Real CPU jobs (torch 2.13, gloo, 2-6 ranks) that `monitor run` recorded, kept with what it wrote
beside their logs (tests/data/recorded_runs), diagnosed from the log as a user would run
`monitor diagnose run-X.log` afterwards: the cases where that answer had differed from the label
written from the job's script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.diagnosis_helpers import diagnose_json

DATA = Path(__file__).parent / "data" / "recorded_runs"


def log_of(case: str) -> Path:
    return next((DATA / case).glob("run-*.log"))


def root_of(log: Path) -> dict:
    root = diagnose_json("--no-user-rules", str(log))["root_cause"]
    assert root is not None
    return root


def test_a_hang_the_run_caught_is_named_again_from_its_log_alone(tmp_path):
    # Rank 1 polled for a file with a sleep 1000 times too long; rank 0 waited in DDP's all-reduce
    # until its own watchdog sent torchrun SIGTERM. The run's stacks (run-X.stacks.json, beside
    # the log) named rank 1; the log alone says only that torchrun was stopped.
    root = root_of(log_of("stuck-then-stopped"))
    assert (root["category"], root["rank"], root["rule"]) == ("hang", 1, "stacks")
    assert "wait_for_shard" in root["title"]
    alone = tmp_path / log_of("stuck-then-stopped").name
    shutil.copy(log_of("stuck-then-stopped"), alone)
    assert root_of(alone)["category"] == "stopped"


def test_a_job_stopped_while_every_rank_was_stuck_outside_a_collective_was_stuck():
    # Both ranks blocked in a queue's get() (a loader thread queued fewer items than the dataset
    # claims): no collective waits, so no timeout comes; the stall took the stacks, and the job's
    # own `timeout -s TERM` stopped torchrun. The stop ended the silence: the job was stuck.
    root = root_of(log_of("every-rank-stuck-then-stopped"))
    assert (root["category"], root["rule"], root["severity"], root["confidence"]) == ("hang", "stacks", "error", "likely")
    assert root["title"].startswith("Stuck, then stopped from outside: every rank is in StreamingReviews.__getitem__")
    assert root["fields"]["stopped_by"] == "torchrun was stopped by signal 15 from outside the job"
    assert "`return self.q.get()`" in root["remedy"]


def test_an_uncaught_exception_stays_the_cause_where_the_launch_script_exited_zero():
    # launch.sh started each rank with '&' and ended in a bare `wait` (exit 0 whatever the ranks
    # did): rank 1's view() failed, uncaught (torch's excepthook printed it), and rank 0 lost its peer.
    root = root_of(log_of("bare-wait-exit-zero"))
    assert (root["category"], root["rank"], root["fields"]["exc_type"]) == ("python_exception", 1, "RuntimeError")
    assert root["severity"] == "error"


def test_a_command_the_program_ran_that_failed_is_its_exception_not_the_launchers():
    # subprocess.run(["tar", ...], check=True) on rank 0: CalledProcessError raised by subprocess.run
    # is the program's own call failing (a launcher raises it for its child without that frame).
    root = root_of(log_of("subprocess-run-failed"))
    assert (root["category"], root["rank"], root["rule"]) == ("python_exception", 0, "python-exception")
    assert root["fields"]["exc_type"].endswith("CalledProcessError")


def test_a_missing_shard_of_a_distributed_checkpoint_is_an_incomplete_checkpoint():
    # dcp.load of a folder whose .metadata lists __1_0.distcp, deleted: CheckpointException on both ranks.
    root = root_of(log_of("dcp-shard-missing"))
    assert (root["category"], root["rule"], root["fields"]["shard"]) == (
        "corrupt_checkpoint", "dcp-checkpoint-shard-missing", "__1_0.distcp")
    assert "Resume from the last checkpoint folder that holds .metadata" in root["remedy"]


def test_a_dataloader_workers_bus_error_is_likely_shared_memory_and_names_mapped_files():
    # Rank 1 rewrote its np.memmap cache shorter while its workers mapped it: SIGBUS in a worker,
    # /dev/shm nowhere near full. torch says only that shm "might" be the cause.
    root = root_of(log_of("worker-sigbus-memmap"))
    assert (root["category"], root["rank"], root["rule"]) == ("shm_exhausted", 1, "dataloader-bus-error")
    assert root["confidence"] == "likely" and "np.memmap" in root["remedy"]
    assert "df -h /dev/shm" in root["remedy"]


def test_an_exception_every_rank_raised_says_so_in_its_title(tmp_path):
    # Six ranks, each raising the same ValueError at the same step: the first to print it is no
    # more to blame than the others. The log alone shows ranks 0-5 and no world size: that is all
    # the title claims; the run's meta.json beside the log says the job had six.
    root = root_of(log_of("every-rank-raised"))
    assert root["fields"]["exc_type"] == "ValueError"
    assert root["title"] == f"ValueError on rank {root['rank']} (raised on ranks 0-5, every rank the log shows)"
    assert sorted(root["ranks"]) == [0, 1, 2, 3, 4, 5]
    recorded = tmp_path / log_of("every-rank-raised").name
    shutil.copy(log_of("every-rank-raised"), recorded)
    recorded.with_name(f"{recorded.stem}.meta.json").write_text(json.dumps({"world_size": 6}))
    assert root_of(recorded)["title"] == f"ValueError on rank {root['rank']} (raised on all 6 ranks)"
    recorded.with_name(f"{recorded.stem}.meta.json").write_text(json.dumps({"world_size": 8}))
    assert "raised on" not in root_of(recorded)["title"]  # two ranks of eight never printed


def test_a_traceback_each_of_whose_lines_a_logger_prefixed_is_read_with_its_rank():
    # "[%(asctime)s][%(levelname)s][rank N] " before every line, the traceback's too: rank 0's
    # ZeroDivisionError in its evaluation, then rank 1's lost peer.
    root = root_of(log_of("bracketed-logger-prefix"))
    assert (root["category"], root["rank"], root["fields"]["exc_type"]) == ("python_exception", 0, "ZeroDivisionError")
    assert root["fields"]["frame_func"] == "evaluate"


def test_a_traceback_inside_a_json_loggers_line_is_read_with_the_objects_rank():
    # Every line a JSON object ({"ts", "level", "rank", "msg", "exc_info"}): rank 1's KeyError only
    # inside an "exc_info" string, its line ends escaped; rank 0 then lost its peer.
    root = root_of(log_of("json-lines-logger"))
    assert (root["category"], root["rank"], root["fields"]["exc_type"]) == ("python_exception", 1, "KeyError")


def test_stacks_that_name_the_rank_a_timeout_waited_for_take_the_timeouts_category():
    # Four ranks; ranks 1 and 2 tokenize slowly, rank 2 never arrives: rank 3 timed out in gloo
    # before torchrun stopped the rest. The stacks name rank 2 and its place; the job ended in
    # the gloo timeout.
    root = root_of(log_of("straggler-then-timeout"))
    assert (root["category"], root["rank"], root["rule"]) == ("gloo_timeout", 2, "stacks")
    assert root["title"].startswith("rank 2 is in wordpiece")


def test_a_file_rendezvous_in_a_folder_that_does_not_exist_is_a_rendezvous_failure():
    # init_method="file:///mnt/shared/..." where nothing is mounted: FileStore waited for the folder
    # (5 minutes, past the 20 s timeout given) and both ranks raised DistStoreError's bare strerror.
    root = root_of(log_of("file-init-folder-missing"))
    assert (root["category"], root["rule"], root["fields"]["os_error"]) == (
        "rendezvous_timeout", "file-store-path-missing", "No such file or directory")


def test_a_watch_of_the_finished_run_names_what_diagnose_names(tmp_path):
    # The screen and `watch --headless` replay a run that ended: they read the stacks the run kept
    # beside its log as `diagnose` does (and rewrite its run-X.diagnosis.json with the same answer).
    folder = tmp_path / "run"
    shutil.copytree(DATA / "every-rank-stuck-then-stopped", folder)
    done = subprocess.run([sys.executable, "-m", "monitor", "watch", "--headless", "--json", "--no-user-rules", str(folder)],
                          capture_output=True, text=True, timeout=120)
    root = json.loads(done.stdout.splitlines()[-1])["diagnosis"]["root_cause"]  # findings as they come, then the end
    assert (root["category"], root["rule"]) == ("hang", "stacks") and root["title"].startswith("Stuck, then stopped")
    saved = json.loads(next(folder.glob("run-*.diagnosis.json")).read_text())["root_cause"]
    assert saved["title"] == root["title"]


def _with_capture_at(folder: Path, text_before: str) -> None:
    """The run's stacks file as if its capture had been taken when the log held what ends with
    ``text_before`` (``Capture.log_bytes``, which `monitor run`'s probe records)."""
    log = next(folder.glob("run-*.log"))
    stacks = next(folder.glob("run-*.stacks.json"))
    data = json.loads(stacks.read_text())
    written = log.read_bytes().index(text_before.encode()) + len(text_before)
    for capture in data["captures"]:
        capture["log_bytes"] = written
    stacks.write_text(json.dumps(data))


def test_a_capture_whose_silence_passed_is_left_out_after_the_run(tmp_path):
    # The live run withdraws stacks taken in a silence the job trained on after; read afterwards,
    # a capture the log shows training after is left out too: here the job was merely stopped.
    folder = tmp_path / "run"
    shutil.copytree(DATA / "every-rank-stuck-then-stopped", folder)
    _with_capture_at(folder, "epoch 0 step 3/20 loss 0.6838\n")
    assert root_of(log_of_folder(folder))["category"] == "stopped"
    # Taken after the last step (the silence the stop ended): the job was stuck.
    shutil.rmtree(folder)
    shutil.copytree(DATA / "every-rank-stuck-then-stopped", folder)
    _with_capture_at(folder, "epoch 0 step 16/20 loss 0.5437\n")
    root = root_of(log_of_folder(folder))
    assert root["title"].startswith("Stuck, then stopped") and "asleep in Queue.get" in root["title"]
    assert "a queue no producer fills" in root["remedy"]


def log_of_folder(folder: Path) -> Path:
    return next(folder.glob("run-*.log"))


def test_the_screens_root_cause_says_every_rank_raised_it_as_the_report_does():
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.session.job_session import JobSession

    session = JobSession([log_of("every-rank-raised")], load_catalogue(include_user=False))
    session.close()  # read to its end
    live = session.root_cause()
    assert live is not None and live.title.endswith("(raised on ranks 0-5, every rank the log shows)")
    assert session.diagnosis().root_cause.title == live.title


def test_every_rank_at_work_when_stopped_is_no_hang(tmp_path):
    # The same stop, had every rank been computing (an evaluation a time limit cut short) rather
    # than asleep in Queue.get: the stacks are a note, the job was stopped. The stacks file is read
    # again by this version's reading, not by the finding the run wrote into it.
    folder = tmp_path / "run"
    shutil.copytree(DATA / "every-rank-stuck-then-stopped", folder)
    stacks = next(folder.glob("run-*.stacks.json"))
    data = json.loads(stacks.read_text())
    for capture in data["captures"]:
        for process in capture["processes"]:
            frames = process["threads"][0]["frames"]
            assert frames[1]["function"] == "Queue.get"
            del frames[:2]  # innermost now: the rank's own StreamingReviews.__getitem__
    stacks.write_text(json.dumps(data))
    root = root_of(log_of_folder(folder))
    assert root["category"] == "stopped"
    stacks_note = next(f for f in diagnose_json("--no-user-rules", str(log_of_folder(folder)))["findings"]
                       if f["rule"] == "stacks")
    assert stacks_note["fields"]["kind"] == "all-busy" and stacks_note["severity"] == "info"


def test_stacks_of_a_silence_the_job_exited_0_after_are_no_hang():
    # Rank 0 copied each checkpoint to a slow archive (17 s) while rank 1 waited in a barrier; the
    # last copy came after the last step, so no progress line followed the run's third capture, but
    # "archived step 30", "done" and an exit of 0 did: the wait ended, the job is clean.
    log = log_of("stall-passed-exit-zero")
    assert json.loads(log.with_name(f"{log.stem}.job.json").read_text())["exit_code"] == 0
    report = diagnose_json("--no-user-rules", str(log))
    assert report["root_cause"] is None
    stacks = next(f for f in report["findings"] if f["rule"] == "stacks")
    assert stacks["severity"] == "warning" and "exited 0" in stacks["confidence_note"]


def test_a_job_that_exited_0_is_never_named_a_failure_by_the_learned_opinion_alone():
    # Top-k gradient compression with error feedback on two ranks under torchrun with c10d's debug
    # lines on (TORCH_CPP_LOG_LEVEL=INFO): "error-feedback norm", "failed batches 0/3", "timeout 20 s"
    # and the client socket's connect lines, then exit 0. No rule names a failure; the learned
    # opinion, retrained on a corpus with more rendezvous failures, called those lines one. What
    # `monitor run` saw the job do (exit 0) is not overruled by words.
    log = log_of("debug-words-exit-zero")
    assert json.loads(log.with_name(f"{log.stem}.job.json").read_text())["exit_code"] == 0
    assert diagnose_json(str(log))["root_cause"] is None


def test_a_restarted_job_ended_in_its_last_attempt_s_failure():
    # torchrun --max-restarts 1 with LOGLEVEL=INFO: attempt 0 died of rank 1's ValueError (a
    # decimal comma in a CSV shard), torchrun restarted the workers ("Worker group FAILED. 1/1
    # attempts left; will restart worker group"), and attempt 1 died of rank 0's FileExistsError
    # (open(..., "x") of a file attempt 0 had made): the job ended in that.
    report = diagnose_json("--no-user-rules", str(log_of("restart-then-other-error")))
    root = report["root_cause"]
    assert (root["fields"]["exc_type"], root["rank"]) == ("FileExistsError", 0)
    assert any(f["fields"].get("exc_type") == "ValueError" and f["rank"] == 1 for f in report["findings"])


def test_an_exception_whose_message_starts_with_a_newline_is_told_by_its_first_line():
    # raise ValueError("\n" + table): "[rank0]: ValueError: " ends its line, the message follows.
    root = root_of(log_of("message-after-newline"))
    assert (root["fields"]["exc_type"], root["rank"]) == ("ValueError", 0)
    assert root["fields"]["message"] == "model config differs across ranks:"
    assert "Uncaught ValueError on rank 0: model config differs across ranks:" in root["remedy"]


def test_the_one_rank_that_did_not_time_out_is_the_one_the_others_waited_for(tmp_path):
    # accelerate's wait_for_everyone() inside "if val < best" with each rank's own validation loss:
    # rank 1 did not improve, skipped the barrier and went on into the next epoch's broadcast. Rank
    # 0's barrier timed out ("Timed out waiting 20000ms for recv"); rank 1 lost its connection when
    # rank 0 exited, and printed that first. torchrun's summary names rank 0. Every rank of the two
    # the run recorded reported: meta.json's world_size as `monitor run` now writes it for the
    # command it kept (env ... accelerate launch --num_processes 2; the run itself had read no
    # launcher behind env).
    from monitor.runner.launchers import parse

    log = log_of("barrier-skipped-next-collective")
    meta = json.loads(log.with_name(f"{log.stem}.meta.json").read_text())
    assert meta["world_size"] == parse(meta["command"], {}).world_size == 2
    root = root_of(log)
    assert (root["category"], root["rank"], root["rule"]) == ("gloo_timeout", 1, "gloo-timeout")
    assert "rank 1 did not time out as rank 0 did" in root["remedy"]
    # The log alone does not say the job had no other ranks (one node's of several shows its peers
    # on the others only as lost connections): no such conclusion.
    alone = tmp_path / log_of("barrier-skipped-next-collective").name
    shutil.copy(log_of("barrier-skipped-next-collective"), alone)
    assert "did not time out as" not in root_of(alone)["remedy"]


def test_a_job_s_own_rank_files_in_its_folder_are_read_as_that_job(tmp_path):
    # Each rank logged to its own ranklogs/rank<N>.log (a FileHandler, its traceback too), so the
    # run's log holds only torchrun's summary. Named together, the files are one job: the job
    # wrote them in its folder (meta.json's cwd) while it ran (job.json's started..ended).
    folder = tmp_path / "job"
    shutil.copytree(DATA / "own-rank-log-files", folder)
    log = next((folder / "logs").glob("run-*.log"))
    meta = log.with_name(f"{log.stem}.meta.json")
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "cwd": str(folder)}))
    started = json.loads(log.with_name(f"{log.stem}.job.json").read_text())["started"]
    for rank_file in (folder / "ranklogs").iterdir():
        os.utime(rank_file, (started + 5, started + 5))
    root = diagnose_json("--no-user-rules", str(log), str(folder / "ranklogs"))["root_cause"]
    assert (root["fields"]["exc_type"], root["rank"]) == ("UnicodeDecodeError", 1)
    # Another job's log written in the same folder meanwhile (not a rank's file) is not claimed.
    other = folder / "other" / "slurm-99.out"
    other.parent.mkdir()
    other.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nKeyError: 'y'\n")
    os.utime(other, (started + 5, started + 5))
    assert diagnose_json("--no-user-rules", str(log), str(folder / "ranklogs"), str(other))["root_cause"] is None
    # Written long after the run: another job's files, each diagnosed on its own.
    for rank_file in (folder / "ranklogs").iterdir():
        os.utime(rank_file, (started + 3600, started + 3600))
    assert diagnose_json("--no-user-rules", str(log), str(folder / "ranklogs"))["root_cause"] is None



def test_an_error_the_last_attempt_printed_again_is_of_that_attempt():
    # The restarted run's log with its last attempt failing first with rank 1's ValueError again,
    # then rank 0's FileExistsError (the reviewer's probe, built from the run's own lines): the
    # last attempt's first failure is the cause, though its finding was made from attempt 0's line.
    root = root_of(log_of("restart-repeat-then-other"))
    assert (root["fields"]["exc_type"], root["rank"]) == ("ValueError", 1)
