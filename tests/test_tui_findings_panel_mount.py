"""The findings panel shown findings before its table was composed: on a loaded machine the log
worker's first batch was handled before the panel's compose, and the app died on "No nodes match
'DataTable'" (a full suite, 2026-11-27). What came early is shown once the table is there."""

from __future__ import annotations

from textual.app import App

from monitor.model import Finding
from monitor.tui.findings_panel import FindingsPanel

ROOT = Finding(rule="python-exception", category="python_exception", severity="error", role="root",
               title="ValueError on rank 1", file="train.log", line=7, rank=1, seq=1)


class PanelApp(App):
    def __init__(self, panel: FindingsPanel) -> None:
        super().__init__()
        self.panel = panel

    def compose(self):
        yield self.panel


async def test_findings_shown_before_the_table_is_composed_appear_once_it_is():
    panel = FindingsPanel()
    panel.fit(60)  # a narrow screen, before the table exists
    panel.show([ROOT], ROOT)  # before the panel is even mounted: kept, not an error
    async with PanelApp(panel).run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        assert panel.table.row_count == 1 and panel.selected() == ROOT
        assert panel.table.show_header is False  # the narrow columns asked for before it existed
