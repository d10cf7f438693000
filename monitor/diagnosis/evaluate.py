"""How right the engine is on a labelled corpus (``monitor rules eval``): each case diagnosed as
``monitor diagnose`` would, then scored against its label. Two scores always go together: all
cases, and the check third no rule is ever written from (``corpus.Case.check``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from monitor.diagnosis.catalogue import Catalogue
from monitor.diagnosis.corpus import CLEAN, Case
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.diagnosis.second_opinion import RULE_ID, Model, opinion, read_lines, review
from monitor.model import CONFIDENCE_ORDER, Diagnosis

SPLITS = ("all", "check")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the engine said of one case."""

    case: Case
    said: str  # the root cause's category, or "clean" when it named none
    rank: int | None
    rule: str
    confidence: str | None
    # Whether any finding was an error (a clean log must have none).
    flagged: bool

    @property
    def right(self) -> bool:
        return self.said == self.case.category

    @property
    def rank_right(self) -> bool | None:
        """None where the log does not show the root rank (the case has none)."""
        return None if self.case.root_rank is None else self.rank == self.case.root_rank


def _outcome(case: Case, diagnosis: Diagnosis) -> Outcome:
    root = diagnosis.root_cause
    return Outcome(
        case=case, said=str(root.category) if root else CLEAN, rank=root.rank if root else None,
        rule=root.rule if root else "", confidence=diagnosis.confidence, flagged=diagnosis.failed,
    )


def model_case(case: Case, model: Model) -> Outcome:
    """What the second opinion alone says of a case (below its thresholds: nothing failed)."""
    said = opinion(read_lines([case.log]), model, explain=False)
    named = said.confidence is not None and said.category != CLEAN
    return Outcome(case=case, said=said.category if named else CLEAN, rank=None,
                   rule=RULE_ID if named else "", confidence=said.confidence if named else None, flagged=named)


def evaluate(cases: list[Case], catalogue: Catalogue, floor: dict[str, float] | None = None) -> dict:
    """Every case diagnosed as ``diagnose`` would (the rules, with the second opinion where the
    catalogue has a model), scored; with a model, also the rules alone and the model alone. The
    engine reads each case once: the second opinion (``second_opinion.review``) is the last step
    that can change a root cause, taken here on the rules' own diagnosis (the steps after it add
    evidence, not causes; the same scores on every case of the corpus, at half the time)."""
    rules_only = replace(catalogue, model_path=None)
    diagnoses = [diagnose_paths([case.log], rules_only) for case in cases]
    both = [_outcome(case, review(diagnosis, catalogue)) for case, diagnosis in zip(cases, diagnoses)]
    result = score(both, floor)
    model, _ = catalogue.model()
    if model is not None:
        rules = [_outcome(case, diagnosis) for case, diagnosis in zip(cases, diagnoses)]
        alone = [model_case(case, model) for case in cases]
        result["modes"] = {name: _mode(outcomes) for name, outcomes in (("rules", rules), ("model", alone), ("both", both))}
        result["lost"] = [b.case.name for r, b in zip(rules, both) if r.right and not b.right]
    return result


def _mode(outcomes: list[Outcome]) -> dict:
    check = [o for o in outcomes if o.case.check]
    return {
        "all": _ratio(sum(o.right for o in outcomes), len(outcomes)),
        "check": _ratio(sum(o.right for o in check), len(check)),
        "clean_flagged": sum(o.case.category == CLEAN and o.said != CLEAN for o in outcomes),
        "per_category_check": {label: _ratio(sum(o.right for o in check if o.case.category == label),
                                             sum(o.case.category == label for o in check))
                               for label in sorted({o.case.category for o in check})},
        "calibration_check": _calibration(check),
    }


def score(outcomes: list[Outcome], floor: dict[str, float] | None = None) -> dict:
    """The scores as plain data (``rules eval --json`` prints it as it is)."""
    splits = {"all": outcomes, "check": [o for o in outcomes if o.case.check]}
    result: dict = {"cases": len(outcomes), "check_cases": len(splits["check"])}
    for name, members in splits.items():
        ranked = [o for o in members if o.rank_right is not None]
        clean = [o for o in members if o.case.category == CLEAN]
        result[name] = {
            "category": _ratio(sum(o.right for o in members), len(members)),
            "rank": _ratio(sum(bool(o.rank_right) for o in ranked), len(ranked)),
            "clean_flagged": {"flagged": sum(o.flagged or o.said != CLEAN for o in clean), "n": len(clean)},
            "calibration": _calibration(members),
        }
    result["per_category"] = _per_category(outcomes)
    result["confusion"] = [
        {"label": label, "said": said, "cases": n}
        for (label, said), n in sorted(Counter((o.case.category, o.said) for o in outcomes if not o.right).items(),
                                       key=lambda item: (-item[1], item[0]))
    ]
    result["misses"] = [_miss(o) for o in outcomes if not o.right or o.rank_right is False]
    result["floor"] = dict(floor or {})
    result["below_floor"] = below_floor(result, floor or {})
    return result


def _ratio(right: int, n: int) -> dict:
    return {"right": right, "n": n, "share": round(right / n, 4) if n else None}


def _calibration(members: list[Outcome]) -> list[dict]:
    """Per confidence level of the named root causes: how often it was right."""
    levels: dict[str, list[Outcome]] = {}
    for outcome in members:
        if outcome.confidence is not None:
            levels.setdefault(outcome.confidence, []).append(outcome)
    return [{"confidence": level, **_ratio(sum(o.right for o in said), len(said))}
            for level, said in sorted(levels.items(), key=lambda item: CONFIDENCE_ORDER[item[0]])]


def _per_category(outcomes: list[Outcome]) -> list[dict]:
    labels = sorted({o.case.category for o in outcomes} | {o.said for o in outcomes})
    rows = []
    for label in labels:
        members = [o for o in outcomes if o.case.category == label]
        check = [o for o in members if o.case.check]
        said = [o for o in outcomes if o.said == label]
        rows.append({
            "category": label, "n": len(members), "right": sum(o.right for o in members),
            "check_n": len(check), "check_right": sum(o.right for o in check),
            "said": len(said), "said_right": sum(o.right for o in said),
        })
    return rows


def _miss(outcome: Outcome) -> dict:
    case = outcome.case
    return {
        "case": case.name, "check": case.check, "source": case.source, "label": case.category,
        "root_rank": case.root_rank, "said": outcome.said, "rank": outcome.rank, "rule": outcome.rule,
        "confidence": outcome.confidence, "category_right": outcome.right,
    }


def below_floor(result: dict, floor: dict[str, float]) -> list[str]:
    """One line for each score under the corpus's floor (``floor.toml``)."""
    lines = []
    for split in SPLITS:
        for what in ("category", "rank"):
            key = f"{what}_{split}"
            share = result[split][what]["share"]
            if key in floor and share is not None and share < floor[key]:
                lines.append(f"{what} accuracy on {_split_words(split)} is {share:.1%}, below the floor of {floor[key]:.1%}")
    flagged = result["all"]["clean_flagged"]["flagged"]
    if "clean_flagged" in floor and flagged > floor["clean_flagged"]:
        lines.append(f"{flagged} clean logs were flagged, more than the floor allows ({floor['clean_flagged']:.0f})")
    return lines


def _split_words(split: str) -> str:
    return "all cases" if split == "all" else "the check third"
