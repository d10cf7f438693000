"""`monitor rules eval DIR`: a labelled corpus (NAME.log beside NAME.toml) scored as `diagnose`
would answer, both scores (all cases, the check third), and bad cases said in one line naming the
file and line (exit 2). The cases here are the project's real recorded jobs (sample_logs/demo)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.diagnosis.corpus import CHECK_BELOW, CorpusError, in_check_third, load_corpus

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"
REAL = SAMPLES / "real"


def _eval(corpus: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monitor", "rules", "eval", str(corpus), *extra],
                          capture_output=True, text=True, timeout=120)


def _case(folder: Path, name: str, log: str, label: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SAMPLES / log, folder / f"{name}.log")
    (folder / f"{name}.toml").write_text(label)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Four recorded jobs, one of them labelled wrong on purpose (a crash labelled clean)."""
    _case(tmp_path / "python_exception", "crash", "demo/crash-2ranks.log",
          'source = "demo#crash"\ncategory = "python_exception"\nroot_rank = 1\n')
    _case(tmp_path / "clean", "ok", "demo/ok-2ranks.log", 'source = "demo#ok"\ncategory = "clean"\n')
    _case(tmp_path / "port_in_use", "port", "demo/port-in-use.log", 'source = "demo#port"\ncategory = "port_in_use"\n')
    _case(tmp_path / "clean", "mislabelled", "demo/crash-4ranks.log",
          'source = "demo#mislabelled"\ncategory = "clean"\nroot_rank = 0\n')
    return tmp_path


