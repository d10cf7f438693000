"""The live core and `monitor watch --help` run without the UI: no textual, no torch."""

import subprocess
import sys


def test_live_core_does_not_import_textual_or_torch():
    code = (
        "import sys\n"
        "import monitor.logs.follow, monitor.session.job_session, monitor.session.headless, monitor.commands.watch\n"
        "from monitor.cli import main\n"
        "try:\n    main(['watch', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('textual', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "--headless" in out.stdout and "--stall-after" in out.stdout
