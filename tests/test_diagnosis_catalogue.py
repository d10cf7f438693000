"""Loading rule files: schema, one-line file:line errors, overrides, `monitor rules list/test`."""

from __future__ import annotations

import json

import pytest
from diagnosis_helpers import RULES, catalogue_from, write_rules

from monitor.cli import main
from monitor.diagnosis.catalogue import RuleError, load_catalogue
from monitor.diagnosis.conditions import Condition, ConditionError, parse_number
from monitor.diagnosis.literals import required_literals

MINIMAL = '''
[[rule]]
id = "disk-full"
category = "disk_full"
severity = "error"
role = "root"
title = "Disk full"
patterns = ['No space left on device']
remedy = "Free space."
'''


def test_loads_rules_with_derived_prefilters(tmp_path):
    catalogue = catalogue_from(tmp_path)
    oom = catalogue.by_id["cuda-oom"]
    assert oom.category == "cuda_oom" and oom.role == "root"
    assert "CUDA out of memory. Tried to allocate " in oom.prefilter
    assert oom.advice[0].when is not None and oom.advice[0].unless_log is not None
    assert oom.line == 2  # the [[rule]] header


@pytest.mark.parametrize(
    "mutation, line, message",
    [
        (("patterns = ['No space", "patern = ['No space"), 8, "unknown key 'patern'"),
        (("'No space left on device'", "'No space (left'"), 8, "bad pattern"),
        (('severity = "error"', 'severity = "fatal"'), 5, "severity must be one of"),
        (('category = "disk_full"', 'category = "disk_fll"'), 4, "unknown category 'disk_fll' (did you mean 'disk_full'?)"),
        (('category = "disk_full"', 'category = "zzz"'), 4, "unknown category 'zzz' (allowed: cuda_oom,"),
        (('remedy = "Free space."', 'remedy = "Free {spaec}."'), 9, "names {spaec}"),
        (('title = "Disk full"', 'title = "Disk full'), 7, "invalid TOML"),
        (("patterns = ['No space left on device']", "patterns = ['\\d+']"), 8, "cannot derive a literal prefilter"),
        (('role = "root"', 'role = "root"\nranked = "no"'), 7, "'ranked' must be true or false"),
        (('role = "root"', 'role = "root"\ndistinct = ["site"]'), 7, "'distinct' must list fields the patterns capture"),
    ],
)
def test_rule_file_errors_name_file_line_and_rule(tmp_path, mutation, line, message):
    path = write_rules(tmp_path / "pack", MINIMAL.replace(*mutation))
    with pytest.raises(RuleError) as caught:
        load_catalogue([path.parent], include_user=False, include_shipped=False)
    text = str(caught.value)
    assert text.startswith(f"{path}:{line}: ")
    assert message in text
    assert "\n" not in text
    if "TOML" not in message:
        assert "rule disk-full:" in text


def test_advice_when_must_be_arithmetic(tmp_path):
    bad = MINIMAL + '[[rule.advice]]\ntext = "x"\nwhen = "__import__(\'os\')"\n'
    path = write_rules(tmp_path / "pack", bad)
    with pytest.raises(RuleError, match=r":12: rule disk-full: when expression"):
        load_catalogue([path.parent], include_user=False, include_shipped=False)


def test_user_rule_overrides_shipped_one_by_id(tmp_path):
    base = write_rules(tmp_path / "base", MINIMAL).parent
    override = write_rules(tmp_path / "mine", MINIMAL.replace('title = "Disk full"', 'title = "My disk rule"')).parent
    catalogue = load_catalogue([base, override], include_user=False, include_shipped=False)
    assert [r.title for r in catalogue.rules] == ["My disk rule"]


def test_xdg_config_rules_are_loaded(tmp_path, monkeypatch):
    write_rules(tmp_path / "cfg" / "monitor" / "rules", MINIMAL)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert "disk-full" in load_catalogue(include_shipped=False).by_id
    assert "disk-full" not in load_catalogue(include_shipped=False, include_user=False).by_id


def test_duplicate_ids_in_one_directory_are_an_error(tmp_path):
    write_rules(tmp_path / "pack", MINIMAL, "a.toml")
    write_rules(tmp_path / "pack", MINIMAL, "b.toml")
    with pytest.raises(RuleError, match="duplicate id"):
        load_catalogue([tmp_path / "pack"], include_user=False, include_shipped=False)


def test_required_literals():
    assert required_literals(r"CUDA out of memory\. Tried (?P<x>\d+)") == {"CUDA out of memory. Tried "}
    assert required_literals(r"(?:foo bar|baz qux) x") == {"foo bar", "baz qux"}
    assert required_literals(r"colou?r scheme") == {"r scheme"}
    assert required_literals(r"\x41BCDEF") == {"BCDEF"}
    assert required_literals(r"a(?:hello|world)?b") is None
    assert required_literals(r"\d+") is None


