"""The text form of ``monitor rules eval``: both scores side by side (all cases, the check
third), then per category, the confusions, the calibration of each confidence level and every
miss. Case names and sources come from files anyone may write: each is made terminal-safe."""

from __future__ import annotations

from monitor.text import safe_text


def render(result: dict, corpus: str, check_misses: bool = False) -> str:
    """The report; the check third's misses only with ``check_misses`` (they are read only at the
    end of an issue: a list printed every run is read every run)."""
    lines = [f"Corpus {safe_text(corpus)}: {result['cases']} cases, {result['check_cases']} in the check third "
             "(no rule is written from those)", ""]
    lines.append(f"{'':22}{'all':18}check third")
    for what, words in (("category", "category right"), ("rank", "root rank right")):
        lines.append(f"{words:22}" + "".join(f"{_share(result[split][what]):18}" for split in ("all", "check")).rstrip())
    flagged = [f"{result[split]['clean_flagged']['flagged']}/{result[split]['clean_flagged']['n']}" for split in ("all", "check")]
    lines.append(f"{'clean logs flagged':22}{flagged[0]:18}{flagged[1]}")

    lines += ["", "Per category (right/cases; said: how often it was the answer, and right then)",
              f"  {'category':20}{'all':10}{'check':10}{'said':>5}  right when said"]
    for row in result["per_category"]:
        said = f"{row['said_right']} ({row['said_right'] / row['said']:.0%})" if row["said"] else "-"
        both = f"{row['right']}/{row['n']}", f"{row['check_right']}/{row['check_n']}"
        lines.append(f"  {safe_text(row['category']):20}{both[0]:10}{both[1]:10}{row['said']:>5}  {said}")

    if result["confusion"]:
        lines += ["", "Confusion (label -> said instead: cases)"]
        lines += [f"  {safe_text(row['label'])} -> {safe_text(row['said'])}: {row['cases']}" for row in result["confusion"]]

    lines += ["", "Calibration (root causes named, by confidence: right/said)"]
    levels = {level["confidence"] for split in ("all", "check") for level in result[split]["calibration"]}
    for level in ("certain", "likely", "weak"):
        if level in levels:
            cells = []
            for split in ("all", "check"):
                row = next((r for r in result[split]["calibration"] if r["confidence"] == level), None)
                cells.append(f"{_share(row) if row else '-':18}")
            lines.append(f"  {level:20}" + "".join(cells).rstrip())

    if "modes" in result:
        lines += ["", "The second opinion (category right; the model alone says nothing below its thresholds)",
                  f"  {'':20}{'all':18}{'check third':18}clean flagged"]
        for name, words in (("rules", "rules alone"), ("model", "model alone"), ("both", "rules + model")):
            mode = result["modes"][name]
            lines.append(f"  {words:20}{_share(mode['all']):18}{_share(mode['check']):18}{mode['clean_flagged']}")
        lost = result["lost"]
        lines.append(f"  cases the rules had right and rules + model lost: {len(lost)}"
                     + (f" ({', '.join(safe_text(name) for name in lost)})" if lost else ""))

    misses = result["misses"]
    lines += ["", f"Misses ({sum(not m['category_right'] for m in misses)} category, "
                  f"{sum(m['category_right'] for m in misses)} rank only)"]
    hidden = 0 if check_misses else sum(miss["check"] for miss in misses)
    if hidden:
        lines.append(f"  {hidden} in the check third not shown (--check-misses shows them: read them only at "
                     f"the end of an issue)")
    for miss in sorted(misses, key=lambda m: (m["category_right"], m["label"], m["case"])):
        if miss["check"] and not check_misses:
            continue
        label = miss["label"] + (f" rank {miss['root_rank']}" if miss["root_rank"] is not None else "")
        said = miss["said"] + (f" rank {miss['rank']}" if miss["rank"] is not None else "")
        how = ", ".join(part for part in (f"rule {miss['rule']}" if miss["rule"] else "", miss["confidence"] or "") if part)
        lines.append(f"  {'[check] ' if miss['check'] else ''}{safe_text(miss['case'])}: {safe_text(label)} -> "
                     f"said {safe_text(said)}" + (f" ({safe_text(how)})" if how else "") + f"  {safe_text(miss['source'])}")

    if result["floor"]:
        lines.append("")
        if result["below_floor"]:
            lines += ["Below the floor (floor.toml):"] + [f"  {line}" for line in result["below_floor"]]
        else:
            lines.append("Every score is at or above the floor (floor.toml).")
    return "\n".join(lines) + "\n"


def _share(ratio: dict) -> str:
    if not ratio["n"]:
        return "-"
    return f"{ratio['right']}/{ratio['n']} {ratio['share']:.1%}"
