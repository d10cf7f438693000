"""Advice as data (rules/advice.toml): the remedies of the exit, preflight and metric findings
come from one file, each text written once, with its example and its knobs checked."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from monitor.diagnosis.advice import advice, shipped
from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.ruletest import check_advice
from monitor.runner.explain import exit_finding
from monitor.runner.preflight import check_shm

ROOT = Path(__file__).parent.parent


def test_every_advice_the_code_asks_for_exists_and_every_entry_is_used():
    from monitor.metrics import signals
    from monitor.runner import explain, preflight

    asked = {"exit-other-signal", "no-gpu-unavailable", signals._HW_ADVICE, signals._APP_ADVICE}
    asked |= set(explain._SIGNAL_ADVICE.values()) | {entry[3] for entry in signals.XID.values()}
    asked |= {entry[2] for entry in preflight.KNOBS.values()} | set(preflight._NO_GPU_REASONS.values())
    asked |= {advice_id for pair in preflight._DISK_ADVICE.values() for advice_id in pair}
    from monitor.model import RANK_SOURCES
    asked |= {f"rank-from-{source}" for source in RANK_SOURCES}  # the report asks by the finding's rank source
    for path in (ROOT / "monitor").rglob("*.py"):
        # advice("id", ...) and advice("id" if ... else "other", ...)
        for first in re.findall(r"""advice\((["'][a-z0-9-]+["'](?:\s+if\s[^,]+?\selse\s+["'][a-z0-9-]+["'])?)""",
                                path.read_text()):
            asked.update(re.findall(r"""["']([a-z0-9-]+)["']""", first))
    assert asked <= set(shipped())
    assert set(shipped()) <= asked


def test_the_examples_render_and_the_knobs_are_registered():
    assert check_advice(load_catalogue(include_user=False)) == []


def test_the_shm_advice_is_written_once_and_shown_by_preflight_metrics_and_the_exit(tmp_path):
    text = advice("shm")
    assert "--shm-size=16g" in text and "--ipc=host" in text
    sigbus = exit_finding(tmp_path / "run.log", 128 + 7, None)
    assert sigbus.fields["signal"] == "SIGBUS" and text in sigbus.remedy
    # A real small /dev/shm stand-in (a 16 MiB tmpfs), where the machine lets us mount one.
    shm = tmp_path / "shm"
    shm.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(shm)], capture_output=True).returncode == 0:
        try:
            (small,) = check_shm(shm)
            assert small.remedy == f"/dev/shm holds 16 MiB. {text}"
        finally:
            subprocess.run(["umount", str(shm)], check=True)
    for path in (ROOT / "monitor").rglob("*.py"):
        assert "--shm-size" not in path.read_text(), path  # the advice lives in advice.toml only


def test_monitor_rules_test_runs_the_advice_examples_too(capsys):
    from monitor.cli import main

    catalogue = load_catalogue(include_user=False)
    rule_examples = sum(len(r.examples_match) + len(r.examples_no_match) for r in catalogue.rules)
    assert main(["rules", "test", "--no-user-rules"]) == 0
    assert f"{rule_examples + len(shipped())} examples, 0 failed" in capsys.readouterr().out
