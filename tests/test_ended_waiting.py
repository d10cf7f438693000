"""A log read post-mortem that ends in a wait (a rule with ``waits``) ended there: the wait is the
root cause, ``weak``; the same wait with the job going on after it, or seen live, is a warning."""

from __future__ import annotations

import pytest

from monitor.diagnosis.catalogue import RuleError, load_catalogue
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.session.job_session import JobSession
from tests.diagnosis_helpers import write_rules

# TensorFlow 1.x's SessionManager.wait_for_session, every 30 s on a worker (its format string).
WAIT = ("INFO:tensorflow:Waiting for model to be ready.  Ready_for_local_init_op:  None, ready: "
        "Variables not initialized: global_step, dense/kernel, dense/bias\n")
START = "I1122 10:00:00.000000 140 master_session.cc:1017] Start master session 3f2a with config:\n"


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def test_a_log_that_ends_waiting_for_the_chief_hung_there(tmp_path, catalogue):
    log = tmp_path / "worker1.log"
    log.write_text(START + WAIT * 3 + "\n`\n")  # a paste's closing mark and blanks after it
    diagnosis = diagnose_paths([str(log)], catalogue)
    root = diagnosis.root_cause
    assert root is not None and (root.rule, root.category, root.severity) == ("tf-waiting-for-model", "hang", "error")
    assert (root.confidence, diagnosis.confidence) == ("weak", "weak")
    assert root.remedy.startswith("The log ends here, still waiting")
    assert "chief" in root.remedy and diagnosis.failed
    assert [f.severity for f in diagnosis.findings if f.rule == root.rule] == ["error"]  # one finding, promoted


def test_a_wait_the_job_got_past_is_a_warning(tmp_path, catalogue):
    log = tmp_path / "worker1.log"
    log.write_text(START + WAIT * 2 + "INFO:tensorflow:global_step/sec: 4.2\nINFO:tensorflow:loss = 0.31, step = 200\n")
    diagnosis = diagnose_paths([str(log)], catalogue)
    assert diagnosis.root_cause is None and not diagnosis.failed
    assert [f.severity for f in diagnosis.findings if f.rule == "tf-waiting-for-model"] == ["warning"]


def test_an_error_before_the_wait_stays_the_cause(tmp_path, catalogue):
    log = tmp_path / "worker1.log"
    log.write_text("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
                   "ValueError: bad batch\n" + WAIT)
    assert diagnose_paths([str(log)], catalogue).root_cause.rule == "python-exception"


def test_a_running_job_that_waits_now_is_not_called_hung(tmp_path, catalogue):
    log = tmp_path / "worker1.log"
    log.write_text(START + WAIT)
    session = JobSession([str(log)], catalogue)
    try:
        session.step(timeout=0.5)
        diagnosis = session.diagnosis()
    finally:
        session.close()
    assert diagnosis.root_cause is None
    assert any(f.rule == "tf-waiting-for-model" and f.severity == "warning" for f in diagnosis.findings)


def _wait_rule(tmp_path, rule_id: str, severity: str, pattern: str):
    """A rule file of one rule that waits (its 7th line is ``waits = true``)."""
    return write_rules(tmp_path / "rules", f"""
[[rule]]
id = "{rule_id}"
category = "hang"
severity = "{severity}"
role = "cascade"
waits = true
title = "waiting"
patterns = ['{pattern}']
""")


def test_a_rule_that_waits_is_never_an_error(tmp_path):
    rules = _wait_rule(tmp_path, "my-wait", "error", "waiting for the others")
    with pytest.raises(RuleError, match=r"rules\.toml:7: rule my-wait: a rule that waits is a warning"):
        load_catalogue([rules.parent], include_user=False, include_shipped=False)


