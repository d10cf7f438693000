"""The learned second opinion (issue #35): trained with `monitor rules learn` on a labelled corpus
(never its check third), deterministic, consulted only where the rules are unsure, never
`certain`, saying which lines and which known cases it leans on; a bad model file is one line and
the rules alone decide."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from diagnosis_helpers import diagnose_run

from monitor.diagnosis.catalogue import load_catalogue
from monitor.diagnosis.corpus import load_corpus
from monitor.diagnosis.diagnose import diagnose_paths
from monitor.diagnosis.second_opinion import consult, load_model, ModelError
from monitor.model import Diagnosis, Finding
from tests.clock_helpers import FakeClock

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "sample_logs" / "real"
SHIPPED = ROOT / "rules" / "model.json"


def _monitor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def learned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `monitor rules learn` of the corpus, for the tests that compare a training with another."""
    pytest.importorskip("sklearn")
    out = tmp_path_factory.mktemp("learned") / "model.json"
    assert _monitor("rules", "learn", "--no-user-rules", str(REAL), "-o", str(out)).returncode == 0
    return out


def test_training_twice_gives_the_same_file_and_leaves_the_check_third_out(tmp_path: Path, learned: Path) -> None:
    first, second = learned, tmp_path / "b.json"
    assert _monitor("rules", "learn", "--no-user-rules", str(REAL), "-o", str(second)).returncode == 0
    assert first.read_bytes() == second.read_bytes()
    model = json.loads(first.read_text())
    check = {case.source for case in load_corpus(REAL) if case.check}
    assert model["cases"] and not {source for source, _, _ in model["cases"]} & check
    assert first.stat().st_size < 5 * 1024 * 1024


def test_the_shipped_model_is_the_one_the_shipped_corpus_trains(learned: Path) -> None:
    """The model in the wheel is reproducible from sample_logs/real and the shipped rules (retrain
    after changing the corpus, or a rule: the rules decide which clean logs set its thresholds)."""
    assert learned.read_bytes() == SHIPPED.read_bytes()


def _job(tmp_path: Path, text: str) -> Path:
    log = tmp_path / "job.log"
    log.write_text(text)
    return log


# A DeepSpeed job that dies with only its launcher's word for it: no rule names the cause.
LOADER_KILLED = """\
[2024-03-02 10:00:01,100] [INFO] [launch.py:146:main] WORLD INFO DICT: {'localhost': [0, 1, 2, 3]}
Loading checkpoint shards:  47%|████▋     | 7/15 [01:10<01:20, 10.1s/it]
[2024-03-02 10:02:11,501] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 9439
[2024-03-02 10:02:11,530] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 9440
"""


def _hand_model(tmp_path: Path, likely: float = 0.3, weak: float = 0.1) -> Path:
    """A model written by hand in the shipped format: 'killing subprocess' and 'checkpoint shards'
    lean to host_oom, 'loss' to clean."""
    terms = ["checkpoint shards", "killing subprocess", "loss", "sigkill_handler"]
    model = {
        "format": "monitor-second-opinion/1", "categories": ["clean", "host_oom"], "terms": terms,
        "idf": [1.0, 1.0, 1.0, 1.0], "weights": {"clean": [[2, 1.0]], "host_oom": [[0, 0.8], [1, 1.2], [3, 0.4]]},
        "bias": {"clean": -0.2, "host_oom": -0.3}, "likely": likely, "weak": weak,
        "cases": [["owner/repo#1", "host_oom", [[1, 0.9], [3, 0.4]]], ["owner/repo#2", "clean", [[2, 1.0]]]],
    }
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model))
    return path


