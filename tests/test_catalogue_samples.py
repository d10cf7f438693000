"""The shipped catalogue against the sample logs: `monitor diagnose --json` on every sample in
sample_logs/ must give what sample_logs/expected.toml says, and every rule's own examples must
pass through the real engine."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.diagnosis.catalogue import load_catalogue, shipped_rules_dir
from monitor.diagnosis.ruletest import check_rules, noisy_prefilters

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
EXPECTED = tomllib.loads((SAMPLES / "expected.toml").read_text(encoding="utf-8"))["sample"]
# The failure categories the catalogue must cover (python_exception and hang are built in).
CATEGORIES = (
    "cuda_oom", "host_oom", "nccl_timeout", "nccl_error", "gloo_timeout", "rendezvous_timeout",
    "libuv", "port_in_use", "wandb", "corrupt_checkpoint", "cuda_assert", "gpu_hardware",
    "nan_loss", "shm_exhausted", "disk_full", "slurm_event", "launcher",
)
# Sample folders: each file (or each directory, as one job) is a sample.
SAMPLE_DIRS = ("demo", "documented", "gpu", "cpu")


def diagnose_json(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    capsys.readouterr()
    rc = main(["diagnose", "--json", "--no-user-rules", str(path)])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("sample", EXPECTED, ids=[s["path"] for s in EXPECTED])
def test_sample_diagnosis(sample: dict, capsys: pytest.CaptureFixture[str]) -> None:
    rc, result = diagnose_json(SAMPLES / sample["path"], capsys)
    root = result["root_cause"]
    summary = (f"root={root and (root['rule'], root['category'], root['rank'], root['fields'])} "
               f"findings={[(f['rule'], f['rank']) for f in result['findings']]} problems={result['problems']}")
    assert rc == sample["exit"], summary
    assert not result["problems"], summary
    found = {f["category"] for f in result["findings"]}
    for category in sample.get("also", []):
        assert category in found, f"no {category} finding: {summary}"
    for expected in sample.get("findings", []):
        check_finding(expected, result["findings"], summary)
    if "category" not in sample:
        assert root is None, summary
        return
    assert root is not None, summary
    assert root["category"] == sample["category"], summary
    if "rule" in sample:
        assert root["rule"] == sample["rule"], summary
    if "rank" in sample:
        assert root["rank"] == sample["rank"], summary
    for name, value in sample.get("fields", {}).items():
        assert root["fields"].get(name) == value, f"field {name}: {summary}"
    for name in sample.get("has_fields", []):
        assert root["fields"].get(name), f"field {name} missing: {summary}"
    for text in sample.get("remedy_has", []):
        assert text in root["remedy"], f"remedy lacks {text!r}:\n{root['remedy']}"
    for text in sample.get("remedy_lacks", []):
        assert text not in root["remedy"], f"remedy has {text!r}:\n{root['remedy']}"


def check_finding(expected: dict, findings: list[dict], summary: str) -> None:
    """A finding besides the root cause, as expected.toml's ``findings`` entry describes it."""
    matching = [f for f in findings if f["rule"] == expected["rule"]]
    assert len(matching) == 1, f"{len(matching)} {expected['rule']} findings: {summary}"
    finding = matching[0]
    for key in ("rank", "ranks", "count", "severity", "role"):
        if key in expected:
            assert finding[key] == expected[key], f"{expected['rule']} {key}={finding[key]!r}: {summary}"
    for name, value in expected.get("fields", {}).items():
        assert finding["fields"].get(name) == value, f"{expected['rule']} field {name}: {finding['fields']}"
    for text in expected.get("title_has", []):
        assert text in finding["title"], f"{expected['rule']} title lacks {text!r}: {finding['title']}"
    for text in expected.get("remedy_has", []):
        assert text in finding["remedy"], f"{expected['rule']} remedy lacks {text!r}:\n{finding['remedy']}"
    for text in expected.get("remedy_lacks", []):
        assert text not in finding["remedy"], f"{expected['rule']} remedy has {text!r}:\n{finding['remedy']}"


def test_every_sample_has_an_expectation() -> None:
    on_disk = {f"{d}/{p.name}" for d in SAMPLE_DIRS for p in (SAMPLES / d).iterdir()}
    listed = [s["path"] for s in EXPECTED]
    assert len(listed) == len(set(listed)), "a sample is listed twice"
    assert on_disk == set(listed)


def test_every_category_has_two_samples() -> None:
    for category in CATEGORIES:
        samples = [s["path"] for s in EXPECTED
                   if s.get("category") == category or category in s.get("also", [])]
        assert len(samples) >= 2, f"{category}: {samples}"
    clean = [s["path"] for s in EXPECTED if s["exit"] == 0]
    assert len(clean) >= 2


def test_every_category_is_a_root_cause_somewhere() -> None:
    roots = {s.get("category") for s in EXPECTED}
    assert set(CATEGORIES) <= roots, sorted(set(CATEGORIES) - roots)


def test_shipped_rule_examples_pass() -> None:
    catalogue = load_catalogue(include_user=False)
    total, failures = check_rules(catalogue)
    assert total >= 2 * len(catalogue.rules)
    assert failures == []


def test_rules_test_command_passes_without_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "test", "--no-user-rules"]) == 0
    out = capsys.readouterr()
    assert "0 failed" in out.out + out.err
    assert "warning" not in out.out + out.err


def test_no_rule_is_tried_on_ordinary_training_lines() -> None:
    assert noisy_prefilters(load_catalogue(include_user=False)) == []


def test_shipped_rules_cover_the_categories_and_carry_examples() -> None:
    catalogue = load_catalogue(include_user=False)
    assert catalogue.sources == [str(shipped_rules_dir())]
    assert set(CATEGORIES) <= {rule.category for rule in catalogue.rules}
    for rule in catalogue.rules:
        assert rule.examples_match and rule.examples_no_match, rule.id
        assert rule.remedy.strip(), rule.id
        assert "NCCL_TIMEOUT=" not in rule.remedy, rule.id


@pytest.mark.parametrize("stop_signal", [None, "SIGTERM"])
def test_a_stop_that_monitor_run_forwarded_is_no_failure(stop_signal: str | None) -> None:
    """The sigterm sample's torchrun lines are the same whoever sent the signal: from outside (a
    kill, scancel) they are the root cause; when `monitor run` forwarded its own stop request, the
    runner's 'Stopped on request' says so and the launcher's lines are no failure."""
    from monitor.runner import explain

    from monitor.session.job_session import JobSession

    log = SAMPLES / "demo/sigterm-torchrun-2ranks.log"
    session = JobSession([log], load_catalogue(include_user=False))  # as `monitor run` holds it
    if stop_signal is not None:
        session.request_stop()
    session.close()
    session.job_ended(explain.exit_finding(log, 1, stop_signal))
    diagnosis = session.diagnosis()
    stopped = next(f for f in diagnosis.findings if f.rule == "torchrun-stopped-by-signal")
    if stop_signal is None:
        assert diagnosis.root_cause is stopped and stopped.severity == "error"
        assert "scancel" in stopped.remedy
        assert [f.role for f in diagnosis.findings if f.rule == "job-exit"] == ["confirm"]
    else:
        assert diagnosis.root_cause is None
        assert stopped.severity == "info" and "scancel" not in stopped.remedy
        assert [f.severity for f in diagnosis.findings if f.severity == "error"] == []