def test_any_file_of_the_job_may_be_the_one_that_ended_waiting(tmp_path, catalogue):
    went_on = tmp_path / "worker1.log"
    went_on.write_text(START + WAIT + "INFO:tensorflow:loss = 0.31, step = 200\n")
    stuck = tmp_path / "worker2.log"
    stuck.write_text(START + WAIT * 2)
    for order in ([went_on, stuck], [stuck, went_on]):
        root = diagnose_paths([str(path) for path in order], catalogue).root_cause
        assert root is not None and root.rule == "tf-waiting-for-model", order


def test_pythons_warning_source_line_after_the_wait_is_still_its_end(tmp_path, catalogue):
    """warnings.warn prints the message, then the line of source that warned."""
    log = tmp_path / "host0.log"
    log.write_text("/usr/lib/python3.10/site-packages/jax/_src/xla_bridge.py:172: UserWarning: TPU backend "
                   "initialization is taking more than 60.0 seconds. Did you run your code on all TPU hosts? See "
                   "https://jax.readthedocs.io/en/latest/multi_process.html for more information.\n"
                   "  warnings.warn(\n")
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.confidence) == ("jax-tpu-init-slow", "weak")


def test_a_compressed_log_or_a_crashed_nodes_padding_is_no_last_line(tmp_path):
    import gzip

    from monitor.diagnosis.tail import last_line

    packed = tmp_path / "worker.log.gz"
    packed.write_bytes(gzip.compress(WAIT.encode()))
    assert last_line(str(packed)) is None
    padded = tmp_path / "worker.log"
    padded.write_bytes(WAIT.encode() + b"\x00" * 4096)
    line = last_line(str(padded))
    assert line is not None and "Waiting for model to be ready" in line.text


def test_a_progress_bar_longer_than_the_window_ends_in_its_last_redraw(tmp_path):
    """tqdm redraws its bar with "\\r" alone: a stream of them longer than the bytes read from the
    file's end is one cut line, and what follows its last "\\r" is what the terminal showed last."""
    from monitor.diagnosis.tail import TAIL_BYTES, last_line

    bars = "".join(f"\rEpoch 0:  {step}/99999 [00:{step % 60:02d}<12:00, 1.2it/s]" for step in range(12_000))
    log = tmp_path / "rank0.log"
    log.write_text("[rank0]: starting\n" + bars)
    assert log.stat().st_size > TAIL_BYTES
    line = last_line(str(log))
    assert line is not None and line.text == "Epoch 0:  11999/99999 [00:59<12:00, 1.2it/s]"
    # A line cut at the window's start with no "\r" in it is still no line.
    plain = tmp_path / "rank1.log"
    plain.write_text("x" * (TAIL_BYTES + 10))
    assert last_line(str(plain)) is None
    # A bar drawn as "bar\r", or its stream's end through a pty ("\r\n"): the same last redraw.
    for end in ("\r", "\r\n"):
        log.write_text("[rank0]: starting\n" + bars + end)
        line = last_line(str(log))
        assert line is not None and line.text == "Epoch 0:  11999/99999 [00:59<12:00, 1.2it/s]", end


LIGHTNING_RANK0 = (
    "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2\n"
    "----------------------------------------------------------------------------------------------------\n"
    "distributed_backend=gloo\n"
    "All distributed processes registered. Starting with 2 processes\n"
    "----------------------------------------------------------------------------------------------------\n"
    "Epoch 0: 100%|##########| 32/32 [00:01<00:00, 20.11it/s, v_num=0]\n"
    "`Trainer.fit` stopped: `max_epochs=2` reached.\n"
)


def test_an_information_wait_ends_the_job_only_where_every_file_ends_on_it(tmp_path, catalogue):
    """Lightning prints "Initializing distributed" on every rank and little else on the others
    (rank_zero_only): rank 1's own file ends on it in a healthy run."""
    (tmp_path / "rank0.log").write_text(LIGHTNING_RANK0)
    (tmp_path / "rank1.log").write_text("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2\n")
    diagnosis = diagnose_paths([str(tmp_path)], catalogue)
    assert diagnosis.root_cause is None and not diagnosis.failed
    hung = tmp_path / "hung"
    hung.mkdir()
    (hung / "job.log").write_text("".join(f"[rank: {r}] Global seed set to 0\nInitializing distributed: GLOBAL_RANK: {r}, "
                                          f"MEMBER: {r + 1}/4\n" for r in range(4)))
    root = diagnose_paths([str(hung)], catalogue).root_cause
    assert root is not None and (root.rule, root.confidence) == ("lightning-joining-process-group", "weak")
    # Every rank that printed the join waited there for the others: none of them is named the cause.
    assert root.rank is None and root.ranks == [0, 1, 2, 3]