def test_where_the_rules_find_nothing_a_sure_opinion_names_the_failure_and_says_why(tmp_path: Path) -> None:
    model = load_model(_hand_model(tmp_path))
    diagnosis = Diagnosis(root_cause=None, findings=[], files=[str(_job(tmp_path, LOADER_KILLED))])
    said = consult(diagnosis, model, {"host_oom": "Host (CPU) memory ran out."})
    root = said.root_cause
    assert (root.category, root.origin, root.rule, root.confidence) == ("host_oom", "model", "learned-opinion", "likely")
    assert said.confidence == "likely" and "resembles host_oom cases" in said.confidence_note
    assert root.remedy.startswith("Host (CPU) memory ran out.")
    assert "Nearest labelled cases: owner/repo#1 (host_oom" in root.remedy
    assert any("Killing subprocess" in line for line in root.evidence)
    # The same through the command: the JSON carries it, never as certain.
    out = diagnose_run("--json", "--model", str(tmp_path / "model.json"), str(tmp_path / "job.log"))
    assert out.returncode == 1
    root = json.loads(out.stdout)["root_cause"]
    assert (root["category"], root["confidence"], root["origin"]) == ("host_oom", "likely", "model")


def test_below_its_thresholds_the_model_says_nothing(tmp_path: Path) -> None:
    model = load_model(_hand_model(tmp_path, likely=5.0, weak=4.0))
    diagnosis = Diagnosis(root_cause=None, findings=[], files=[str(_job(tmp_path, LOADER_KILLED))])
    assert consult(diagnosis, model, {}).root_cause is None


def test_a_log_where_nothing_says_something_went_wrong_gets_no_opinion(tmp_path: Path) -> None:
    # The same words as the killed loader's, without its launcher killing anything: a run loading
    # its checkpoint. A healthy run's setup resembles the failures that happen during setup.
    model = load_model(_hand_model(tmp_path))
    healthy = LOADER_KILLED.replace("Killing subprocess", "Started subprocess")
    diagnosis = Diagnosis(root_cause=None, findings=[], files=[str(_job(tmp_path, healthy))])
    assert consult(diagnosis, model, {"host_oom": "Host (CPU) memory ran out."}).root_cause is None


def test_alarming_words_a_rule_already_read_as_a_warning_get_no_opinion(tmp_path: Path) -> None:
    """c10d prints "The client socket has failed to connect ..." while it retries, and a rule reads
    it as a warning: its words alone are no reason for the model to look (a healthy NeMo run of the
    corpus was named a rendezvous timeout for them). Lines no rule read still are."""
    model = load_model(_hand_model(tmp_path))
    log = _job(tmp_path, LOADER_KILLED)
    killing = [line for line in LOADER_KILLED.splitlines() if "Killing subprocess" in line]
    read = Finding(rule="some-warning", category="launcher", severity="warning", role="cascade", title="read",
                   file=str(log), line=3, evidence=[killing[0]])
    diagnosis = Diagnosis(root_cause=None, findings=[read], files=[str(log)])
    assert consult(diagnosis, model, {"host_oom": "Host (CPU) memory ran out."}).root_cause is None  # 9440 too: digits aside, the same line
    other = replace(read, evidence=["[2024-03-02 10:00:01,100] [INFO] [launch.py:146:main] WORLD INFO DICT"])
    said = consult(replace(diagnosis, findings=[other]), model, {"host_oom": "Host (CPU) memory ran out."})
    assert said.root_cause is not None and said.root_cause.category == "host_oom"


