"""The watch screen on a job folder of two nodes (real files, the real watch pipeline): node
badges, the node filter, the root cause's node, and every node's GPUs from their recordings."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from monitor.diagnosis.catalogue import load_catalogue
from monitor.logs import nodes
from monitor.logs.nodes import Node, write_node
from monitor.metrics.samples_file import SamplesFile
from monitor.tui import watch_app
from monitor.tui.findings_panel import FindingsPanel
from monitor.tui.log_view import LogView
from monitor.tui.metrics_panel import MetricsPanel
from tests.test_tui_app import settle
from tests.tui_helpers import host_sample

STEM = "run-20261125-100000"


def job_folder(tmp_path: Path) -> Path:
    job = tmp_path / "job-4242"
    for node_rank, name in enumerate(("gpu-01", "gpu-02")):
        folder = job / name
        folder.mkdir(parents=True)
        write_node(folder, Node(name, str(folder), name, "4242", {0: 2 * node_rank, 1: 2 * node_rank + 1}))
        lines = [f"[default{local}]:step {step} loss 0.5" for step in range(1, 4) for local in (0, 1)]
        if name == "gpu-02":
            lines += ["[default1]:Traceback (most recent call last):", '[default1]:  File "train.py", line 9, in <module>',
                      "[default1]:ValueError: bad batch"]
        (folder / f"{STEM}.log").write_text("\n".join(lines) + "\n")
        sample = host_sample(with_gpus=True)
        gpu = sample.gpus[0]
        sample = dataclasses.replace(sample, time=time.time(), gpus=[dataclasses.replace(gpu, index=i) for i in range(8)])
        recording = SamplesFile(folder / f"{STEM}.metrics.jsonl")
        recording.write(sample)
        recording.close()
    nodes.forget()
    return job


async def test_a_job_folder_shows_nodes_and_filters_by_node(tmp_path: Path):
    job = job_folder(tmp_path)
    app = watch_app([job], catalogue=load_catalogue(include_user=False))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, 15)
        view = app.query_one(LogView)
        assert app.store.nodes_seen == ["gpu-01", "gpu-02"]
        first = view.render_line(0).text
        assert first.startswith(" gpu-01 r0 [default0]:step 1 loss 0.5"), first
        # The root cause: rank 3 (local rank 1 of gpu-02), named with its node.
        for _ in range(100):
            if app.query_one(FindingsPanel).root is not None:
                break
            await pilot.pause(0.05)
        root = app.query_one(FindingsPanel).root
        assert (root.node, root.rank) == ("gpu-02", 3)
        assert "ROOT CAUSE  node gpu-02: ValueError on rank 3" in str(app.query_one("#finding-text").render())
        await pilot.press("o")
        assert view.line_filter.node == "gpu-01"
        assert view.row_count == 6 and {app.store.node(view._rows[i]) for i in range(view.row_count)} == {"gpu-01"}
        assert "node gpu-01" in str(app.query_one("#log-status").render())
        await pilot.press("o", "o")  # gpu-02, then every node again
        assert view.line_filter.node is None and view.row_count == 15
        # 16 GPUs on two nodes: one row per node.
        for _ in range(100):
            if app.query_one(MetricsPanel).sample is not None and app.query_one(MetricsPanel).sample.gpus:
                break
            await pilot.pause(0.05)
        panel = str(app.query_one(MetricsPanel).render())
        assert "gpu-01   8 GPUs util  90% (min 90%) mem max 60.0/80.0GiB 70°C 4000W" in panel, panel
        assert "gpu-02   8 GPUs" in panel
