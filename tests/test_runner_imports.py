"""The runner and checkpoint packages are core: they never import textual or torch themselves."""

import subprocess
import sys

MODULES = ["monitor.runner.supervise", "monitor.runner.recorder", "monitor.runner.job",
           "monitor.runner.preflight", "monitor.runner.restart", "monitor.runner.explain",
           "monitor.checkpoints.verify", "monitor.checkpoints.watch", "monitor.commands.run",
           "monitor.commands.check_ckpt"]


def test_runner_does_not_import_textual_or_torch():
    code = ("import sys\n" + "".join(f"import {m}\n" for m in MODULES)
            + "print(sorted(m for m in ('textual', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_help_is_light():
    code = ("import sys\nfrom monitor.cli import main\n"
            "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'textual' not in sys.modules and 'torch' not in sys.modules\n"
            "assert 'monitor.runner.supervise' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "--watch-ckpt DIR" in result.stdout and "--restart N" in result.stdout
