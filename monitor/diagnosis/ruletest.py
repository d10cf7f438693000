"""Running the rules' own examples (``monitor rules test``, CI): each ``match`` example must
produce its rule's finding and each ``no_match`` must not, through the real engine."""

from __future__ import annotations

from monitor.diagnosis.catalogue import Catalogue, Rule
from monitor.diagnosis.engine import Engine
from monitor.diagnosis.model import LogLine
from monitor.logs.decode import clean


def example_findings(catalogue: Catalogue, example: str, name: str = "<example>") -> tuple[list, list[str]]:
    """The findings and problems of one example text (a multi-line string is one record)."""
    engine = Engine(catalogue)
    for number, raw in enumerate(example.strip("\n").split("\n"), start=1):
        engine.feed(LogLine(name, number, clean(raw)))
    engine.flush()
    return engine.findings, engine.problems


def check_rule(catalogue: Catalogue, rule: Rule) -> list[str]:
    """One line per failed example of ``rule``."""
    failures = []
    for expected, examples in ((True, rule.examples_match), (False, rule.examples_no_match)):
        for number, example in enumerate(examples, start=1):
            findings, problems = example_findings(catalogue, example, f"<{rule.id} example>")
            got = [f.rule for f in findings]
            first_line = example.strip().splitlines()[0] if example.strip() else ""
            if problems:
                failures.append(f"{rule.where}: rule {rule.id}: example {first_line[:80]!r}: {problems[0]}")
            elif expected and rule.id not in got:
                found = ", ".join(got) or "nothing"
                failures.append(f"{rule.where}: rule {rule.id}: match example {number} not matched (found {found}): {first_line[:100]!r}")
            elif not expected and rule.id in got:
                failures.append(f"{rule.where}: rule {rule.id}: no_match example {number} matched: {first_line[:100]!r}")
    return failures


def check_rules(catalogue: Catalogue, rules: list[Rule] | None = None) -> tuple[int, list[str]]:
    """(number of examples run, failure lines) for ``rules`` (default: the whole catalogue)."""
    failures: list[str] = []
    total = 0
    for rule in catalogue.rules if rules is None else rules:
        total += len(rule.examples_match) + len(rule.examples_no_match)
        failures.extend(check_rule(catalogue, rule))
    return total, failures
