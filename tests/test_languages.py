"""Titles and remedies in Chinese (#14): `--lang zh` or a Chinese locale, from the rule files'
`*_zh` texts, English where a rule has none; names, variables and commands unchanged."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.commands.options import language
from monitor.diagnosis.advice import speaking
from monitor.diagnosis.catalogue import RuleError, load_catalogue
from monitor.diagnosis.ruletest import check_rules
from tests.diagnosis_helpers import diagnose_run

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
RULE = '''
[[rule]]
id = "my-error"
category = "launcher"
severity = "error"
role = "root"
title = "My error on rank {rank}"
title_zh = "我的错误（rank {rank}）"
patterns = ['MY ERROR code=(?P<code>[0-9]+)']
remedy = """
Code {code}: set MY_KNOB=1.
"""
remedy_zh = """
错误码 {code}：设置 MY_KNOB=1。
"""
'''


def diagnose(*args: str, env=None) -> dict:
    result = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--json", "--no-user-rules", *args],
                            capture_output=True, text=True, timeout=60, env=env)
    return json.loads(result.stdout)


def test_the_locale_or_the_option_chooses_the_language():
    args = argparse.Namespace(lang=None)
    assert language(args, {"LANG": "zh_CN.UTF-8"}) == "zh"
    assert language(args, {"LANG": "zh_CN.UTF-8", "LC_ALL": "C.UTF-8"}) == "en"  # LC_ALL first, as POSIX says
    assert language(args, {"LC_MESSAGES": "zh_TW.UTF-8", "LANG": "en_US.UTF-8"}) == "zh"
    assert language(args, {}) == "en"
    assert language(argparse.Namespace(lang="en"), {"LANG": "zh_CN.UTF-8"}) == "en"


def test_diagnose_in_chinese_keeps_names_and_numbers(monkeypatch):
    import os

    root = diagnose("--lang", "zh", str(SAMPLES / "documented/cuda-oom-tee-8ranks.log"))["root_cause"]
    assert root["title"] == "CUDA 显存不足（rank 3）"
    assert root["remedy"].startswith("在 GPU 3 上再分配 2.00 GiB 失败，该卡总共 79.15 GiB，只剩 1.12 GiB 可用。")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in root["remedy"]
    crash = diagnose(str(SAMPLES / "demo/crash-2ranks.log"), env={**os.environ, "LANG": "zh_CN.UTF-8", "LC_ALL": ""})
    assert crash["root_cause"]["title"] == "ValueError（rank 1）"
    assert "此后其他 rank 上的报错通常是它的后果" in crash["root_cause"]["remedy"]
    # A rule without a translation stays in English.
    english = diagnose("--lang", "zh", str(SAMPLES / "documented/segfault-torchrun.log"))
    assert any(f["title"].startswith("torchrun") for f in english["findings"])


def test_a_rank_the_log_does_not_name_is_left_out_in_chinese_too(tmp_path):
    log = tmp_path / "single.log"
    log.write_text('Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nValueError: boom\n')
    root = diagnose("--lang", "zh", str(log))["root_cause"]
    assert root["title"] == "ValueError" and "\n未捕获的 ValueError：boom" in root["remedy"]
    assert "其他 rank" not in root["remedy"]


def test_a_translation_must_name_the_same_fields_and_knobs(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "mine.toml").write_text(RULE)
    with speaking("zh"):
        catalogue = load_catalogue([rules], include_user=False, include_shipped=False)
    rule = catalogue.by_id["my-error"]
    assert rule.title == "我的错误（rank {rank}）" and rule.remedy == "错误码 {code}：设置 MY_KNOB=1。"
    (rules / "mine.toml").write_text(RULE.replace("错误码 {code}", "错误码 {cod}"))
    with pytest.raises(RuleError) as caught:
        load_catalogue([rules], include_user=False, include_shipped=False)
    assert str(caught.value).startswith(f"{rules / 'mine.toml'}:13: rule my-error: remedy_zh must name the same fields")
    (rules / "mine.toml").write_text(RULE.replace("设置 MY_KNOB=1", "设置 OTHER_KNOB=1"))
    catalogue = load_catalogue([rules], include_user=False, include_shipped=False)
    _, failures = check_rules(catalogue)
    assert any("remedy_zh names other knobs than the English text: MY_KNOB, OTHER_KNOB" in f for f in failures)


def test_every_shipped_rule_and_advice_has_its_chinese_text():
    """#14: a translated text beside each English one (names, fields and knobs checked at load
    and by rules test)."""
    from monitor.diagnosis.advice import shipped

    catalogue = load_catalogue(include_user=False)
    assert [r.id for r in catalogue.rules if "zh" not in r.translations] == []
    assert [(r.id, n) for r in catalogue.rules for n, a in enumerate(r.advice) if "zh" not in a.translations] == []
    assert [r.id for r in catalogue.rules if r.confirmed_title and "confirmed_title" not in r.translations["zh"]] == []
    assert [k for k, a in shipped().items() if "zh" not in a.translations] == []
    _, failures = check_rules(catalogue)
    assert failures == []


def test_advice_of_findings_no_rule_makes_follows_the_language(tmp_path):
    from monitor.diagnosis import advice

    with advice.speaking("zh"):
        assert advice.advice("exit-code") == "看退出之前日志里的第一个错误。"
    assert advice.advice("exit-code") == "See the first error in the log above the exit."


def test_the_monitors_own_findings_speak_the_language_too(tmp_path):
    from monitor.diagnosis import advice
    from monitor.runner.explain import exit_finding

    with advice.speaking("zh"):
        assert exit_finding(tmp_path / "run.log", 1, None).title == "作业以代码 1 退出"
        assert exit_finding(tmp_path / "run.log", 137, "SIGTERM", killed=True).title.startswith(
            "按请求停止（向作业的每个进程发送了 SIGTERM，宽限期过后")
    assert exit_finding(tmp_path / "run.log", 1, None).title == "The job exited with code 1"


def test_metric_preflight_checkpoint_and_stacks_findings_speak_the_language_too(tmp_path):
    """The findings Python builds from measurements (metric signals, checks before the launch, a
    bad checkpoint, every rank's stack) take their words from advice.toml too: Chinese words, the
    same numbers, names and knobs."""
    from test_metrics_signals import Run, job, near_full
    from test_stacks import _capture, _rank, _waiting

    import zipfile

    from monitor.checkpoints.verify import check_checkpoint
    from monitor.checkpoints.watch import bad_checkpoint_finding
    from monitor.diagnosis import advice
    from monitor.runner.preflight import check_knobs
    from monitor.stacks import compare

    checkpoint = tmp_path / "step_9.pt"  # a torch zip checkpoint cut in the middle
    with zipfile.ZipFile(checkpoint, "w") as archive:
        archive.writestr("step_9/data.pkl", b"x" * 4096)
    checkpoint.write_bytes(checkpoint.read_bytes()[:2000])

    def findings() -> dict[str, object]:
        run = Run()
        (memory,) = [f for f in run.steps(6, gpus=near_full(), job_sample=job())]
        (knob,) = check_knobs({"NCCL_DEBUG": "INFO"})
        bad = bad_checkpoint_finding(check_checkpoint(checkpoint))
        stuck = _rank(2, ("load_batch", "/job/train.py", 30))
        stacks = compare.analyse(_capture(_waiting(0), _waiting(1), stuck, _waiting(3)))
        return {"memory": memory, "knob": knob, "bad": bad, "stacks": stacks}

    english = findings()
    with advice.speaking("zh"):
        chinese = findings()
    assert english["memory"].title == "GPU memory near full on rank 0 (GPU 0: 78.0 of 80.0 GiB, 98%)"
    assert chinese["memory"].title == "rank 0 的 GPU 显存接近用满（GPU 0：78.0/80.0 GiB，98%）"
    assert chinese["memory"].remedy.startswith("GPU 0 上还剩 2.0 GiB，共 80.0 GiB。")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in chinese["memory"].remedy
    assert chinese["knob"].title == "设置了 NCCL_DEBUG=INFO" and "NCCL_DEBUG=WARN" in chinese["knob"].remedy
    assert chinese["bad"].title == english["bad"].title.replace("Checkpoint step_9.pt is bad: ", "checkpoint step_9.pt 已损坏：")
    assert "os.replace" in chinese["bad"].remedy and "原子地保存" in chinese["bad"].remedy
    assert english["stacks"].title.startswith("rank 2 is in load_batch (train.py:30) while ranks 0,1,3 wait in all_reduce")
    assert chinese["stacks"].title.startswith("rank 2 停在 load_batch (train.py:30)，而 ranks 0,1,3 在 ")
    assert chinese["stacks"].remedy.startswith("Rank 2 还没有到达其他 rank 正在等待的集合通信（all_reduce）")
    assert "init_process_group(timeout=...)" in chinese["stacks"].remedy
    for name, finding in chinese.items():  # the same finding otherwise
        assert (finding.rule, finding.rank, finding.fields) == (english[name].rule, english[name].rank,
                                                               english[name].fields), name


def test_the_reports_own_words_are_chinese_too(tmp_path):
    """Its labels and what named the rank, beside the rules' Chinese texts (rules/advice.toml)."""
    import subprocess
    import sys
    from pathlib import Path

    log = Path(__file__).resolve().parent.parent / "sample_logs/demo/crash-2ranks.log"
    out = subprocess.run([sys.executable, "-m", "monitor", "diagnose", "--lang", "zh", str(log)],
                         capture_output=True, text=True, timeout=60).stdout
    assert out.startswith("根本原因：ValueError（rank 1）")
    assert "rank 1（来自它所在行的 rank 前缀）" in out and "可信度：likely" in out
    assert "\n  证据：\n" in out and "\n  怎么办：\n" in out and "\n其他发现\n" in out and "\n时间线\n" in out
    for english in ("Root cause", "What to do", "Evidence", "Other findings", "Timeline", "from its line"):
        assert english not in out


def test_how_often_and_where_a_root_cause_was_seen_is_said_in_chinese(tmp_path):
    """"seen 2 times on rank 3" was "出现 2 次 on rank 3": the rank's words come from the same text."""
    log = tmp_path / "stall.log"
    log.write_text("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of "
                   "ranks and are waiting for remainder of ranks for more than 60 seconds. Stalled ops: "
                   "loss_0 [ready ranks: 3], grad_0 [ready ranks: 0, 1, 2]\n" * 2)
    with speaking("en"):  # `--lang zh` sets the process's language: the tests after this one speak English
        out = diagnose_run("--lang", "zh", str(log)).stdout
    assert "\n  在 rank 3 上出现 2 次\n" in out and " on rank" not in out

