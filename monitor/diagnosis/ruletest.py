"""Running the rules' own examples (``monitor rules test``, CI): each ``match`` example must
produce its rule's finding and each ``no_match`` must not, through the real engine; and the
log formats' samples (``formats.toml``) must read as they say."""

from __future__ import annotations

import time

from monitor.diagnosis.catalogue import Catalogue, Rule
from monitor.diagnosis.engine import Engine
from monitor.diagnosis.advice import ADVICE_FILE
from monitor.diagnosis.advice import shipped as shipped_advice
from monitor.diagnosis.knobs import KNOBS_FILE, mentions, unknown
from monitor.diagnosis.templates import render
from monitor.diagnosis.timestamps import parse_timestamp
from monitor.diagnosis.literals import required_literals
from monitor import formats
from monitor.logs.ranks import parse_prefix, rank_in_text
from monitor.model import LogLine
from monitor.progress.parse import parse_progress
from monitor.text import clean


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


# Lines every healthy training job prints by the million: a rule whose prefilter occurs in
# them is tried on most lines, which makes `diagnose` several times slower on big logs.
ORDINARY_LINES = (
    "[rank3]: {'loss': 2.1234, 'grad_norm': 0.7731, 'learning_rate': 2.9e-05, 'epoch': 0.51}",
    "[rank3]: step 1200 | loss 1.9876 | grad norm 0.52 | tokens/s 33120 | mem 61.2 GiB",
    "Epoch 3:  45%|####5     | 1800/4000 [12:01<14:40,  2.50it/s, loss=1.93, v_num=3]",
    "node1:41003:41103 [3] NCCL INFO Channel 07/32 : 3[3] -> 4[4] via P2P/CUMEM/read",
    "node1:41003:41103 [3] NCCL INFO comm 0x5581 rank 3 nranks 8 cudaDev 3 busId 30000 commId 0x9f - Init COMPLETE",
    "INFO:root:Saving checkpoint to /ckpt/step_1200 (rank 0)",
    "/opt/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:92: UserWarning: None of the inputs have requires_grad=True. Gradients will be None",
    "eval: accuracy 0.8123 perplexity 6.71 time 12.3s",
)


def noisy_prefilters(catalogue: Catalogue, rules: list[Rule] | None = None) -> list[str]:
    """One warning per rule whose prefilter occurs in ordinary training lines."""
    prefilter = catalogue.prefilter
    index = {rule.id: i for i, rule in enumerate(catalogue.rules)}
    warnings = []
    for rule in catalogue.rules if rules is None else rules:
        for line in ORDINARY_LINES:
            if prefilter.triggers(line.encode(), index[rule.id]):
                warnings.append(
                    f"{rule.where}: rule {rule.id}: warning: its prefilter {list(rule.prefilter)} occurs in "
                    f"ordinary lines such as {line[:60]!r}: diagnose will try it on most lines of a big log; "
                    "give prefilter = [...] with text only the failure prints"
                )
                break
        for advice in rule.advice:
            for condition in (advice.unless_log, advice.if_log):
                literal = condition and _ordinary_hit(condition.pattern)
                if literal:
                    warnings.append(
                        f"{rule.where}: rule {rule.id}: warning: an advice log condition is looked for through "
                        f"{literal!r}, which ordinary lines print: diagnose will check it on most lines of a "
                        "big log; spell the pattern so that its literal text is what only that setting prints"
                    )
    return warnings


def _ordinary_hit(pattern: str) -> str | None:
    """A literal through which the prefilter looks for ``pattern`` that ordinary lines contain
    (in the spellings searched for a case-insensitive pattern), or None."""
    spellings = (lambda s: {s, s.lower(), s.upper(), s.capitalize()}) if "(?i" in pattern else (lambda s: {s})
    for literal in required_literals(pattern) or ():
        if any(form in line for form in spellings(literal) for line in ORDINARY_LINES):
            return literal
    return None


def unknown_knobs(catalogue: Catalogue, rule: Rule) -> list[str]:
    """One line per knob that ``rule``'s title, remedy or advice names and no registry holds."""
    texts = [rule.title, rule.confirmed_title, rule.remedy, *(advice.text for advice in rule.advice)]
    names = dict.fromkeys(name for text in texts for name in unknown(text, catalogue.knobs))
    return [
        f"{rule.where}: rule {rule.id}: names {name!r}, which no {KNOBS_FILE} holds: check it in the library's "
        f"source or docs and add it to the registry with where it was verified"
        for name in names
    ]


