"""``monitor rules learn``: trains the second opinion (``second_opinion.py``) on a labelled corpus.

scikit-learn does the training (a development extra: ``pip install 'monitor[learn]'``); the model
is written as plain JSON that ``second_opinion`` scores without it. Deterministic: the same
corpus gives the same file (sorted terms, fixed folds, rounded numbers). Never trained on the
check third: those cases are how the model is judged.

The thresholds are set where the model is used: a clean log sets one only where the rules leave
it to the model (``second_opinion.would_ask``). A healthy run whose alarming line a rule reads as
a warning (apex's skipped fp16 step, "grad_norm 1.0 (nan)") never meets the model, yet its
held-out score once raised the NaN threshold from 0.24 to 0.62 and lost a dozen cases of before
when a corpus gained it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from monitor.diagnosis.corpus import Case
from monitor.diagnosis.second_opinion import CLEAN, FORMAT, read_lines, tokens, would_ask

# Terms in fewer training logs than this are left out: one log's host or path is no evidence.
MIN_DF = 2
MIN_CASES = 2
C = 0.5
FOLDS = 5
# The thresholds, from cross-validated scores on the training cases: "likely" where at least
# this share of the opinions above it were right, and no clean log the model would be asked about
# is above either. Per category:
# a clean log that resembles one failure (a stall warning that passed) must not silence the
# model on the others; a category with fewer held-out opinions than MIN_OPINIONS takes the
# thresholds of all opinions together.
LIKELY_PRECISION = 0.85
WEAK_PRECISION = 0.6
MIN_OPINIONS = 3
# A score this close to the one-vs-rest boundary (0) is no opinion whatever the held-out cases
# said: a category none of whose held-out opinions were wrong got a threshold of 0, and then a
# healthy log's one tip line ("If out-of-memory error occurs, reduce the batch size", 0.01) was
# called a likely CUDA OOM. Most categories sit at this floor (the rules already name most of
# their cases, so the held-out opinions are easy ones): at 0.05 the model retrained on 2285 cases
# called that line cuda_oom at 0.07; 0.1 costs one case outside the check third of the 96 the
# model puts right.
MIN_SCORE = 0.1
DIGITS = 4
# Weights smaller than this are left out of the file (three in five of them): it loads in 26 ms
# instead of 35 (the budget at run time is 50 ms), with the same answers on the corpus.
MIN_WEIGHT = 0.02


class LearnError(Exception):
    """Training cannot run; ``str()`` is one line."""


def train(cases: list[Case], asked: Callable[[Case], bool]) -> dict:
    """The model (plain data, as written to JSON) trained on the cases outside the check third;
    ``asked``: whether the rules leave a clean case to the model (``asked_by``)."""
    try:
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.model_selection import KFold, cross_val_predict
        from sklearn.svm import LinearSVC
    except ImportError:
        raise LearnError("training needs scikit-learn: pip install 'monitor[learn]'") from None
    training = [case for case in cases if not case.check]
    # A category with a single training log teaches that log's words, not the category's.
    counts = {c: sum(case.category == c for case in training) for c in {case.category for case in training}}
    training = [case for case in training if counts[case.category] >= MIN_CASES]
    categories = sorted({case.category for case in training})
    if len(categories) < 2:
        raise LearnError(f"training needs cases of at least two categories, found {len(categories)}")
    texts = ["\n".join(read_lines([case.log])) for case in training]
    labels = [case.category for case in training]
    vectorizer = TfidfVectorizer(analyzer=lambda text: [t for line in text.splitlines() for t in tokens(line)],
                                 min_df=MIN_DF, sublinear_tf=True, norm="l2")
    x = vectorizer.fit_transform(texts)
    svm = LinearSVC(C=C, class_weight="balanced", random_state=0, max_iter=20000)
    folds = KFold(n_splits=min(FOLDS, len(training)), shuffle=True, random_state=0)
    held_out = cross_val_predict(svm, x, labels, cv=folds, method="decision_function")
    svm.fit(x, labels)
    meets_model = [case.category != CLEAN or asked(case) for case in training]
    likely, weak, per_category = _thresholds(held_out, labels, list(svm.classes_), meets_model)
    terms = list(vectorizer.get_feature_names_out())
    weights = {str(c): [[i, round(float(w), DIGITS)] for i, w in enumerate(row) if abs(w) >= MIN_WEIGHT]
               for c, row in zip(svm.classes_, svm.coef_)}
    return {
        "format": FORMAT,
        "categories": [str(c) for c in svm.classes_],
        "terms": terms,
        "idf": [round(float(v), DIGITS) for v in vectorizer.idf_],
        "weights": weights,
        "bias": {str(c): round(float(b), DIGITS) for c, b in zip(svm.classes_, svm.intercept_)},
        "likely": likely,
        "weak": weak,
        "thresholds": per_category,
        "cases": [[case.source, case.category, _sparse(x[row])] for row, case in enumerate(training)],
        "trained_on": {"cases": len(training), "digest": _digest(training)},
    }


def _thresholds(scores, labels: list[str], classes: list[str],
                meets_model: list[bool]) -> tuple[float, float, dict[str, list[float]]]:
    """(likely, weak) over the held-out opinions (top class, not clean) of every failure case and
    of the clean logs that would meet the model (``meets_model``), and per category: the lowest
    scores at which that category's opinions were right often enough, with no such clean log
    above them."""
    opinions = []
    for row, label, meets in zip(scores, labels, meets_model):
        best = max(range(len(classes)), key=lambda i: row[i])
        if meets and classes[best] != CLEAN:
            opinions.append((float(row[best]), classes[best] == label, label == CLEAN, classes[best]))
    opinions.sort(reverse=True)
    likely, weak = _levels(opinions)
    per_category = {}
    for category in sorted({o[3] for o in opinions}):
        own = [o for o in opinions if o[3] == category]
        if len(own) >= MIN_OPINIONS:
            per_category[category] = list(_levels(own))
    return likely, weak, per_category


def _levels(opinions: list[tuple]) -> tuple[float, float]:
    def lowest(precision: float) -> float:
        floor, right = math.inf, 0
        for count, (value, correct, clean, _) in enumerate(opinions, 1):
            if clean:
                break
            right += correct
            if right / count >= precision:
                floor = value
        return round(floor, DIGITS) if floor != math.inf else 1e9

    # A negative score means "not this category" for every category (one-vs-rest): never an opinion.
    likely = max(lowest(LIKELY_PRECISION), MIN_SCORE)
    return likely, max(min(likely, lowest(WEAK_PRECISION)), MIN_SCORE)


def asked_by(catalogue) -> Callable[[Case], bool]:
    """Whether ``catalogue``'s rules, alone, leave a case to the model (as ``rules eval`` and
    ``diagnose`` would)."""
    from monitor.diagnosis.diagnose import diagnose_paths

    rules_only = replace(catalogue, model_path=None)
    return lambda case: would_ask(diagnose_paths([case.log], rules_only), rules_only)


def _sparse(row) -> list[list[float]]:
    row = row.tocoo()
    return [[int(i), round(float(v), DIGITS)] for i, v in sorted(zip(row.col, row.data))]


def _digest(cases: list[Case]) -> str:
    digest = hashlib.sha256()
    for case in cases:
        digest.update(f"{case.name}\0{case.category}\0".encode())
        digest.update(case.log.read_bytes())
    return digest.hexdigest()[:16]


def write_model(model: dict, path: Path) -> None:
    from monitor.files import replace_file

    text = json.dumps(model, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    if (problem := replace_file(path, text.encode())) is not None:
        raise LearnError(problem)
