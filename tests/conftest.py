"""Markers by what a test module starts (pyproject.toml registers them): `real_job` for modules
that run real training jobs (torch/gloo under torchrun, or `monitor run` of a real process),
`terminal` for those that drive the screen in a real tmux terminal. `-m "not real_job"` is the
quick loop; CI runs everything."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile

import pytest

# Reports fit $COLUMNS when it is set, and pytest-xdist's workers inherit one that a serial run
# does not have: dropped as the suite starts, before any fixture (a module's, too) copies the
# environment; a test that wants a width sets it.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

# A suite started in the background by a shell without job control (`pytest ... &` in a script)
# inherits SIGINT ignored, and an ignored signal stays ignored in every process a test starts: the
# tests that press Ctrl-C on `monitor run` or the demo would wait in vain. Each process of the suite
# (the xdist workers import this too) takes Python's own handler back, which exec resets to the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The suite starts about 700 python processes (monitor's commands, recorders, torchrun and
# its ranks). Where PYTHONDONTWRITEBYTECODE is set (it is in this VM's environment), each of them compiled
# monitor's modules again from source (~0.06 s of CPU a `monitor` process, ~4 s for each pytest
# worker's collection): the suite's processes share one bytecode cache instead, in a folder of its
# own (the source tree stays as clean as the variable keeps it), made by the first process (the
# xdist controller or the serial run; its children inherit it) and removed by that one at the end.
_MADE_PYCACHE: str | None = None
if sys.flags.dont_write_bytecode and not os.environ.get("PYTHONPYCACHEPREFIX"):
    _MADE_PYCACHE = tempfile.mkdtemp(prefix="monitor-tests-pycache-")
    os.environ["PYTHONPYCACHEPREFIX"] = _MADE_PYCACHE
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix, sys.dont_write_bytecode = _MADE_PYCACHE, False


def pytest_unconfigure(config: pytest.Config) -> None:
    if _MADE_PYCACHE is not None:
        shutil.rmtree(_MADE_PYCACHE, ignore_errors=True)


# Modules whose tests start torch jobs (tests/jobs/, monitor/demo/train.py) under torchrun or mp.
TORCH_JOBS = {
    "test_classes_real_jobs", "test_demo_train_scenarios", "test_demo_train_tempdir", "test_hangs_real",
    "test_flight_recorder", "test_multinode_real", "test_novelty_real", "test_runner_torchrun",
    "test_faults_round3_c", "test_ckpt_verify", "test_ckpt_watch", "test_straggler_real",
    "test_collectives_real", "test_slurm_real",
}
TERMINAL = {"test_second_hour_e", "test_second_hour_g_left_running"}


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture (most are real jobs run once for the module)."""
    info = getattr(item, "_fixtureinfo", None)
    return info is not None and any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


# tryfirst: xdist's worker reads the xdist_group marks in its own hook of this name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module is not None else ""
        if module in TORCH_JOBS:
            item.add_marker(pytest.mark.real_job)
        if module in TERMINAL:
            item.add_marker(pytest.mark.terminal)
        # Under `pytest -n 2` (pyproject: --dist loadgroup) a module's tests that share a fixture
        # go to one worker: split between two, each ran the fixture's real jobs again.
        if _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(module))



# Most diagnosis tests run `monitor diagnose` through its own entry in the test's process
# (diagnosis_helpers.diagnose_json): each call loaded the rule files and the learned model again,
# ~0.7 s of CPU of the ~0.8 s a call costs. Within one process of the suite a file is parsed once
# for each content it has had (its path and a digest of its bytes): a test that writes or edits a
# rule file or a model gets it parsed afresh. Each load hands out rules of its own, as they were
# parsed: a rule compiles its patterns on first use (Rule.patterns), and one test's use must not
# show in the next test's catalogue. A model is frozen. Modules that imported the loaders by name
# before this ran keep the uncached ones (slower, not wrong).
_LARGEST_CACHED = 8 << 20


def _once_per_content(load, fresh=lambda parsed: parsed):
    import functools
    import hashlib

    @functools.lru_cache(maxsize=64)
    def cached(path: str, digest: bytes, *args):
        return load(path, *args)

    @functools.wraps(load)
    def reading(path, *args):
        try:
            with open(path, "rb") as stream:
                content = stream.read(_LARGEST_CACHED + 1)
        except OSError:
            return load(path, *args)  # the loader says what is wrong with it
        if len(content) > _LARGEST_CACHED:
            return load(path, *args)  # a test of the loader's own bound
        return fresh(cached(str(path), hashlib.blake2b(content).digest(), *args))

    return reading


def _parse_each_content_once() -> None:
    from dataclasses import replace

    from monitor.diagnosis import catalogue, second_opinion

    def parsed_rules(path, *args):
        # Kept as (rule, its compiled patterns as parsed): the rules kept are never handed out.
        return tuple((rule, rule.compiled) for rule in load_rules_file(path, *args))

    load_rules_file = catalogue.load_file
    catalogue.load_file = _once_per_content(
        parsed_rules, fresh=lambda kept: [replace(rule, compiled=compiled) for rule, compiled in kept])
    second_opinion.load_model = _once_per_content(second_opinion.load_model)


_parse_each_content_once()
