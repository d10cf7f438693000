"""The watch screen with the real NVML sampler behind its GPU panel: ``watch_app`` over a log,
driven by Textual's pilot at 80x24 and 200x50 while the GPU works; each screen saved as SVG, and
the metrics panel as the text a terminal shows. Argv: the log to watch, the output folder.
Part of the device check (tests/device/check.sh); where there is no GPU it shows why there are
no GPU metrics."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from rich.console import Console

from monitor.diagnosis.catalogue import load_catalogue
from monitor.tui import watch_app
from monitor.tui.metrics_panel import MetricsPanel


async def shoot(log: str, out: Path, size: tuple[int, int]) -> None:
    app = watch_app([log], catalogue=load_catalogue())
    async with app.run_test(size=size) as pilot:
        await pilot.pause(4.0)  # a few samples, one second apart
        name = f"watch-{size[0]}x{size[1]}"
        app.save_screenshot(filename=f"{name}.svg", path=str(out))
        panel = app.query_one(MetricsPanel)
        console = Console(record=True, width=max(panel.size.width, 20), file=open("/dev/null", "w"))
        console.print(panel.render())
        (out / f"{name}-metrics.txt").write_text(console.export_text())


def main() -> int:
    log, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for size in ((80, 24), (200, 50)):
        asyncio.run(shoot(log, out, size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