def test_a_job_whose_training_loop_finished_did_not_end_waiting(tmp_path, catalogue):
    log = tmp_path / "worker1.log"
    log.write_text(START + "INFO:tensorflow:loss = 0.31, step = 200\n"
                   "\n\nTraining completed. Do not forget to share your model on huggingface.co/models =)\n\n\n" + WAIT)
    assert diagnose_paths([str(log)], catalogue).root_cause is None


# wandb's login menu (wandb/sdk/lib/apikey.py LOGIN_CHOICE_*, printed by wandb/util.py
# prompt_choices as termlog(f"({i + 1}) {choice}"), then input(f"{LOG_STRING}: Enter your choice: ")).
WANDB_MENU = ("wandb: (1) Create a W&B account\n"
              "wandb: (2) Use an existing W&B account\n"
              "wandb: (3) Don't visualize my results\n")


def test_a_log_that_ends_on_wandbs_login_menu_waits_for_an_answer(tmp_path, catalogue):
    log = tmp_path / "train.log"
    # Two ranks asking at once: the prompt of one glued to the other's next line, as terminals show it.
    log.write_text(WANDB_MENU + "wandb: Enter your choice: [2025-02-01 17:26:01,814] [INFO] [comm.py:652:init_distributed] cdb=None\n"
                   + WANDB_MENU)
    diagnosis = diagnose_paths([str(log)], catalogue)
    root = diagnosis.root_cause
    assert root is not None and (root.rule, root.category, root.confidence) == ("wandb-login-prompt", "wandb", "weak")
    assert "WANDB_API_KEY" in root.remedy and diagnosis.failed


def test_a_rank_that_ends_on_wandbs_login_menu_is_named_its_wait_being_its_own(tmp_path, catalogue):
    """wandb's prompt waits for an answer on the rank that asks (``own_error``), not for its
    peers: unlike a join, the log that ends there names that rank."""
    log = tmp_path / "train.log"
    log.write_text("[rank1]: step 0 starting\n" + "".join(f"[rank1]: {line}\n" for line in WANDB_MENU.splitlines()))
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.rank) == ("wandb-login-prompt", 1)


def test_wandbs_login_menu_answered_is_a_warning(tmp_path, catalogue):
    log = tmp_path / "train.log"
    log.write_text(WANDB_MENU + "wandb: Enter your choice: 3\nwandb: You chose 'Don't visualize my results'\n"
                   "step 1 loss 2.31\n")
    diagnosis = diagnose_paths([str(log)], catalogue)
    assert diagnosis.root_cause is None and not diagnosis.failed
    assert [f.severity for f in diagnosis.findings if f.rule == "wandb-login-prompt"] == ["warning"]


def test_a_log_that_ends_on_lightnings_banner_and_its_ruler_hung_in_the_first_collective(tmp_path, catalogue):
    """The banner is closed by a ruler of 100 dashes (_init_dist_connection): a line with no letter
    or digit is passed over when the log's last line is looked for."""
    log = tmp_path / "job.log"
    log.write_text(LIGHTNING_RANK0.split("Epoch 0")[0] + "\n```\n")
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.category, root.confidence) == ("lightning-processes-registered", "hang", "weak")
    assert "NCCL_DEBUG=INFO" in root.remedy and root.fields["world_size"] == "2"
    (tmp_path / "job.log").write_text(LIGHTNING_RANK0)  # the job went on past it
    assert diagnose_paths([str(log)], catalogue).root_cause is None


