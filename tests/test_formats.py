"""Log formats as data (``monitor/formats.toml``): every entry's samples read as they say,
every entry has samples, and an entry added to the table is used without an edit of the code."""

from __future__ import annotations

import tomllib

import regex

from monitor.diagnosis.ruletest import check_formats
from monitor import formats
from monitor.logs.ranks import parse_prefix


def test_every_sample_of_every_format_reads_as_it_says():
    assert check_formats() == []


def test_every_format_has_samples_and_every_prefix_one_number_group():
    table = tomllib.loads(formats.FORMATS_FILE.read_text())
    for kind in ("prefix", "lead", "stream", "rank_tag", "timestamp", "level", "message_start"):
        for entry in table[kind]:
            assert entry.get("samples"), f"{kind} {entry['name']}"
    for entry in table["prefix"]:
        pattern = regex.compile(entry["pattern"])
        assert list(pattern.groupindex) == ["n"] and pattern.groups == 1, entry["name"]
        assert entry["number"] in formats.NUMBER_KINDS


def test_a_broken_sample_is_one_line_naming_the_file_the_entry_and_the_sample(monkeypatch):
    table = tomllib.loads(formats.FORMATS_FILE.read_text())
    table["prefix"][0]["samples"].append({"line": "[rank7]: x", "rank": 8, "body": "x"})
    monkeypatch.setattr(formats, "TABLE", table)
    (problem,) = check_formats()
    assert problem.startswith("formats.toml: prefix torch-rank: sample '[rank7]: x'") and "\n" not in problem


def test_a_new_prefix_entry_is_read_without_code(monkeypatch):
    """What one more [[prefix]] entry does: the alternation is built from the table."""
    from monitor.logs import ranks

    entries = (*formats.PREFIXES, formats.Prefix("hydra-job", "rank", r"\[job(?P<n>\d+)\]\|\s?"))
    monkeypatch.setattr(ranks, "PREFIX_TABLE", formats.prefix_table(entries))
    prefix = parse_prefix("[job5]| ValueError: bad")
    assert (prefix.rank, prefix.body) == (5, "ValueError: bad")


def test_a_broken_progress_sample_is_named_too(monkeypatch):
    table = tomllib.loads(formats.FORMATS_FILE.read_text())
    table["progress_sample"].append({"line": "step 7 loss 0.5", "step": 8, "loss": 0.5})
    monkeypatch.setattr(formats, "TABLE", table)
    (problem,) = check_formats()
    assert problem.startswith("formats.toml: progress: sample 'step 7 loss 0.5': read as ")
