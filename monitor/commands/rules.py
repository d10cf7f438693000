"""`monitor rules`: List or test the rule catalogue."""

from __future__ import annotations

import argparse

from monitor.commands.options import add_rule_dirs_options, add_rules_options, load_rules


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("rules", help="List or test the rule catalogue.", description="List or test the rule catalogue.")
    actions = parser.add_subparsers(dest="rules_command", metavar="ACTION")
    listing = actions.add_parser("list", help="Show every rule: id, category, severity, role, title.")
    listing.add_argument("--json", action="store_true", help="print the rules as JSON")
    testing = actions.add_parser("test", help="Run every rule's examples; exit 1 if any fails.")
    testing.add_argument("dir", nargs="?", help="test only the rules of this directory (loaded over the shipped ones)")
    evaluating = actions.add_parser(
        "eval", help="Score the diagnosis on a labelled corpus of real logs; exit 1 below its floor.",
        description="Diagnose every case of a labelled corpus (NAME.log beside NAME.toml: the format is in "
                    "sample_logs/real/README.md) and score the root cause against each label: accuracy per "
                    "category, a confusion table, clean logs flagged, root-rank accuracy, the calibration of "
                    "each confidence level and every miss, for all cases and for the check third. Exit 0, 1 "
                    "when a score is below DIR/floor.toml, 2 on a bad case.")
    evaluating.add_argument("corpus", metavar="DIR", help="the corpus folder (e.g. sample_logs/real)")
    evaluating.add_argument("--json", action="store_true", help="print the scores as JSON")
    evaluating.add_argument("--check-misses", action="store_true",
                            help="list the check third's misses too (read them only at the end of an issue; "
                                 "--json always has them)")
    learning = actions.add_parser(
        "learn", help="Train the second opinion on a labelled corpus (never on its check third).",
        description="Train the learned second opinion (used where the rules are unsure) on a labelled corpus "
                    "in the format `rules eval` reads, leaving out its check third; no clean log that the rules "
                    "(shipped, the user's, --rules) leave to it scores above its thresholds. Deterministic: the "
                    "same corpus and rules give the same file. Needs scikit-learn (pip install 'monitor[learn]').")
    learning.add_argument("corpus", metavar="DIR", help="the corpus folder (e.g. sample_logs/real)")
    learning.add_argument("-o", "--output", required=True, metavar="MODEL",
                          help="the model file to write (put it in a rule directory as model.json, or pass --model)")
    learning.set_defaults(lang="en")
    add_rule_dirs_options(learning)
    for action in (listing, testing, evaluating):
        add_rules_options(action)
    parser.set_defaults(func=run, rules_parser=parser)


def run(args: argparse.Namespace) -> int:
    if not args.rules_command:
        args.rules_parser.print_help()
        return 2
    if args.rules_command in ("test", "eval"):
        args.lang = "en"  # the translations are checked against the English texts, whatever the locale
    catalogue = load_rules(args, (args.dir,) if getattr(args, "dir", None) else ())
    if args.rules_command == "learn":
        return _learn(catalogue, args.corpus, args.output)
    if args.rules_command == "list":
        return _list(catalogue, args.json)
    if args.rules_command == "eval":
        return _eval(catalogue, args.corpus, args.json, args.check_misses)
    return _test(catalogue, args.dir)


def _learn(catalogue, corpus: str, output: str) -> int:
    from pathlib import Path

    from monitor.diagnosis.corpus import CorpusError, load_corpus
    from monitor.diagnosis.learn import LearnError, asked_by, train, write_model
    from monitor.text import say

    try:
        cases = load_corpus(Path(corpus))
        model = train(cases, asked_by(catalogue))
        write_model(model, Path(output))
    except (CorpusError, LearnError) as exc:
        say(str(exc))
        return 2
    print(f"trained on {model['trained_on']['cases']} cases of {len(model['categories'])} categories "
          f"({len(model['terms'])} terms; the check third left out): {output}")
    return 0


def _eval(catalogue, corpus: str, as_json: bool, check_misses: bool) -> int:
    from pathlib import Path

    from monitor.diagnosis.corpus import CorpusError, load_corpus, load_floor
    from monitor.diagnosis.evaluate import evaluate
    from monitor.text import safe_json, say

    try:
        cases = load_corpus(Path(corpus))
        floor = load_floor(Path(corpus))
    except (CorpusError, OSError) as exc:
        say(str(exc) if isinstance(exc, CorpusError) else f"{corpus}: {exc.strerror or exc}")
        return 2
    if not cases:
        say(f"{corpus}: no cases (NAME.log beside NAME.toml) in this directory")
        return 2
    result = evaluate(cases, catalogue, floor)
    if as_json:
        print(safe_json(result, indent=2))
    else:
        from monitor.diagnosis.eval_report import render

        print(render(result, corpus, check_misses), end="")
    return 1 if result["below_floor"] else 0


def _list(catalogue, as_json: bool) -> int:
    import json

    if as_json:
        records = [
            {"id": r.id, "category": r.category, "severity": r.severity, "role": r.role, "title": r.title,
             "source": r.source, "line": r.line, "prefilter": list(r.prefilter)}
            for r in catalogue.rules
        ]
        print(json.dumps(records, indent=2))
        return 0
    import sys

    from monitor.text import safe_text

    rows = [[safe_text(value) for value in (r.id, r.category, r.severity, r.role, r.title)] for r in catalogue.rules]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table("id", "category", "severity", "role", "title", box=None, header_style="bold")
        for row in rows:  # Text, never markup: a user's rule pack may hold [brackets] in a title
            table.add_row(*map(Text, row))
        console = Console(highlight=False)
        console.print(table)
        console.print(f"{len(catalogue)} rules from {', '.join(catalogue.sources) or 'no rule directory'}", markup=False)
        return 0
    # Piped (grep, CI logs): whole rows, columns as wide as their widest cell, no trailing spaces.
    header = ["id", "category", "severity", "role", "title"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4])
    print(f"{len(catalogue)} rules from {safe_text(', '.join(catalogue.sources)) or 'no rule directory'}")
    return 0


def _test(catalogue, only_dir: str | None) -> int:
    from pathlib import Path

    from monitor.diagnosis.ruletest import check_rules, noisy_prefilters

    rules = catalogue.rules
    if only_dir:
        base = Path(only_dir).resolve()
        rules = [r for r in rules if Path(r.source).resolve().parent == base]
    # The whole catalogue includes the shipped advice (advice.toml); a directory only its rules.
    examples, failures = check_rules(catalogue, rules if only_dir else None)
    for line in noisy_prefilters(catalogue, rules) + failures:
        print(line)
    print(f"{len(rules)} rules, {examples} examples, {len(failures)} failed")
    if only_dir:
        return 1 if failures else 0
    from monitor.diagnosis.ruletest import check_formats
    from monitor import formats  # the log formats the rules are matched behind

    wrong = check_formats()
    for line in wrong:
        print(line)
    print(f"{formats.entry_count()} log formats, {formats.sample_count()} samples, {len(wrong)} failed")
    return 1 if failures or wrong else 0