def test_a_sure_rule_is_never_overruled(tmp_path: Path) -> None:
    log = _job(tmp_path, "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    out = diagnose_run("--json", str(log))
    root = json.loads(out.stdout)["root_cause"]
    assert (root["rule"], root["confidence"]) == ("cuda-oom", "certain")


def test_a_failure_the_rules_judged_a_victim_does_not_come_back_as_the_models_root_cause(tmp_path: Path) -> None:
    # A rank's ValueError (no rule names it: the rules are unsure), then a line of a failure the
    # rules read and judged its victim. The model, reading the same words, leans to that failure.
    model = load_model(_hand_model(tmp_path))
    log = _job(tmp_path, "[rank1]: ValueError: labels have 3 columns\n" + LOADER_KILLED)
    raised = Finding(rule="python-exception", category="python_exception", severity="error", role="root",
                     title="ValueError on rank 1", rank=1, file=str(log), line=1, fields={"exc_type": "ValueError"},
                     confidence="likely")  # as the reader of uncaught exceptions says it
    victim = Finding(rule="launcher-killed", category="host_oom", severity="error", role="cascade",
                     title="DeepSpeed's launcher killed its workers", file=str(log), line=4)
    diagnosis = Diagnosis(root_cause=raised, findings=[raised, victim], files=[str(log)], confidence="likely")
    assert consult(diagnosis, model, {}).root_cause == raised
    # Where the rules saw nothing of it, the same opinion is still heard.
    said = consult(replace(diagnosis, findings=[raised]), model, {})
    assert (said.root_cause.category, said.root_cause.origin, said.root_cause.rank) == ("host_oom", "model", 1)


def test_a_lone_exception_then_a_watchdog_timeout_names_the_exception(tmp_path: Path) -> None:
    # torch 2.x's text: the watchdog line (ProcessGroupNCCL.cpp) after a rank's one-line error.
    log = _job(tmp_path, "[rank1]: ValueError: labels have 3 columns\n"
               "[rank0]:[E1120 10:11:12.000000 123 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
               "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
               "ran for 600012 milliseconds before timing out.\n")
    root = json.loads(diagnose_run("--json", str(log)).stdout)["root_cause"]
    assert (root["category"], root["rank"], root["origin"]) == ("python_exception", 1, "log")


def test_clean_logs_of_the_corpus_stay_clean_with_the_model() -> None:
    # In one process (a `monitor diagnose` per log took 75 s for 80 logs); the shipped catalogue
    # brings the shipped model as the command's does.
    catalogue = load_catalogue(include_user=False)
    assert catalogue.model_path is not None and Path(catalogue.model_path).name == "model.json"
    clean = [case for case in load_corpus(REAL) if case.category == "clean"]
    assert len(clean) >= 80
    for case in clean:
        # The model names no failure in a clean log; what the rules flag is floor.toml's count
        # (clean_flagged), judged by test_rules_eval.
        root = diagnose_paths([str(case.log)], catalogue).root_cause
        assert root is None or root.origin != "model", case.name


def test_a_peer_still_training_does_not_hide_the_rank_that_failed(tmp_path: Path) -> None:
    """The model is kept quiet only where every file ends in training progress: a rank's memory
    summary beside a peer whose log ends on a step line still gets the model's reading."""
    catalogue = load_catalogue(include_user=False)
    failed = tmp_path / "rank0.log"
    failed.write_bytes((REAL / "cuda_oom" / "qv-facebookresearch-fairseq-4352.log").read_bytes())
    alone = diagnose_paths([str(failed)], catalogue).root_cause
    assert alone is not None and (alone.origin, alone.category) == ("model", "cuda_oom")
    peer = tmp_path / "rank1.log"
    peer.write_text("epoch 001:  12%|#2        | 120/1000 [00:41<05:02, 2.91it/s, loss=7.412, ppl=170.3]\n")
    both = diagnose_paths([str(failed), str(peer)], catalogue).root_cause
    assert both is not None and (both.origin, both.category) == ("model", "cuda_oom")
    # (Where every file ends in progress the model stays quiet: test_engine_classes's
    # test_waits_that_passed_are_no_failure.)


@pytest.mark.parametrize(("content", "says"), [
    ("{not json", "not a usable model"),
    (json.dumps({"format": "something-else/2"}), "not a monitor model"),
    (json.dumps({"format": "monitor-second-opinion/1", "categories": ["clean", "cuda_om"], "terms": [],
                 "idf": [], "weights": {}, "bias": {}, "likely": 0, "weak": 0}), "unknown categories: cuda_om"),
])
def test_a_bad_model_file_is_one_line_and_the_rules_alone_decide(tmp_path: Path, content: str, says: str) -> None:
    model = tmp_path / "bad.json"
    model.write_text(content)
    with pytest.raises(ModelError, match=says):
        load_model(model)
    # A line that says something went wrong and that no rule reads: the model is asked, so loaded.
    log = _job(tmp_path, "Loading model\nthe worker went away: fatal\n")
    out = diagnose_run("--json", "--model", str(model), str(log))
    assert out.returncode == 0, out.stderr  # nothing found by the rules; the model said nothing
    [problem] = json.loads(out.stdout)["problems"]
    assert problem.startswith(f"{model}: ") and problem.endswith("; the rules alone decide") and says in problem
    assert "Traceback" not in out.stdout + out.stderr


def test_a_healthy_log_never_loads_the_model(tmp_path: Path) -> None:
    """Nothing for the model to judge (no line says something went wrong): the model file is never
    read, so even a broken one is no problem, and `diagnose` spares the time of loading it."""
    model = tmp_path / "bad.json"
    model.write_text("{not json")
    log = _job(tmp_path, "step 1 loss 2.31\nstep 2 loss 2.12\nsaved checkpoint to out/ckpt-2.pt\n")
    out = diagnose_run("--json", "--model", str(model), str(log))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["problems"] == []


def test_a_missing_model_file_is_one_line_too(tmp_path: Path) -> None:
    log = _job(tmp_path, "[rank1]: ValueError: bad batch\n")
    out = diagnose_run("--json", "--model", str(tmp_path / "none.json"), str(log))
    assert out.returncode == 1
    assert json.loads(out.stdout)["problems"] == [f"{tmp_path / 'none.json'}: No such file or directory; the rules alone decide"]


def test_model_none_turns_it_off_and_eval_reports_rules_model_and_both(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for case in load_corpus(REAL)[:12]:
        shutil.copy(case.log, corpus / case.log.name)
        shutil.copy(case.label, corpus / case.label.name)
    out = _monitor("rules", "eval", "--json", str(corpus))
    result = json.loads(out.stdout)
    assert set(result["modes"]) == {"rules", "model", "both"} and "lost" in result
    text = _monitor("rules", "eval", str(corpus)).stdout
    assert "rules alone" in text and "model alone" in text and "rules + model" in text
    off = json.loads(_monitor("rules", "eval", "--json", "--model", "none", str(corpus)).stdout)
    assert "modes" not in off


def test_the_live_root_cause_is_the_second_opinion_the_end_report_gives(tmp_path: Path) -> None:
    """Where the rules are unsure (only an exception no rule names), the session's root cause
    (what the screen and the Prometheus root-cause series show) is the model's, as in the end
    report: every mode names the same cause. A case of the corpus the model was trained on."""
    from monitor.session.job_session import JobSession

    case = Path(__file__).resolve().parents[1] / "sample_logs" / "real" / "disk_full" / "a-pytorch-pytorch-10577.log"
    log = tmp_path / "train.log"
    shutil.copyfile(case, log)
    clock = FakeClock()
    session = JobSession([str(log)], load_catalogue(include_user=False), clock=clock)
    for _ in range(3):
        clock.advance(1.0)  # quiet: the records in progress complete
        session.step(timeout=0)
    assert [f.category for f in session.findings] == ["python_exception"]  # what the rules say
    live = session.root_cause()
    assert (live.origin, live.category, live.confidence) == ("model", "disk_full", "likely")
    assert session.root_cause() is live  # read again only when the findings change
    report = session.diagnosis().root_cause
    assert (report.origin, report.category, report.title) == (live.origin, live.category, live.title)
    session.close()


def test_a_weak_opinion_names_what_a_traceback_cut_before_its_exception_was(tmp_path: Path) -> None:
    """A weak guess never replaces what a line says, but a traceback cut before its exception line
    says only that something failed: the opinion names the category, the rank stays the traceback's."""
    model = load_model(_hand_model(tmp_path, likely=5.0, weak=0.1))
    cut = Finding(rule="python-exception-cut", category="python_exception", severity="error", role="cascade",
                  title="A traceback on rank 3, cut before its exception", file=str(_job(tmp_path, LOADER_KILLED)),
                  rank=3, rank_source="prefix", confidence="weak", fields={"frame_file": "/home/u/train.py"})
    said = consult(Diagnosis(root_cause=cut, findings=[cut], files=[cut.file], confidence="weak"), model, {})
    assert (said.root_cause.category, said.root_cause.confidence, said.root_cause.rank) == ("host_oom", "weak", 3)
    typed = replace(cut, rule="python-exception", fields={"exc_type": "ValueError"})
    said = consult(Diagnosis(root_cause=typed, findings=[typed], files=[cut.file], confidence="weak"), model, {})
    assert said.root_cause is typed


def test_a_category_never_wrong_held_out_still_needs_a_score_off_the_boundary() -> None:
    """Per category, the thresholds are the lowest held-out scores that were right often enough;
    where every held-out opinion of a category was right, that reached 0, the one-vs-rest boundary,
    and a healthy log's tip line scored 0.01 became a likely failure. No threshold is below
    learn.MIN_SCORE."""
    from monitor.diagnosis import learn
    classes = ["clean", "cuda_oom", "nan_loss"]
    rows = [[-1.0, 0.4, -1.0], [-1.0, 0.02, -1.0], [-1.0, 0.001, -1.0], [0.5, -1.0, -1.0]]
    labels = ["cuda_oom", "cuda_oom", "cuda_oom", "clean"]
    likely, weak, per_category = learn._thresholds(rows, labels, classes, [True] * len(rows))
    assert per_category["cuda_oom"] == [learn.MIN_SCORE, learn.MIN_SCORE]
    assert likely >= learn.MIN_SCORE and weak >= learn.MIN_SCORE


def test_only_a_clean_log_the_model_would_be_asked_about_sets_a_threshold() -> None:
    """A healthy run's held-out score above a category's opinions raises that category's
    thresholds above it, but only where the rules would leave that log to the model: one whose
    alarm a rule reads as a warning (apex's skipped step beside "grad_norm 1.0 (nan)") never meets
    it, and once raised the NaN threshold to 0.62 when a corpus gained it."""
    from monitor.diagnosis import learn
    classes = ["clean", "nan_loss"]
    rows = [[-1.0, 0.7], [-1.0, 0.5], [-1.0, 0.3], [-1.0, 0.2], [-0.5, 0.6]]
    labels = ["nan_loss", "nan_loss", "nan_loss", "nan_loss", "clean"]
    _, _, asked = learn._thresholds(rows, labels, classes, [True] * 5)
    assert asked["nan_loss"][0] == 0.7  # only the opinion above the healthy log's stands
    _, _, never_asked = learn._thresholds(rows, labels, classes, [True] * 4 + [False])
    assert never_asked["nan_loss"] == [0.2, 0.2]


def test_training_sets_thresholds_on_the_clean_logs_the_rules_leave_to_the_model(tmp_path: Path) -> None:
    """`asked_by` is the rules' own word: a healthy apex run whose NaN running mean a rule reads as
    a warning is not left to the model (microsoft/Swin-Transformer#47, as posted); the same run
    with a line no rule reads that says something failed is."""
    from monitor.diagnosis import learn
    from monitor.diagnosis.corpus import Case
    asked = learn.asked_by(load_catalogue(include_user=False))
    swin = ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 131072.0\n"
            "[2021-04-25 05:35:19 swin_base_patch4_window7_224](main_prune.py 310): INFO Train: [0/300][4050/5004]"
            "   eta 0:17:06 lr 0.000500 time 1.1737 (1.0765)    loss 3.2572 (3.3279)    grad_norm 1.0323 (nan)"
            "  mem 4814MB\n")

    def case(text: str) -> Case:
        log = tmp_path / f"{len(list(tmp_path.iterdir()))}.log"
        log.write_text(text)
        return Case(name=log.stem, log=log, label=log.with_suffix(".toml"), source="owner/repo#1", category="clean")

    assert not asked(case(swin))
    assert asked(case(swin + "the evaluation hook failed to write its report; going on\n"))