def test_eval_scores_each_case_as_diagnose_answers_it(corpus: Path) -> None:
    out = _eval(corpus, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["cases"] == 4
    assert result["all"]["category"] == {"right": 3, "n": 4, "share": 0.75}
    # The crash names rank 1 (right); the mislabelled one claims rank 0 and is said otherwise.
    assert result["all"]["rank"]["n"] == 2
    assert result["all"]["clean_flagged"] == {"flagged": 1, "n": 2}
    [miss] = [m for m in result["misses"] if not m["category_right"]]
    assert (miss["case"], miss["label"], miss["said"]) == ("clean/mislabelled", "clean", "python_exception")
    assert miss["rule"] == "python-exception" and miss["confidence"] == "likely"
    assert {"label": "clean", "said": "python_exception", "cases": 1} in result["confusion"]
    rows = {row["category"]: row for row in result["per_category"]}
    assert rows["python_exception"]["said"] == 2 and rows["python_exception"]["said_right"] == 1
    calibration = {row["confidence"]: row for row in result["all"]["calibration"]}
    assert calibration["likely"]["n"] == 2 and calibration["likely"]["right"] == 1
    assert calibration["certain"] == {"confidence": "certain", "right": 1, "n": 1, "share": 1.0}
    # Both splits always: the check third is scored the same way.
    assert result["check"]["category"]["n"] == result["check_cases"]


def test_eval_text_has_both_scores_the_tables_and_every_miss(corpus: Path) -> None:
    out = _eval(corpus)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "4 cases" in text and "check third" in text
    assert "category right        3/4 75.0%" in text
    for heading in ("Per category", "Confusion", "Calibration", "Misses (1 category"):
        assert heading in text
    assert "clean/mislabelled: clean rank 0 -> said python_exception" in text


def test_the_text_lists_the_check_thirds_misses_only_when_asked(corpus: Path) -> None:
    # A second crash labelled clean, from a source in the check third.
    _case(corpus / "clean", "hidden", "demo/crash-2ranks.log", 'source = "demo#check2"\ncategory = "clean"\n')
    text = _eval(corpus).stdout
    assert "Misses (2 category" in text and "clean/hidden" not in text
    assert "  1 in the check third not shown (--check-misses shows them: read them only at the end of an issue)" in text
    assert "clean/mislabelled: clean rank 0 -> said python_exception" in text
    shown = _eval(corpus, "--check-misses").stdout
    assert "[check] clean/hidden: clean -> said python_exception" in shown and "not shown" not in shown
    assert any(m["case"] == "clean/hidden" for m in json.loads(_eval(corpus, "--json").stdout)["misses"])


def test_a_floor_the_scores_fall_below_fails_the_run(corpus: Path) -> None:
    (corpus / "floor.toml").write_text("category_all = 0.9\nclean_flagged = 0\n")
    out = _eval(corpus)
    assert out.returncode == 1
    assert "category accuracy on all cases is 75.0%, below the floor of 90.0%" in out.stdout
    assert "1 clean logs were flagged" in out.stdout
    (corpus / "floor.toml").write_text("category_all = 0.75\nclean_flagged = 1\n")
    assert _eval(corpus).returncode == 0


@pytest.mark.parametrize(("label", "line", "message"), [
    ('source = "x"\ncategory = "cuda_om"\n', 2, "unknown category 'cuda_om' (did you mean 'cuda_oom'?)"),
    ('source = "x"\ncategory = "cuda_oom"\nroot_rank = "3"\n', 3, "'root_rank' must be a whole number"),
    ('source = "x"\ncategory = "cuda_oom"\nrank = 3\n', 3, "unknown key 'rank'"),
    ('source = "x"\ncategory = cuda_oom\n', 2, "Invalid value"),
    ('category = "cuda_oom"\n', 0, "missing required key 'source'"),
])
def test_a_bad_label_is_one_line_naming_its_file_and_line(tmp_path: Path, label: str, line: int, message: str) -> None:
    _case(tmp_path, "bad", "demo/ok-2ranks.log", label)
    out = _eval(tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    [said] = out.stderr.splitlines()
    assert said.startswith(f"monitor: {tmp_path / 'bad.toml'}:{line}: ") and message in said


def test_a_case_missing_its_log_or_label_or_repeating_a_source_is_refused(tmp_path: Path) -> None:
    (tmp_path / "lonely.toml").write_text('source = "x"\ncategory = "clean"\n')
    out = _eval(tmp_path)
    assert out.returncode == 2 and f"{tmp_path / 'lonely.toml'}:0: no log lonely.log" in out.stderr
    (tmp_path / "lonely.toml").unlink()
    shutil.copy(SAMPLES / "demo/ok-2ranks.log", tmp_path / "unlabelled.log")
    out = _eval(tmp_path)
    assert out.returncode == 2 and "unlabelled.log:0: no label unlabelled.toml" in out.stderr
    (tmp_path / "unlabelled.log").unlink()
    _case(tmp_path, "one", "demo/ok-2ranks.log", 'source = "same#1"\ncategory = "clean"\n')
    _case(tmp_path, "two", "demo/ok-2ranks.log", 'source = "same#1"\ncategory = "clean"\n')
    with pytest.raises(CorpusError, match=r"two\.toml:1: source 'same#1' is already the case"):
        load_corpus(tmp_path)


def test_a_missing_corpus_or_an_empty_one_is_a_usage_error(tmp_path: Path) -> None:
    out = _eval(tmp_path / "nope")
    assert out.returncode == 2 and "not a directory" in out.stderr
    out = _eval(tmp_path)
    assert out.returncode == 2 and "no cases" in out.stderr


def test_the_check_third_is_fixed_by_the_source_alone() -> None:
    sources = [f"owner/repo#{n}" for n in range(3000)]
    share = sum(map(in_check_third, sources)) / len(sources)
    assert abs(share - CHECK_BELOW / 256) < 0.03
    assert in_check_third("pytorch/pytorch#1") == in_check_third("pytorch/pytorch#1")


def test_the_shipped_corpus_loads_and_scores_at_or_above_its_floor() -> None:
    cases = load_corpus(REAL)
    assert len(cases) >= 100
    assert any(case.check for case in cases) and not all(case.check for case in cases)
    out = _eval(REAL)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr


def test_the_fast_scan_and_the_line_by_line_engine_agree_on_every_real_case() -> None:
    """diagnose reads big files with the prefilter's fast scan, the live session line by line: on
    logs nobody here wrote they must still say the same."""
    from monitor.diagnosis.catalogue import load_catalogue
    from monitor.diagnosis.diagnose import diagnose_paths

    catalogue = load_catalogue(include_user=False)
    catalogue.model_path = None  # the engine's own findings
    for case in load_corpus(REAL):
        fast = diagnose_paths([case.log], catalogue, fast=True)
        slow = diagnose_paths([case.log], catalogue, fast=False)
        assert [(f.rule, f.rank, f.line, f.count) for f in fast.findings] == \
            [(f.rule, f.rank, f.line, f.count) for f in slow.findings], case.name
        assert (fast.root_cause and fast.root_cause.rule) == (slow.root_cause and slow.root_cause.rule), case.name
