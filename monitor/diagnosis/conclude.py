"""The decide stage's last step, over the whole job: what the findings alone cannot say.

After the root-cause policy has chosen among the findings, two reviewers read the whole log
where the rules were unsure: the learned second opinion (``second_opinion.review``: which known
failure the log resembles) and, given a run that ended well, what is new since it
(``novelty.compare``). Every mode concludes here, in this order: ``diagnose``
(``diagnose_paths``, its ``--against``), a job session's report and its live root cause (the
screen, ``watch --headless``, the Prometheus root-cause series, ``run``'s end report).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TypeGuard

import regex

from monitor.diagnosis import pyexc
from monitor.diagnosis.classify import rule_holds
from monitor.diagnosis.novelty import Against, compare
from monitor.diagnosis.root_cause import RankEvidence, choose, confidence, launcher_record, with_rank
from monitor.diagnosis.second_opinion import review
from monitor.diagnosis.secrets import mask
from monitor.diagnosis.tail import all_end_training, step_of, tail_lines
from monitor.logs.ranks import FileRanks
from monitor.model import Category, Diagnosis, Finding, chronological

# What is read for the last line of the rank that hung: each file's end (``tail.TAIL_BYTES``), and
# at most this much in all (a folder of a thousand nodes' files costs what a few do); the rank's
# own file first.
MAX_READ_BYTES = 8 << 20
# Where a log that ends in a wait is looked for: the first this many of the job's files, the last
# this many bytes of each.
WAIT_FILES = 16
WAIT_TAIL_BYTES = 64 * 1024
# Where the last value of a metric that went non-finite is looked for: its file's last this many bytes.
METRIC_TAIL_BYTES = 64 * 1024


def conclude(diagnosis: Diagnosis, catalogue, against: Against | None = None, *, finished: bool = False,
             ranks: RankEvidence | None = None, exited_ok: bool = False) -> Diagnosis:
    """``diagnosis`` with the second opinion where the rules were unsure, then compared with
    ``against`` (the last good run) when there is one; a rank named as the one that hung gets
    its last line quoted. ``finished``: the files are read post-mortem (``diagnose``), so one
    that ends in a wait ended there (``ended_waiting``), and a metric whose last value is finite
    again (``came_back_finite``) or an exception training went on after (``went_on_training``)
    did not end the run (``ranks``: the engine's rank evidence, for the root cause chosen again).
    ``exited_ok``: `monitor run` saw the job exit 0, which words alone (the second opinion's) do
    not overrule: a healthy run's debug lines resemble a failure's."""
    if finished:
        diagnosis = came_back_finite(diagnosis, catalogue, ranks)
        diagnosis = ended_waiting(went_on_training(diagnosis, catalogue, ranks), catalogue)
    if not exited_ok:
        diagnosis = review(diagnosis, catalogue)
    diagnosis = compared(diagnosis, against) if against is not None else diagnosis
    return on_every_rank(with_last_line(diagnosis), catalogue, ranks)


# What a job that exited 0 says of the failures its log shows (``exited_zero``).
HANDLED_NOTE = "the job exited 0: the program caught this exception and went on"
RESTARTED_NOTE = "the job exited 0: the launcher restarted the failed workers and the last attempt succeeded"
PASSED_NOTE = "the job exited 0 after these stacks were taken: the silence they were taken in passed"


def exited_zero(findings: list[Finding]) -> list[Finding]:
    """New values of ``findings`` for a job that exited 0 (warnings, never the cause): an
    exception no rule names was caught by the program (a retry loop that logged it), unless
    torch's excepthook printed it (only an uncaught one reaches it: the rank died, and what
    launched it did not pass that on, as a script's bare ``wait`` does not); and where a
    launcher recorded a worker that failed (torchrun exits 0 only when its last attempt of the
    worker group succeeded: --max-restarts restarted it), every error up to its last such record
    was recovered from; ranks' stacks taken in a silence show a wait that ended (a last
    checkpoint's copy after the last step, which no progress line follows)."""
    failed = [f for f in findings if f.severity == "error" and launcher_record(f)]
    last = chronological(failed)[-1] if failed else None
    revised = []
    for finding in findings:
        if finding.severity != "error":
            continue
        if last is not None and (finding is last or chronological([finding, last])[0] is finding):
            revised.append(replace(finding, severity="warning", role="cascade", confidence_note=RESTARTED_NOTE))
        elif finding.rule == pyexc.RULE_ID and finding.fields.get("excepthook") != "torch":
            revised.append(replace(finding, severity="warning", role="cascade", confidence_note=HANDLED_NOTE))
        elif finding.origin == "stacks" and finding.fields.get("trigger") == "stall":
            revised.append(replace(finding, severity="warning", role="cascade", confidence_note=PASSED_NOTE))
    return revised


# What the wait of a log that ends with one is said to be, in each output language.
ENDED_WAITING = {
    "en": ("the log ends while it waits: the job hung there, or the log was cut there",
           "The log ends here, still waiting: the job hung at this point (or the excerpt stops here)."),
    "zh": ("日志在等待中结束：作业卡在了这里，或者日志在这里被截断",
           "日志在这里结束，仍在等待：作业卡在了这一步（或者摘录到这里就停了）。"),
}


# The gradient norm as training logs name it ("grad_norm", "grad norm").
_GRAD_NORM = regex.compile(r"(?i)grad[_ ]norm")
# A metric's value as training logs write it: a number, or NaN/inf as Python, numpy and JSON spell them.
_VALUE = r"['\"]?\s*[:=]\s*['\"]?(?:tensor\()?([-+]?(?:nan|inf(?:inity)?|\d+(?:\.\d*)?(?:e[-+]?\d+)?))(?![a-z0-9_])"
# A run that went on past a non-finite step, in each output language: the title's addition, the
# remedy's first line.
CAME_BACK_FINITE = {
    "en": (" (finite again later)",
           "The log's last value of {metric} is finite ({value}): training went on past this step (a step the fp16 loss "
           "scaler skipped is the usual case), so this is no failure by itself; a value that stays non-finite is one."),
    "zh": ("（之后又恢复为有限值）",
           "日志中 {metric} 的最后一个值是有限的（{value}）：训练越过了这一步继续进行（通常是 fp16 的 loss scaler "
           "跳过了一步），所以它本身不是故障；一直保持非有限值才是。"),
}


def came_back_finite(diagnosis: Diagnosis, catalogue, ranks: RankEvidence | None = None) -> Diagnosis:
    """Where the root cause is a gradient norm gone NaN or inf (``nan_loss`` with a grad-norm
    ``metric``), or a rule's message whose run may still go on (its ``recovers`` metric: apex's
    loss scale fallen below 1, then the loss), and the log's last values of that norm and of the
    loss (or of that metric) are finite, the run went on past it: that is how a step the fp16 loss scaler
    skipped looks in mmcv's and the HF Trainer's logs (the scaler found inf in the gradients, the
    loss stays finite). The finding becomes a warning and the root cause is chosen again from the
    others, with the engine's rank evidence (none, in a run that went on). A loss that went NaN is
    still the failure: no scaler makes those. Post-mortem only: while the job runs, what comes next
    is not known yet."""
    root = diagnosis.root_cause
    if root is None or root.category != Category.NAN_LOSS or not root.file:
        return diagnosis
    metric = root.fields.get("metric", "")
    norm = bool(_GRAD_NORM.fullmatch(metric))
    recovers = rule.recovers if (rule := catalogue.by_id.get(root.rule)) is not None else ""
    if not norm and not recovers:
        return diagnosis
    last = _last_values(root.file, [metric, "loss"] if norm else [recovers])
    if any(value is not None and not math.isfinite(float(value)) for value in last.values()):
        return diagnosis
    said_of = metric if norm else recovers
    if last.get(said_of) is None:
        return diagnosis  # nothing later says the run went on
    added, said = CAME_BACK_FINITE.get(catalogue.lang, CAME_BACK_FINITE["en"])
    went_on = replace(root, severity="warning", role="cascade", title=root.title + added,
                      remedy=f"{said.format(metric=said_of, value=last[said_of])}\n{root.remedy}")
    return _chosen_again(diagnosis, went_on, catalogue, ranks)


def _chosen_again(diagnosis: Diagnosis, went_on: Finding, catalogue, ranks: RankEvidence | None) -> Diagnosis:
    """``diagnosis`` with its root cause replaced by ``went_on`` (that finding as a warning: the run
    went on past it) and the root cause chosen again from the findings, with the engine's rank
    evidence."""
    findings = [went_on if f.seq == went_on.seq else f for f in diagnosis.findings]
    chosen = with_rank(choose(findings, ranks, catalogue.lang), findings, ranks, catalogue.lang)
    sure, note = confidence(chosen, catalogue.lang)
    return replace(diagnosis, root_cause=chosen, findings=findings, confidence=sure, confidence_note=note)


# A run that went on training past an exception, in each output language: the title's addition,
# the remedy (replacing the exception's, which calls it uncaught), and where it was raised.
WENT_ON_TRAINING = {
    "en": (" (training went on after it)",
           "Training went on after this exception (step {step} and on, to the end of the log): it did not stop the "
           "job (the code caught and logged it, or the job resumed past it), though it may have cost a batch, a "
           "sample or an evaluation.",
           "It was raised at {frame_file}:{frame_line} in {frame_func}."),
    "zh": ("（之后训练仍在继续）",
           "这个异常之后训练仍在继续（从第 {step} 步起直到日志结束）：它没有让作业停下来（代码捕获并记录了它，"
           "或者作业越过它恢复了运行），不过它可能让你损失了一个 batch、一个样本或一次评估。",
           "它是在 {frame_file}:{frame_line} 的 {frame_func} 中抛出的。"),
}
# How many distinct steps past the exception, each beyond the last step before it, say the process
# went on: one could be a peer's step already under way when it died.
STEPS_PAST = 2
# The most exceptions passed over one after another (each a logged one training went on after).
MAX_PASSED_OVER = 8


def went_on_training(diagnosis: Diagnosis, catalogue, ranks: RankEvidence | None = None) -> Diagnosis:
    """Where the root cause is an exception no rule names (``python-exception``: a traceback, or
    its last line alone) and the job went on training after it (every file ends in training
    progress, and its rank's lines, where they name one, show steps past the last one before it),
    it did not end the job: a traceback the code caught and logged (a data loader skipping a bad
    sample, an evaluation hook). The finding becomes a warning and the root cause is chosen again
    from the others, which may be another such exception. Post-mortem only: while the job runs,
    what comes next is not known yet."""
    if not _unnamed_exception(diagnosis.root_cause) or not all_end_training(diagnosis.files):
        return diagnosis  # the files' ends are read only for a root cause this could pass over
    for _ in range(MAX_PASSED_OVER):
        root = diagnosis.root_cause
        if not _unnamed_exception(root) or (step := _first_step_past(root)) is None:
            break
        added, said, where = WENT_ON_TRAINING.get(catalogue.lang, WENT_ON_TRAINING["en"])
        remedy = said.format(step=step)
        if root.fields.get("frame_file"):
            remedy += "\n" + where.format(frame_file=root.fields["frame_file"], frame_line=root.fields.get("frame_line", "?"),
                                          frame_func=root.fields.get("frame_func", "?"))
        went_on = replace(root, severity="warning", role="cascade", title=root.title + added, remedy=remedy)
        diagnosis = _chosen_again(diagnosis, went_on, catalogue, ranks)
    return diagnosis


def _unnamed_exception(root: Finding | None) -> TypeGuard[Finding]:
    """Whether ``root`` is an exception no rule names, with its file and lines to look past."""
    return (root is not None and root.rule == pyexc.RULE_ID and root.category == Category.PYTHON_EXCEPTION
            and bool(root.file) and bool(root.evidence))


def _first_step_past(root: Finding) -> int | None:
    """The first step ``root``'s file reports after the line of its exception where ``STEPS_PAST``
    distinct steps after it are beyond the last one before it, counting only the lines of
    ``root``'s rank where it has one (a peer's progress says nothing of the rank that raised);
    None where fewer are, or where that line is not in the file's end that is read."""
    # The exception's own line: the message's further lines may follow it in the evidence.
    exc_type = root.fields.get("exc_type", "")
    exception = next((line for line in root.evidence if exc_type and exc_type in line
                      and not line.lstrip().startswith("File ")), root.evidence[-1])
    after: list[int] = []
    lines, _ = tail_lines(root.file)  # last first
    own = (line for line in lines if root.rank is None or line.rank == root.rank)
    for line in own:
        if exception in line.text:
            before = next((step for older in own if (step := step_of(older)) is not None), None)
            past = {step for step in after if before is None or step > before}
            return min(past) if len(past) >= STEPS_PAST else None
        if (step := step_of(line)) is not None:
            after.append(step)
    return None


def _last_values(path: str, metrics: list[str]) -> dict[str, str | None]:
    """The last value ``path`` gives each of ``metrics`` ("loss: 0.42", "'grad_norm': NaN") within
    its end; None for one it does not give there."""
    patterns = {metric: regex.compile(r"(?i)(?<![a-z0-9_])" + regex.escape(metric) + _VALUE) for metric in metrics}
    found: dict[str, str | None] = dict.fromkeys(metrics)
    lines, _ = tail_lines(path, METRIC_TAIL_BYTES)
    for line in lines:
        for metric, pattern in patterns.items():
            if found[metric] is None and (values := pattern.findall(line.text)):
                found[metric] = values[-1]
        if all(value is not None for value in found.values()):
            break
    return found


def ended_waiting(diagnosis: Diagnosis, catalogue) -> Diagnosis:
    """Where nothing failed and a file's last line is a wait (a rule with ``waits``: a worker
    waiting for its chief, a TPU host for the rest of its slice), the wait as the root cause,
    ``weak``: the process never got past it. Any of the job's files (the first ``WAIT_FILES``)
    may be the one that ended waiting; for a wait of severity info, every one must end on such a
    wait. Not in a job whose training loop said it finished. While a job runs such a line is only
    a warning; the live session has its stall detector for silences."""
    if diagnosis.root_cause is not None or diagnosis.failed:
        return diagnosis
    if any(f.fields.get("finished") for f in diagnosis.findings):
        return diagnosis  # the training loop said it finished: whatever ends waiting came after
    waits = [f for f in diagnosis.findings
             if f.origin == "log" and (rule := catalogue.by_id.get(f.rule)) is not None and rule.waits]
    everyday = list({rule.id: rule for f in waits if (rule := catalogue.by_id[f.rule]).severity == "info"}.values())
    endings: dict[str, list[str]] = {}  # each file's end, read once however many waits are asked of it

    def ends_in(path: str, rule) -> bool:
        if path not in endings:
            endings[path] = _last_lines(path)
        return any(rule_holds(rule, text) for text in endings[path])

    for finding in waits:
        rule = catalogue.by_id[finding.rule]
        files = list(dict.fromkeys([finding.file, *diagnosis.files[:WAIT_FILES]]))
        if rule.severity == "info":
            # A wait every healthy run prints (Lightning's on each rank): a rank's own file can end
            # on it while rank 0's goes on (the rest is printed on rank 0 alone), so the job ended
            # there only where every file ends on such a wait (rank 0's on its banner, the others'
            # on their join).
            ended = files[0] if ends_in(files[0], rule) and all(
                any(ends_in(path, other) for other in everyday) for path in files[1:]) else None
        else:
            ended = next((path for path in files if ends_in(path, rule)), None)
        if ended is None:
            continue
        note, said = ENDED_WAITING.get(catalogue.lang, ENDED_WAITING["en"])
        evidence = finding.evidence if ended == finding.file else [*finding.evidence, f"{ended} ends here"]
        root = replace(finding, severity="error", role="root", confidence="weak", confidence_note=note,
                       remedy=f"{said}\n{finding.remedy}", evidence=evidence)
        if not rule.own_error:
            # The rank that printed a join waited there for the others; which of them never came,
            # the log does not say (wandb's prompt is the rank's own wait: ``own_error``).
            root = replace(root, rank=None, rank_source="")
        findings = [root if f.seq == finding.seq else f for f in diagnosis.findings]
        return replace(diagnosis, root_cause=root, findings=findings, confidence="weak", confidence_note=note)
    return diagnosis


def _last_lines(path: str) -> list[str]:
    """The lines a wait that ends ``path`` may be on: its last line; and the line before, where the
    last is the indented source line Python's warnings print after a warning ("  warnings.warn(")."""
    lines, _ = tail_lines(path, WAIT_TAIL_BYTES)
    last = next(lines, None)
    if last is None:
        return []
    before = next(lines, None) if last.text[:1].isspace() else None
    return [last.text] if before is None else [last.text, before.text]


# The title's addition where every rank of the job raised the root cause's exception, in each
# output language: no one rank is to blame, the code or its input is.
# (Of two ranks: "both".)
EVERY_RANK = {"en": (" (raised on both ranks)", " (raised on all {count} ranks)"),
              "zh": ("（两个 rank 都抛出了它）", "（全部 {count} 个 rank 都抛出了它）")}
# With no world size known, the ranks the logs show are all that is claimed: two of them are no
# proof of a two-rank job.
EVERY_SHOWN_RANK = {"en": " (raised on ranks 0-{last}, every rank the log shows)",
                    "zh": "（日志中出现的 rank 0-{last} 都抛出了它）"}


def on_every_rank(diagnosis: Diagnosis, catalogue, ranks: RankEvidence | None) -> Diagnosis:
    """Where the root cause is an uncaught exception that every rank of the job raised (every
    rank of its world size, else of the ranks its logs show where they are 0 to N-1, two at
    least: two ranks of eight that printed alone are no job), its title says so: it names the
    rank that raised first, which is then no more to blame than the others."""
    root = diagnosis.root_cause
    if root is None or root.rule != pyexc.RULE_ID or ranks is None or len(raised := set(root.ranks)) < 2:
        return diagnosis
    job = set(range(ranks.world_size)) if ranks.world_size else set(ranks.known_ranks)
    if job != set(range(len(job))) or not job <= raised:
        return diagnosis
    if not ranks.world_size:
        added = EVERY_SHOWN_RANK.get(catalogue.lang, EVERY_SHOWN_RANK["en"]).format(last=len(job) - 1)
    else:
        both, every = EVERY_RANK.get(catalogue.lang, EVERY_RANK["en"])
        added = both if len(raised) == 2 else every.format(count=len(raised))
    return replace(diagnosis, root_cause=replace(root, title=root.title + added))


def with_last_line(diagnosis: Diagnosis) -> Diagnosis:
    """Where the root cause is the rank the others waited for (``rank_source`` "hang"), the last
    line that rank printed: what it was doing when it stopped (a data shard, an evaluation, a
    checkpoint), the first thing to look at."""
    root = diagnosis.root_cause
    if root is None or root.rank_source != "hang" or root.rank is None:
        return diagnosis
    last = _last_line(root.rank, diagnosis.files)
    if last is None:
        return diagnosis
    quoted = f"rank {root.rank}'s last line: {mask(last)}"
    root = replace(root, evidence=[*root.evidence, quoted], fields={**root.fields, "suspect_last_line": mask(last)})
    return replace(diagnosis, root_cause=root)


def _last_line(rank: int, files: list[str]) -> str | None:
    """The last line of ``rank`` in the end of the first of ``files`` (its own file first) that has one."""
    budget = MAX_READ_BYTES
    ordered = sorted(files, key=lambda path: FileRanks(path).file_rank != rank)  # its own file first
    for path in ordered:
        if budget <= 0:
            break
        lines, read = tail_lines(path)
        budget -= read
        if (found := next((line.text for line in lines if line.rank == rank), None)) is not None:
            return found
    return None


def compared(diagnosis: Diagnosis, against: Against) -> Diagnosis:
    """``diagnosis`` with what is new since the good run ``against``."""
    return compare(diagnosis, diagnosis.files, set(against.templates), against.name, list(against.changes))
