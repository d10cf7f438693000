"""The learned second opinion: where the rules are unsure (no root cause, only an uncaught
exception no rule names, or only weak evidence), a linear model trained on a labelled corpus of
real logs (``monitor rules learn``) says which known failure the log resembles.

It never overrules a rule that is sure, never says ``certain``, and says why: the lines that
weighed most and the labelled cases the log is nearest to. The model is plain JSON (terms, their
idf, a weight per term and category, two thresholds from cross-validation, overall and per category), scored here in pure
Python: no numerical library at run time, a few milliseconds per log.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import regex

from monitor.diagnosis import tail
from monitor.diagnosis.classify import rule_holds
from monitor.files import read_at_most
from monitor.logs.ranks import parse_prefix
from monitor.model import Category, Confidence, Diagnosis, Finding

FORMAT = "monitor-second-opinion/1"
RULE_ID = "learned-opinion"
CLEAN = "clean"
# What is read of each file: its start and its end (where failures are), and of at most this many
# files: the bytes a log holds never decide the time spent.
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 512 * 1024
MAX_FILES = 64
# Read of all files together: a folder of a thousand nodes' logs costs what two files do. The
# files with findings are read first (``consult``).
MAX_READ_BYTES = 2 * (HEAD_BYTES + TAIL_BYTES)
MAX_LINE_CHARS = 2000
MAX_MODEL_BYTES = 8 * 1024 * 1024
EVIDENCE_LINES = 3
NEAREST_CASES = 3
_TOKEN = regex.compile(r"[a-z_][a-z0-9_]{1,30}")
# A log no rule found a failure in gets an opinion only where some line says something went wrong:
# a healthy run's setup lines resemble the failures that happen during setup (wandb logging in
# is most of a wandb failure's words). A traceback says so by its exception line ("ValueError:"),
# which a rule may have read (its header and frames are the same report).
# A Python exception's own line ("torch.distributed.DistStoreError: wait timeout ..."), with its
# colon: not a class named in a table ("train_mse | MeanSquaredError").
_EXCEPTION_LINE = regex.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception): ")
_SOMETHING_WRONG = regex.compile(
    _EXCEPTION_LINE.pattern + "|"
    r"(?i:\b(?:error|exception|fail(?:ed|ure|s)?|fatal|abort(?:ed|ing)?|killed|kill(?:ing)? |"
    r"terminat(?:ed|ing)|timed? ?out|refused|denied|cannot|can't|unable|not found|no space|"
    r"out of memory|oom|nan\b|inf\b|segmentation|core dumped|signal|exit(?:ed)? (?:code|status|with)))"
    # rich's marker of the line a traceback's frame was at; NCCL's trace of an error code returned.
    r"|❱|NCCL INFO \S+:\d+ -> [1-7]\b")
_ZERO_DIGITS = str.maketrans("123456789", "000000000")
# A conditional, a tip that says what to do should something happen ("If out-of-memory error
# occurs, reduce the batch size"): no event of the job's.
_HYPOTHETICAL = regex.compile(r"(?i)^if\s")


class ModelError(Exception):
    """A model file that cannot be used; ``str()`` is one line naming the file."""


@dataclass(frozen=True, slots=True)
class Model:
    path: str
    categories: tuple[str, ...]
    terms: dict[str, int]
    idf: tuple[float, ...]
    # Per category, its weight for each term index that has one, and its bias.
    weights: dict[str, dict[int, float]]
    bias: dict[str, float]
    likely: float
    weak: float
    # Per category, its own (likely, weak) where it had enough held-out opinions to set them.
    thresholds: dict[str, tuple[float, float]] = field(default_factory=dict)
    # The labelled cases it was trained on: (source, category, unit vector as {term index: value}).
    cases: tuple[tuple[str, str, dict[int, float]], ...] = ()


@dataclass(frozen=True, slots=True)
class Opinion:
    category: str
    score: float
    confidence: Confidence | None  # likely | weak | None (below both thresholds: no opinion)
    lines: tuple[str, ...] = ()
    nearest: tuple[tuple[str, str, float], ...] = ()  # (source, category, similarity)
    scores: dict[str, float] = field(default_factory=dict)


def tokens(line: str) -> list[str]:
    """The terms of one line: words of 2-31 characters, lowercased, and each pair of neighbours."""
    words = _TOKEN.findall(line[:MAX_LINE_CHARS].lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


def read_lines(paths) -> list[str]:
    """The lines the model reads of ``paths``: each file's start and end, bounded per file and in
    all, each distinct line once (digits aside): a log's thousand step lines are one line's evidence, and scoring
    costs what the distinct lines do."""
    lines: list[str] = []
    seen: set[str] = set()
    budget = MAX_READ_BYTES
    for path in list(paths)[:MAX_FILES]:
        if budget <= 0:
            break
        try:
            with open(path, "rb") as stream:
                size = os.fstat(stream.fileno()).st_size
                head = stream.read(min(HEAD_BYTES, budget))
                tail = b""
                if size > HEAD_BYTES and (room := min(TAIL_BYTES, budget - len(head))) > 0:
                    stream.seek(max(HEAD_BYTES, size - room))
                    tail = stream.read(room)
        except OSError:
            continue
        budget -= len(head) + len(tail)
        for chunk in (head, tail):
            for line in chunk.decode("utf-8", "replace").splitlines():
                if (key := line.translate(_ZERO_DIGITS)) not in seen:
                    seen.add(key)
                    lines.append(line)
    return lines


def vector(lines: list[str], model: Model) -> dict[int, float]:
    """The log's tf-idf vector over the model's terms (sublinear tf, unit length)."""
    counts = Counter(t for line in lines for t in tokens(line) if t in model.terms)
    raw = {model.terms[t]: (1 + math.log(n)) * model.idf[model.terms[t]] for t, n in counts.items()}
    norm = math.sqrt(sum(v * v for v in raw.values())) or 1.0
    return {i: v / norm for i, v in raw.items()}


def score(x: dict[int, float], model: Model) -> dict[str, float]:
    return {c: model.bias[c] + sum(v * model.weights[c].get(i, 0.0) for i, v in x.items()) for c in model.categories}


def opinion(lines: list[str], model: Model, explain: bool = True) -> Opinion:
    """The model's opinion of a log's ``lines``; one it holds (a confidence) comes with the lines
    that weighed most and the nearest labelled cases, what a finding shows, unless ``explain`` is
    False (a score alone: the nearest cases are a walk over every case the model holds)."""
    x = vector(lines, model)
    scores = score(x, model)
    best = max(model.categories, key=lambda c: (scores[c], c))
    likely, weak = model.thresholds.get(best, (model.likely, model.weak))
    level: Confidence | None = "likely" if scores[best] >= likely else "weak" if scores[best] >= weak else None
    if best == CLEAN:
        return Opinion(best, scores[best], None, scores=scores)
    if level is None or not explain:
        return Opinion(best, scores[best], level, scores=scores)
    return Opinion(best, scores[best], level, _weightiest(lines, model, best), _nearest(x, model), scores)


def _weightiest(lines: list[str], model: Model, category: str) -> tuple[str, ...]:
    """The lines whose terms pushed most towards ``category``."""
    weights = model.weights[category]
    ranked = []
    for number, line in enumerate(lines):
        seen = {model.terms[t] for t in tokens(line) if t in model.terms}
        push = sum(weights.get(i, 0.0) * model.idf[i] for i in seen)
        if push > 0:
            ranked.append((push, number))
    top = sorted(ranked, reverse=True)[:EVIDENCE_LINES]
    return tuple(lines[n][:MAX_LINE_CHARS] for _, n in sorted(top, key=lambda item: item[1]))


def _nearest(x: dict[int, float], model: Model) -> tuple[tuple[str, str, float], ...]:
    # Each dot product walks the sparser of the two vectors (a case holds ~80 terms, a log hundreds).
    sims = [(_dot(case, x) if len(case) < len(x) else _dot(x, case), source, category)
            for source, category, case in model.cases]
    return tuple((source, category, round(sim, 2)) for sim, source, category in sorted(sims, reverse=True)[:NEAREST_CASES])


def _dot(sparse: dict[int, float], other: dict[int, float]) -> float:
    get = other.get
    return sum(v * get(i, 0.0) for i, v in sparse.items())


def load_model(path: str | Path) -> Model:
    path = Path(path)
    try:
        raw = read_at_most(path, MAX_MODEL_BYTES)
    except OSError as exc:
        raise ModelError(f"{path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_MODEL_BYTES:
        raise ModelError(f"{path}: a model over {MAX_MODEL_BYTES // (1024 * 1024)} MiB")
    try:
        data = json.loads(raw)
        if data.get("format") != FORMAT:
            raise ModelError(f"{path}: not a monitor model (format {str(data.get('format'))[:40]!r}, expected {FORMAT!r})")
        categories = tuple(data["categories"])
        from monitor.diagnosis.corpus import LABELS

        unknown = [c for c in categories if c not in LABELS]
        if unknown:
            raise ModelError(f"{path}: trained on unknown categories: {', '.join(unknown[:5])}")
        terms = {term: index for index, term in enumerate(data["terms"])}
        idf = tuple(float(v) for v in data["idf"])
        if len(idf) != len(terms):
            raise ModelError(f"{path}: {len(terms)} terms but {len(idf)} idf values")
        weights = {c: {int(i): float(w) for i, w in data["weights"][c] if 0 <= int(i) < len(idf)} for c in categories}
        bias = {c: float(data["bias"][c]) for c in categories}
        cases = tuple((str(s), str(c), {int(i): float(v) for i, v in vec}) for s, c, vec in data.get("cases", []))
        thresholds = {str(c): (float(pair[0]), float(pair[1])) for c, pair in data.get("thresholds", {}).items()
                      if c in categories}
        return Model(str(path), categories, terms, idf, weights, bias, float(data["likely"]), float(data["weak"]),
                     thresholds, cases)
    except ModelError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelError(f"{path}: not a usable model ({type(exc).__name__}: {str(exc)[:80]})") from None


def unsure(diagnosis: Diagnosis) -> bool:
    """Whether the rules left room for a second opinion: no root cause, only an uncaught exception
    no rule names (a rule certain of an error in the job's code, such as ranks calling different
    collectives, has named it), or only weak evidence."""
    root = diagnosis.root_cause
    return (root is None or (root.category == Category.PYTHON_EXCEPTION and root.confidence != "certain")
            or diagnosis.confidence == "weak")


def consult(diagnosis: Diagnosis, model: Model | None, remedies: dict[str, str], catalogue=None) -> Diagnosis:
    """``diagnosis`` with the model's opinion where the rules were unsure and the model is sure
    enough: a finding of origin ``model``, and the root cause when it names a failure the rules
    did not. ``remedies``: each category's remedy (its first rule's), shown with a caveat;
    ``catalogue``: the rules the diagnosis was made with (``_unexplained_alarm``)."""
    if model is None or (lines := _worth_asking(diagnosis, catalogue)) is None:
        return diagnosis
    return _asked(diagnosis, lines, model, remedies)


def would_ask(diagnosis: Diagnosis, catalogue=None) -> bool:
    """Whether ``consult`` would ask the model about ``diagnosis`` (the rules' own)."""
    return _worth_asking(diagnosis, catalogue) is not None


def _worth_asking(diagnosis: Diagnosis, catalogue=None) -> list[str] | None:
    """The lines the model would read, where the rules were unsure and (with no root cause at all)
    a line says something went wrong in a job that did not go on training; else None."""
    if not unsure(diagnosis):
        return None
    lines = read_lines(_files_by_evidence(diagnosis))
    if diagnosis.root_cause is None and (not _unexplained_alarm(lines, diagnosis, catalogue)
                                         or _still_training(diagnosis.files)):
        return None
    return lines


def _asked(diagnosis: Diagnosis, lines: list[str], model: Model, remedies: dict[str, str]) -> Diagnosis:
    """``consult``'s answer once it is worth asking the model about ``lines``."""
    root = diagnosis.root_cause
    said = opinion(lines, model)
    if said.confidence is None:
        return diagnosis
    if root is not None and root.category == said.category:
        return diagnosis  # the rules already say so
    if said.category == Category.STOPPED and any(
            f.category == Category.STOPPED and f.origin != "model" for f in diagnosis.findings):
        # Whether a stop is a failure is who sent it (a user's Ctrl-C, `monitor run` forwarding its
        # own stop, or a scheduler): the rules read that; the model sees only the same signal lines.
        return diagnosis
    if root is not None and said.category == Category.HOST_OOM and _exited_on_its_own(root):
        # The launcher read the process's own exit status (1, 2, ...): the OOM killer's SIGKILL shows as
        # -9 or 137, so words resembling memory failures do not make this exit one.
        return diagnosis
    if root is not None and root.category == Category.STOPPED:
        # A line said the job was stopped from outside (a launcher that received SIGTERM or SIGINT):
        # the model's resemblance to other failures' teardown lines does not undo what it read.
        return diagnosis
    if root is not None and said.confidence != "likely" and _says_what_failed(root):
        return diagnosis  # a weak guess never replaces what a line says
    if root is not None and root.fields.get("cleared") == said.category:
        # The rules read that service's frames and found the error the user's (wandb.Image given
        # a bad tensor): the model sees its name in the frames, not who failed.
        return diagnosis
    if root is not None and _says_what_failed(root) and any(
            f.category == said.category and f.origin != "model" for f in diagnosis.findings):
        # The rules read that failure's lines and judged them (a watchdog's timeout after a rank's
        # ValueError is its victim): the model, which reads the same words, adds nothing to that.
        return diagnosis
    finding = _finding(said, remedies.get(said.category, ""), model, diagnosis.files[0] if diagnosis.files else "")
    if root is not None and root.rank is not None:
        # The model names what the failure was; the rank whose error the rules read is still where.
        finding = replace(finding, rank=root.rank, ranks=[root.rank], rank_source=root.rank_source)
    note = (f"no rule named this failure; a model trained on labelled logs finds it resembles "
            f"{said.category} cases (score {said.score:.2f})")
    return replace(diagnosis, root_cause=finding, findings=[*diagnosis.findings, finding],
                   confidence=said.confidence, confidence_note=note)


def _exited_on_its_own(root: Finding) -> bool:
    """Whether the finding is a launcher's report of a process that ended with an exit status of its
    own (a positive code other than 137, 128 + SIGKILL), not by a signal."""
    code = root.fields.get("exit_code", "")
    return code.isdigit() and int(code) not in (0, 137)


def _still_training(files: list[str]) -> bool:
    """Whether every file of the job ends with a line of training progress (``tail.ends_training``):
    the job went on past whatever it warned of, and words alone must not name a failure the rules
    did not see (a rendezvous's warning that passed, srun retrying a step it then created)."""
    return tail.all_end_training(files)


def _unexplained_alarm(lines: list[str], diagnosis: Diagnosis, catalogue=None) -> bool:
    """Whether a line says something went wrong that no rule already read as a warning or a note
    (c10d's "client socket has failed to connect" while it retries, NCCL's fallback warnings): the
    words of a known, harmless line are no reason to look further. A finding quotes its first
    occurrence; an exception's line that such a finding's rule (``catalogue``'s) reads is explained as
    well (torchrun's exit barrier: its message, then the store's error in the traceback logged under it)."""
    explained = {_key(line) for f in diagnosis.findings if f.severity != "error" for line in f.evidence}
    quiet = [] if catalogue is None else [
        rule for rule in {f.rule: catalogue.by_id.get(f.rule) for f in diagnosis.findings if f.severity != "error"}.values()
        if rule is not None]
    return any(_SOMETHING_WRONG.search(line) and _key(line) not in explained
               and not _HYPOTHETICAL.match(body := parse_prefix(line).body.lstrip())
               and not (_EXCEPTION_LINE.search(body) and any(rule_holds(rule, body) for rule in quiet)) for line in lines)


def _key(line: str) -> str:
    return line.translate(_ZERO_DIGITS).strip()


def _says_what_failed(root: Finding) -> bool:
    """Whether a line names the failure: not a traceback cut before its exception (no type)."""
    return root.category != Category.PYTHON_EXCEPTION or bool(root.fields.get("exc_type"))


def _files_by_evidence(diagnosis: Diagnosis) -> list[str]:
    """The diagnosis's files, those of its root cause and findings first: what the model reads
    within its budget is where the failure is."""
    first = [f.file for f in ([diagnosis.root_cause] if diagnosis.root_cause else []) + diagnosis.findings if f.file]
    return list(dict.fromkeys([*first, *diagnosis.files]))


def review(diagnosis: Diagnosis, catalogue) -> Diagnosis:
    """``consult`` with the catalogue's model; a model that cannot be loaded is one line among the
    diagnosis's problems, and the rules alone decide. A diagnosis the rules are sure of, or a log
    with nothing for the model to judge (a healthy run's), never loads the model (2.4 MB of JSON:
    a third of a second, a third of `monitor diagnose`'s own time on a small log)."""
    if catalogue.model_path is None or (lines := _worth_asking(diagnosis, catalogue)) is None:
        return diagnosis  # no model to ask (--model none): not a line read for one
    model, problem = catalogue.model()
    if problem is not None:
        diagnosis = replace(diagnosis, problems=[*diagnosis.problems, problem])
    if model is None:
        return diagnosis
    return _asked(diagnosis, lines, model, catalogue.category_remedies())


def _finding(said: Opinion, remedy: str, model: Model, file: str) -> Finding:
    assert said.confidence is not None  # ``consult`` makes a finding only of an opinion held
    like = [f"{source} ({category}, {sim:.2f})" for source, category, sim in said.nearest]
    title = f"Likely {said.category} (no rule matched; the log resembles known {said.category} cases)"
    caveat = ("This is the learned second opinion, not a rule match: check the lines above before you act on it. "
              f"Nearest labelled cases: {', '.join(like)}.")
    return Finding(
        rule=RULE_ID, category=Category(said.category), severity="error", role="root", title=title, file=file,
        evidence=list(said.lines), fields={"score": f"{said.score:.2f}", "nearest": "; ".join(like)},
        remedy="\n".join(part for part in (remedy, caveat) if part), origin="model",
        confidence=said.confidence, confidence_note=f"no rule matched: a model trained on {len(model.cases)} labelled logs says so",
    )
