"""The knob registry (rules/knobs.toml): every knob a remedy names is in it, the registry's
torch entries hold in the installed torch, and `monitor rules test` fails on an unknown knob."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.diagnosis.catalogue import RuleError, load_catalogue
from monitor.diagnosis.knobs import KnobError, load_file, lookup, mentions, unknown
from monitor.diagnosis.advice import shipped as shipped_advice
from monitor.diagnosis.ruletest import check_rules

ROOT = Path(__file__).resolve().parent.parent
# The Python modules that write remedies and advice of their own (not from rule files).
ADVICE_MODULES = (
    "monitor/runner/explain.py", "monitor/runner/preflight.py", "monitor/runner/restart.py",
    "monitor/metrics/signals.py", "monitor/session/stall.py", "monitor/checkpoints/watch.py",
    "monitor/diagnosis/pyexc.py",
)


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue(include_user=False)


def test_mentions_finds_each_kind_of_knob():
    text = (
        "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, pass --master-port to torchrun, call "
        "init_process_group(backend=\"gloo\", timeout=timedelta(minutes=...)) and torch.cuda.set_device(local_rank); "
        "{tried} of {total:size} and {node|<node>} are fields, not knobs; mmap=True too."
    )
    assert mentions(text) == [
        "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments", "--master-port", "init_process_group",
        "init_process_group(backend=)", "init_process_group(timeout=)", "timedelta(minutes=)",
        "torch.cuda.set_device", "local_rank", "mmap=",
    ]


def test_prose_and_paths_are_not_knobs():
    assert mentions("Look at rank 0's log, /dev/shm and https://api.wandb.ai; the GPU fell off the bus.") == []


def test_a_shortened_name_stands_for_the_one_entry_it_shortens(catalogue):
    knobs = catalogue.knobs
    assert lookup("weights_only", knobs).name == "torch.load(weights_only=)"
    assert lookup("init_method=", knobs).name == "torch.distributed.init_process_group(init_method=)"
    assert lookup("init_process_group(timeout=)", knobs).name == "torch.distributed.init_process_group(timeout=)"
    assert lookup("clip_grad_norm_", knobs).name == "torch.nn.utils.clip_grad_norm_"
    assert lookup("NCCL_TIMEOUTS", knobs) is None


def test_every_knob_a_rule_names_is_registered(catalogue):
    _, failures = check_rules(catalogue)
    assert [f for f in failures if "knobs.toml" in f] == []


def _advice_strings(path: Path):
    """(line, text) of the string constants of ``path`` that are prose (4+ words), docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value) for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if len(node.value.split()) >= 4:
                yield node.lineno, node.value


def test_every_knob_the_python_advice_names_is_registered(catalogue):
    missing = [
        f"{module}:{line}: {name}"
        for module in ADVICE_MODULES
        for line, text in _advice_strings(ROOT / module)
        for name in unknown(text, catalogue.knobs)
    ]
    assert missing == []


def test_the_advice_scan_reads_the_python_remedies():
    """The scan is not vacuous: it sees the knobs the metric and preflight remedies name."""
    seen = {name for module in ADVICE_MODULES for _, text in _advice_strings(ROOT / module) for name in mentions(text)}
    seen |= {name for entry in shipped_advice().values() for name in mentions(entry.text)}  # rules/advice.toml
    assert {"--stall-after", "NCCL_TIMEOUT", "ROW_REMAPPER", "--shm-size", "CUDA_LAUNCH_BLOCKING"} <= seen


def test_every_registry_entry_is_named_by_some_remedy(catalogue):
    """No entry outlives the advice that named it: the registry is what the remedies say, checked."""
    texts = [t for r in catalogue.rules for t in (r.title, r.confirmed_title, r.remedy, *(a.text for a in r.advice))]
    texts += [text for module in ADVICE_MODULES for _, text in _advice_strings(ROOT / module)]
    from monitor.diagnosis.advice import shipped

    texts += [entry.text for entry in shipped().values()]  # advice.toml: the built-in findings' words
    used = {lookup(name, catalogue.knobs).name for text in texts for name in mentions(text)}
    assert sorted(set(catalogue.knobs) - used) == []
    assert len(catalogue.knobs) >= 100