def test_a_line_with_no_letter_or_digit_is_no_last_line(tmp_path):
    """A ruler, a row of dots or a fence says nothing of what a process did last: the last line
    (a wait's, the hung rank's quoted one) is the one before them."""
    from monitor.diagnosis.tail import last_line

    log = tmp_path / "rank0.log"
    log.write_text("step 5 loss 0.31\n" + "-" * 100 + "\n......\n```\n" + "=" * 40 + "\n")
    line = last_line(str(log))
    assert line is not None and line.text == "step 5 loss 0.31"
    log.write_text("-" * 100 + "\n")
    assert last_line(str(log)) is None


# torch's _store_based_barrier (torch 1.9-2.0): logger.info("Added key: {} to store for rank: {}").
BARRIER = "INFO:torch.distributed.distributed_c10d:Added key: store_based_barrier_key:1 to store for rank: {rank}\n"
COMPLETED = "INFO:torch.distributed.distributed_c10d:Rank {rank}: Completed store-based barrier for key:store_based_barrier_key:1 with 4 nodes.\n"


def test_a_log_that_ends_in_the_store_barrier_hung_there_and_one_that_completed_did_not(tmp_path, catalogue):
    log = tmp_path / "job.log"
    log.write_text("".join(BARRIER.format(rank=r) for r in (0, 2, 3)))
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.category, root.confidence) == ("store-barrier-joined", "hang", "weak")
    assert root.rank is None and "to store for rank: n" in root.remedy  # the rank that joined is not the one missing
    log.write_text("".join(BARRIER.format(rank=r) + COMPLETED.format(rank=r) for r in range(4)))
    assert diagnose_paths([str(log)], catalogue).root_cause is None


def test_a_log_that_ends_where_torch_builds_an_extension_waits_on_its_lock(tmp_path, catalogue):
    log = tmp_path / "job.log"
    log.write_text("[2024-10-14 14:31:35,657] [INFO] [engine.py:88:__init__] Creating DeepSpeed engine\n"
                   + "Using /home/u/.cache/torch_extensions/py310_cu118 as PyTorch extensions root...\n" * 3)
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.confidence) == ("torch-extension-lock-wait", "weak")
    assert root.fields["root"] == "/home/u/.cache/torch_extensions/py310_cu118" and "TORCH_EXTENSIONS_DIR" in root.remedy
    log.write_text(log.read_text() + "Emitting ninja build file /home/u/.cache/torch_extensions/py310_cu118/cpu_adam/build.ninja...\n"
                   "Building extension module cpu_adam...\nLoading extension module cpu_adam...\n")
    assert diagnose_paths([str(log)], catalogue).root_cause is None


def test_an_xla_process_that_never_reached_its_mesh_master(tmp_path, catalogue):
    wait = ("2020-06-15 10:45:21.337106: I    3221 tensorflow/compiler/xla/xla_client/mesh_service.cc:208] Waiting "
            "to connect to client mesh master (300 seconds) 10.164.0.77:8477\n")
    log = tmp_path / "job.log"
    log.write_text("`" + wait + "`\n")  # a paste's inline code marks around it
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.category) == ("xla-mesh-master-wait", "hang")
    assert root.fields["address"] == "10.164.0.77:8477" and "XRT_MESH_CONNECT_WAIT" in root.remedy
    log.write_text(wait + "RuntimeError: tensorflow/compiler/xla/xla_client/mesh_service.cc:329 : Check failed: "
                   "impl_->channel->WaitForConnected( std::chrono::system_clock::now() + "
                   "std::chrono::seconds(connect_wait_seconds)) == true (0 vs. 1)Failed to connect to client mesh "
                   "master: 10.164.0.77:8477\n")
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert (root.rule, root.category, root.severity) == ("xla-mesh-master-unreachable", "rendezvous_timeout", "error")