def test_conditions_compare_sizes_as_bytes():
    assert parse_number("2.00 GiB") == 2 * 1024**3
    assert parse_number("600000") == 600000
    assert parse_number("abc") is None
    condition = Condition("unallocated >= 0.25 * tried and not tried > 1e12")
    assert condition.holds({"unallocated": "3.00 GiB", "tried": "2.00 GiB"})
    assert not condition.holds({"unallocated": "100 MiB", "tried": "2.00 GiB"})
    assert not condition.holds({"tried": "2.00 GiB"})  # missing field: no advice
    with pytest.raises(ConditionError):
        Condition("tried.__class__")


def test_cli_rules_list_and_json(tmp_path, capsys):
    pack = write_rules(tmp_path / "pack", RULES).parent
    assert main(["rules", "list", "--no-user-rules", "--rules", str(pack)]) == 0
    out = capsys.readouterr().out
    assert "cuda-oom" in out and "CUDA out of memory on rank {rank}" in out
    assert main(["rules", "list", "--json", "--no-user-rules", "--rules", str(pack)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"id": "sigkill", "role": "cascade"}.items() <= next(r for r in rows if r["id"] == "sigkill").items()


def test_cli_rules_test_passes_and_fails(tmp_path, capsys):
    good = write_rules(tmp_path / "good", RULES).parent
    assert main(["rules", "test", str(good), "--no-user-rules"]) == 0
    assert "0 failed" in capsys.readouterr().out
    broken = RULES.replace('no_match = ["If out-of-memory', 'no_match = ["CUDA out of memory. Tried to allocate 1 GiB", "If out-of-memory')
    bad = write_rules(tmp_path / "bad", broken).parent
    assert main(["rules", "test", str(bad), "--no-user-rules"]) == 1
    out = capsys.readouterr().out
    assert "rule cuda-oom: no_match example 1 matched" in out


def test_cli_rule_error_exits_2_with_one_line(tmp_path, capsys):
    pack = write_rules(tmp_path / "pack", MINIMAL.replace("patterns", "patern"))
    assert main(["rules", "list", "--no-user-rules", "--rules", str(pack.parent)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"monitor: {pack}:8: rule disk-full: unknown key 'patern'")
    assert len(err.splitlines()) == 1


def test_rules_test_warns_about_prefilters_found_in_ordinary_lines(tmp_path, capsys):
    noisy = MINIMAL.replace("patterns = ['No space left on device']", "patterns = ['loss (?P<v>nan)']\nprefilter = ['loss']")
    pack = write_rules(tmp_path / "pack", noisy).parent
    assert main(["rules", "test", str(pack), "--no-user-rules"]) == 0
    out = capsys.readouterr().out
    assert "rule disk-full: warning: its prefilter ['loss'] occurs in ordinary lines" in out
    quiet = write_rules(tmp_path / "quiet", MINIMAL).parent
    assert main(["rules", "test", str(quiet), "--no-user-rules"]) == 0
    assert "warning" not in capsys.readouterr().out


def test_templates_drop_lines_with_missing_fields_and_titles_show_question_marks():
    from monitor.diagnosis.templates import render

    remedy = "Tried to allocate {tried}.\nOnly {free} was free.\nUse {{braces}} literally."
    assert render(remedy, {"tried": "2.00 GiB"}) == "Tried to allocate 2.00 GiB.\nUse {braces} literally."
    assert render("OOM on rank {rank} ({tried})", {"rank": "3"}, missing="?") == "OOM on rank 3 (?)"


@pytest.mark.parametrize("value, message", [
    ("'(unclosed'", "bad if_log pattern"),
    ("'\\d+'", "if_log pattern '\\\\d+' needs literal text"),
    ("3", "advice if_log must be a string"),
])
def test_advice_if_log_is_validated_like_unless_log(tmp_path, value, message):
    path = write_rules(tmp_path / "pack", MINIMAL + f'[[rule.advice]]\ntext = "x"\nif_log = {value}\n')
    with pytest.raises(RuleError) as caught:
        load_catalogue([path.parent], include_user=False, include_shipped=False)
    assert str(caught.value).startswith(f"{path}:12: rule disk-full: ")  # the if_log line
    assert message in str(caught.value)


@pytest.mark.parametrize("key", ["if_record", "unless_record"])
def test_a_rule_record_condition_is_validated_where_it_is_written(tmp_path, key):
    path = write_rules(tmp_path / "pack", MINIMAL + f"{key} = '(unclosed'\n")
    with pytest.raises(RuleError) as caught:
        load_catalogue([path.parent], include_user=False, include_shipped=False)
    assert str(caught.value).startswith(f"{path}:10: rule disk-full: bad {key} pattern")


def test_a_rule_matches_only_where_its_record_allows(tmp_path):
    from monitor.diagnosis.ruletest import example_findings

    path = write_rules(tmp_path / "pack", MINIMAL + "unless_record = 'synchronize\\.py'\n"
                       + MINIMAL.replace('"disk-full"', '"shm-lock"').replace('"disk_full"', '"shm_exhausted"')
                       + "if_record = 'synchronize\\.py'\n")
    catalogue = load_catalogue([path.parent], include_user=False, include_shipped=False)
    lock = 'Traceback (most recent call last):\n  File "/usr/lib/python3.10/multiprocessing/synchronize.py", line 57, in __init__\n    sl = self._semlock = _multiprocessing.SemLock(\nOSError: [Errno 28] No space left on device'
    assert [f.rule for f in example_findings(catalogue, lock)[0]] == ["shm-lock"]
    assert [f.rule for f in example_findings(catalogue, "OSError: [Errno 28] No space left on device")[0]] == ["disk-full"]


def test_an_advice_unless_field_skips_it_where_a_pattern_captured_that_field(tmp_path):
    """An advice for the rule's other patterns: shown where the finding lacks the field, not where
    the pattern that captures it matched; a field no pattern captures is refused where it is written."""
    from monitor.diagnosis.ruletest import example_findings

    rule = MINIMAL.replace("patterns = ['No space left on device']",
                           "patterns = ['No space left on device', '(?P<quota>Disk quota exceeded)']")
    advice = '\n[[rule.advice]]\ntext = "Delete old checkpoints."\nunless_field = ["quota"]\n'
    catalogue = load_catalogue([write_rules(tmp_path / "pack", rule + advice).parent], include_user=False,
                               include_shipped=False)
    [full], _ = example_findings(catalogue, "OSError: [Errno 28] No space left on device")
    [quota], _ = example_findings(catalogue, "OSError: [Errno 122] Disk quota exceeded")
    assert "Delete old checkpoints." in full.remedy and "Delete old checkpoints." not in quota.remedy
    path = write_rules(tmp_path / "bad", MINIMAL + advice)
    with pytest.raises(RuleError) as caught:
        load_catalogue([path.parent], include_user=False, include_shipped=False)
    assert str(caught.value).startswith(f"{path}:13: rule disk-full: advice unless_field must name fields")  # its line


def test_categories_are_the_documented_ones_and_every_shipped_rule_uses_one():
    import re
    from pathlib import Path

    from monitor.diagnosis.catalogue import CATEGORIES

    docs = (Path(__file__).resolve().parent.parent / "docs" / "rules-format.md").read_text(encoding="utf-8")
    section = docs.split("## Categories", 1)[1].strip().split("\n\n", 1)[0]
    documented = re.findall(r"(?:^|, |\) )([a-z][a-z0-9_]+)(?= \(|,|\.$|$)", section.replace("\n", " "), re.M)
    assert set(documented) == set(CATEGORIES)
    assert {rule.category for rule in load_catalogue([], include_user=False).rules} <= set(CATEGORIES)


@pytest.mark.parametrize("setup, message", [
    (lambda d: d.mkdir(), "rules directory holds no *.toml rule file"),
    (lambda d: None, "no such rules directory"),
    (lambda d: d.write_text("x"), "not a directory of rule files"),
])
def test_cli_rules_dir_that_is_missing_empty_or_a_file_is_a_usage_error(tmp_path, capsys, setup, message):
    rules = tmp_path / "myrules"
    setup(rules)
    assert main(["diagnose", "--no-user-rules", "--rules", str(rules), str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"monitor: {rules}: {message}"


def test_the_shipped_patterns_compile_when_first_used_and_a_users_as_they_load(tmp_path):
    """Start-up compiles none of the shipped catalogue's patterns (CI compiles and tests them all:
    `monitor rules test`); a diagnosis compiles the rules whose literals a log holds. A user's
    rules are compiled as they load, so a bad pattern is still an error naming its file and line."""
    from monitor.diagnosis.catalogue import load_catalogue as load

    catalogue = load(include_user=False)
    assert all(rule.compiled is None for rule in catalogue.rules)
    oom = catalogue.by_id["cuda-oom"]
    assert oom.patterns[0].search("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert oom.compiled is not None
    assert load(include_user=False).by_id["cuda-oom"].compiled is None  # each load's rules are its own
    (tmp_path / "mine.toml").write_text(
        '[[rule]]\nid = "mine"\ncategory = "disk_full"\nseverity = "error"\nrole = "root"\n'
        'title = "t"\npatterns = ["quota (?P<used>\\\\d+) exceeded"]\n'
        '[rule.examples]\nmatch = ["quota 5 exceeded"]\n')
    mine = load(extra_dirs=[tmp_path], include_user=False).by_id["mine"]
    assert mine.compiled is not None


def test_own_error_belongs_to_a_timeout_category(tmp_path):
    path = write_rules(tmp_path / "pack", MINIMAL + "own_error = true\n")
    with pytest.raises(RuleError) as caught:
        load_catalogue([path.parent], include_user=False, include_shipped=False)
    assert str(caught.value).startswith(f"{path}:10: rule disk-full: own_error marks a rank's own error in a timeout category")
