"""The core runs without the UI: importing it must not import textual (or torch)."""

import subprocess
import sys

CORE = [
    "monitor.cli",
    "monitor.model",
    "monitor.logs.decode",
]


def test_core_does_not_import_textual_or_torch():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in CORE)
        + "print(sorted(m for m in ('textual', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_runs_without_textual():
    code = (
        "import sys\nfrom monitor.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'textual' not in sys.modules and 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