def translated_knobs(rule: Rule) -> list[str]:
    """One line per translated text that names other knobs than its English text: a translation
    keeps names, variables and commands as they are."""
    pairs = [(f"{key}_{lang}", getattr(rule, key), text)
             for lang, texts in rule.translations.items() for key, text in texts.items()]
    pairs += [(f"advice #{n + 1} text_{lang}", advice.text, text)
              for n, advice in enumerate(rule.advice) for lang, text in advice.translations.items()]
    failures = []
    for key, english, translated in pairs:
        if (theirs := set(mentions(translated))) != (ours := set(mentions(english))):
            differ = sorted(theirs ^ ours)
            failures.append(f"{rule.where}: rule {rule.id}: {key} names other knobs than the English text: "
                            f"{', '.join(differ)}")
    return failures


def check_rules(catalogue: Catalogue, rules: list[Rule] | None = None) -> tuple[int, list[str]]:
    """(number of examples run, failure lines) for ``rules`` (default: the whole catalogue): failed
    examples, and knobs the rules' remedies name that the registry does not hold."""
    failures: list[str] = []
    total = 0
    for rule in catalogue.rules if rules is None else rules:
        total += len(rule.examples_match) + len(rule.examples_no_match)
        failures.extend(check_rule(catalogue, rule))
        failures.extend(unknown_knobs(catalogue, rule))
        failures.extend(translated_knobs(rule))
    if rules is None:
        total += len(shipped_advice())
        failures.extend(check_advice(catalogue))
    return total, failures


def check_advice(catalogue: Catalogue) -> list[str]:
    """The shipped advice (advice.toml): each example renders and holds its text, and every knob
    it names is in the registry."""
    failures = []
    for entry in shipped_advice().values():
        where = f"{ADVICE_FILE}: advice {entry.id}"
        text = render(entry.text, entry.example_fields)
        if entry.example_contains not in text:
            failures.append(f"{where}: example does not contain {entry.example_contains!r}: {text!r}")
        failures.extend(f"{where}: names {name!r}, which no {KNOBS_FILE} holds"
                        for name in dict.fromkeys(unknown(entry.text, catalogue.knobs)))
        for lang, text in entry.translations.items():
            if (theirs := set(mentions(text))) != (ours := set(mentions(entry.text))):
                failures.append(f"{where}: text_{lang} names other knobs than the English text: "
                                f"{', '.join(sorted(theirs ^ ours))}")
    return failures


def check_formats() -> list[str]:
    """Every sample that the functions using its entry do not read as it says: one line each,
    naming the file, the entry and the sample."""
    problems: list[str] = []

    def fail(kind: str, entry: dict, sample: dict, said) -> None:
        problems.append(f"{formats.FORMATS_FILE.name}: {kind} {entry['name']}: sample {sample['line']!r}: read as {said!r}")

    for kind in formats.KINDS[:3]:
        for entry in formats.TABLE[kind]:
            for sample in entry.get("samples", []):
                prefix = parse_prefix(sample["line"])
                if (prefix.rank, prefix.stream, prefix.body) != (sample.get("rank"), sample.get("stream"), sample["body"]):
                    fail(kind, entry, sample, (prefix.rank, prefix.stream, prefix.body))
    for entry in formats.TABLE["rank_tag"]:
        for sample in entry["samples"]:
            if rank_in_text(sample["line"]) != sample["rank"]:
                fail("rank_tag", entry, sample, rank_in_text(sample["line"]))
    for entry in formats.TABLE["timestamp"]:
        for sample in entry["samples"]:
            seconds = parse_timestamp(sample["line"])
            shape = "%Y-%m-%d %H:%M:%S" if len(sample["at"]) > 14 else "%m-%d %H:%M:%S"
            said = time.strftime(shape, time.localtime(seconds)) if seconds is not None else ""
            if said != sample["at"]:
                fail("timestamp", entry, sample, said)
    for entry in formats.TABLE["level"]:
        for sample in entry["samples"]:
            if formats.line_level(sample["line"]) != sample["level"]:
                fail("level", entry, sample, formats.line_level(sample["line"]))
    for sample in formats.TABLE["progress_sample"]:
        event = parse_progress(sample["line"])
        read_as = None if event is None else {
            "step": event.step, "total": event.total, "epoch": event.epoch, "loss": event.loss,
            "throughput": event.throughput, "unit": event.throughput_unit}
        wanted = None if sample.get("none") else {
            key: sample.get(key) for key in ("step", "total", "epoch", "loss", "throughput", "unit")}
        if not _same_progress(read_as, wanted):
            problems.append(f"{formats.FORMATS_FILE.name}: progress: sample {sample['line']!r}: read as {read_as!r}")
    for entry in formats.TABLE["message_start"]:
        for sample in entry["samples"]:
            if bool(formats.MESSAGE_START.match(sample["line"])) != sample["starts"]:
                fail("message_start", entry, sample, not sample["starts"])
    return problems


def _same_progress(said: dict | None, wanted: dict | None) -> bool:
    """Progress read as a sample says (nan equals nan)."""
    if said is None or wanted is None:
        return said is wanted
    return all(a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
               for a, b in ((said[k], wanted[k]) for k in said))