@pytest.fixture(scope="module")
def torch_dir() -> Path:
    return Path(pytest.importorskip("torch").__file__).resolve().parent


def test_torch_files_hold_their_knobs(catalogue, torch_dir):
    """Each entry that names a file of the installed torch finds its text there (CI installs torch 2.13)."""
    checked = 0
    for knob in catalogue.knobs.values():
        if not knob.torch_file:
            continue
        data = (torch_dir / knob.torch_file).read_bytes()
        assert (knob.contains or knob.name).encode() in data, f"{knob.source}:{knob.line}: {knob.name} not in {knob.torch_file}"
        checked += 1
    assert checked >= 35


def _resolve(dotted: str):
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            target = getattr(target, attribute)
        return target
    raise ImportError(dotted)


def test_torch_names_and_their_arguments_exist_in_the_installed_torch(catalogue, torch_dir):
    checked = 0
    for knob in catalogue.knobs.values():
        name = knob.name
        if not name.startswith("torch."):
            continue
        callee, _, keyword = name.partition("(")
        target = _resolve(callee)
        if keyword:
            parameters = inspect.signature(target).parameters
            assert keyword.rstrip("=)") in parameters, f"{knob.source}:{knob.line}: {name}"
        checked += 1
    assert checked >= 20


def test_monitor_flags_exist_on_the_commands_that_name_them(catalogue):
    for knob in catalogue.knobs.values():
        for command in knob.monitor_command.split():
            out = subprocess.run([sys.executable, "-m", "monitor", command, "--help"], capture_output=True, text=True)
            assert knob.name in out.stdout, f"monitor {command} has no {knob.name}"


# ---- the registry's discipline, as a rule author meets it ---------------------------------------

def test_rules_test_fails_on_a_remedy_naming_an_unknown_knob(tmp_path):
    (tmp_path / "mine.toml").write_text(
        "[[rule]]\n"
        "id = \"my-timeout\"\ncategory = \"nccl_timeout\"\nseverity = \"error\"\nrole = \"root\"\n"
        "title = \"My collective timed out\"\npatterns = ['''my collective timed out''']\n"
        "remedy = \"Raise NCCL_TIMEOUT_SECONDS=3600 or pass --collective-timeout.\"\n"
        "[rule.examples]\nmatch = [\"my collective timed out\"]\n",
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, "-m", "monitor", "rules", "test", str(tmp_path), "--no-user-rules"],
        capture_output=True, text=True,
    )
    assert out.returncode == 1
    assert "names 'NCCL_TIMEOUT_SECONDS', which no knobs.toml holds" in out.stdout
    assert "names '--collective-timeout'" in out.stdout
    # The pack's own registry makes its knobs known.
    (tmp_path / "knobs.toml").write_text(
        "[[knob]]\nname = \"NCCL_TIMEOUT_SECONDS\"\nkind = \"env\"\nlibrary = \"our launcher\"\nverified = \"launcher.py:12\"\n"
        "[[knob]]\nname = \"--collective-timeout\"\nkind = \"flag\"\nlibrary = \"our launcher\"\nverified = \"launcher.py:30\"\n",
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, "-m", "monitor", "rules", "test", str(tmp_path), "--no-user-rules"],
        capture_output=True, text=True,
    )
    assert out.returncode == 0, out.stdout


def test_a_bad_registry_is_one_line_naming_file_and_line(tmp_path):
    (tmp_path / "knobs.toml").write_text(
        "[[knob]]\nname = \"A_B\"\nkind = \"env\"\nlibrary = \"x\"\nverified = \"y\"\n\n"
        "[[knob]]\nname = \"C_D\"\nkind = \"enviroment\"\nlibrary = \"x\"\nverified = \"y\"\n",
        encoding="utf-8",
    )
    with pytest.raises(KnobError, match=r"knobs\.toml:7: knob C_D: kind 'enviroment' is not one of"):
        load_file(tmp_path / "knobs.toml")
    (tmp_path / "r.toml").write_text("", encoding="utf-8")
    with pytest.raises(RuleError, match=r"knobs\.toml:7: knob C_D"):
        load_catalogue([tmp_path], include_user=False)