# Each library's own line before a wait for the other processes (its format string), and the line
# a healthy run prints once the wait is over.
WAITS_AND_WHAT_FOLLOWS = [
    # Two ranks in one log: rank 0's "Initializing TorchBackend", then rank 1's "cdb=None".
    ("[2024-06-11 00:23:36,254] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend in DeepSpeed "
     "with backend nccl\n[2024-06-11 00:23:36,296] [INFO] [comm.py:637:init_distributed] cdb=None\n",
     "deepspeed-joining-process-group", "hang",
     "[2024-06-11 00:23:40,001] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.0\n"),
    ("setting number of micro-batches to constant 1\n> initializing torch distributed ...\n",
     "megatron-joining-process-group", "hang", "> initializing tensor model parallel with size 1\n"),
    ("I0301 20:48:15.700560 139823437018944 distributed.py:79] Connecting to JAX distributed service on 10.68.5.45:1234\n",
     "jax-connecting-to-coordinator", "hang", "I0301 20:48:19.122679 139823437018944 main.py:66] JAX process: 0 / 4\n"),
    ("(autoscaler +9m40s) Warning: The following resource request cannot be scheduled right now: {'CPU': 1.0, "
     "'GPU': 1.0}. This is likely due to all cluster resources being claimed by actors. Consider creating fewer "
     "actors or adding more nodes to this Ray cluster.\n",
     "ray-resources-unschedulable", "hang", "(TaskRunner pid=191435) step:1 - actor/loss:0.31\n"),
    ("INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous'ing worker group\n",
     "elastic-rendezvous-joining", "rendezvous_timeout",
     "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:\n"),
    ("srun: job 81234 queued and waiting for resources\n", "slurm-job-queued", "slurm_event",
     "srun: job 81234 has been allocated resources\n"),
]


@pytest.mark.parametrize("wait, rule, category, after", WAITS_AND_WHAT_FOLLOWS)
def test_a_log_that_ends_waiting_for_the_others_in_each_librarys_words(tmp_path, catalogue, wait, rule, category, after):
    log = tmp_path / "job.log"
    log.write_text(wait)
    root = diagnose_paths([str(log)], catalogue).root_cause
    assert root is not None and (root.rule, root.category, root.confidence) == (rule, category, "weak")
    assert root.remedy.startswith("The log ends here, still waiting")
    log.write_text(wait + after)
    assert diagnose_paths([str(log)], catalogue).root_cause is None


def test_a_last_line_that_a_waits_pattern_cannot_decide_in_time_is_no_wait(tmp_path):
    """The log's last line is read for a wait with the classifier's time bound: a line that makes a
    pattern backtrack for ages is not that wait (without the bound this test never ends)."""
    rules = _wait_rule(tmp_path, "slow-wait", "warning", "^wait (?:w|ww)+$")
    log = tmp_path / "job.log"
    log.write_text("wait w\n" + "wait " + "w" * 64 + "x\n")
    catalogue = load_catalogue([rules.parent], include_user=False, include_shipped=False)
    diagnosis = diagnose_paths([str(log)], catalogue)
    assert diagnosis.root_cause is None
    assert [f.rule for f in diagnosis.findings] == ["slow-wait"]


def test_each_ranks_file_ending_on_its_own_everyday_wait_is_a_job_that_ended_waiting(tmp_path, catalogue):
    """Lightning prints its banner on rank 0 alone: with a file per rank, rank 0's ends on the
    banner and the others' on their join, and the job ended waiting there."""
    (tmp_path / "rank0.log").write_text(LIGHTNING_RANK0.split("Epoch 0")[0])
    (tmp_path / "rank1.log").write_text("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2\n")
    root = diagnose_paths([str(tmp_path)], catalogue).root_cause
    assert root is not None and root.category == "hang" and root.confidence == "weak"
    assert root.rule in ("lightning-processes-registered", "lightning-joining-process-group")
    (tmp_path / "rank1.log").write_text("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2\nEpoch 0: 3/32 loss 0.4\n")
    assert diagnose_paths([str(tmp_path)], catalogue).root_cause is None  # rank 1 went on
