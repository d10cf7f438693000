"""The ranks' stacks side by side: one column per place the ranks are in (the ranks that are
somewhere else first, marked), each the main thread of one of its ranks, innermost frame on
top, the frame that places the group highlighted. ``s`` takes them again."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from monitor.stacks.compare import ODD_KINDS, groups_of, is_user_code, source_line, who
from monitor.stacks.model import Capture
from monitor.text import safe_text

# How often the screen looks for a newer capture (the probe runs on its own thread).
CHECK_S = 0.3


class StacksScreen(Screen[None]):
    DEFAULT_CSS = """
    StacksScreen #stacks-summary { height: auto; padding: 0 1; background: $panel; }
    StacksScreen #stacks-columns { height: 1fr; }
    StacksScreen .stack-column { width: 1fr; min-width: 40; border: round $primary-darken-2; padding: 0 1; }
    StacksScreen .stack-column.-odd { border: round $error; }
    """
    BINDINGS = [
        Binding("escape,q", "close", "Close"),
        Binding("s", "take", "Take again"),
    ]

    def __init__(self, probe) -> None:
        """``probe``: the session's HangProbe (``latest``, ``captures``, ``busy``, ``trigger``)."""
        super().__init__()
        self.probe = probe
        self._shown = -1

    def compose(self) -> ComposeResult:
        yield Static(id="stacks-summary")
        yield Horizontal(id="stacks-columns")
        yield Footer()

    def on_mount(self) -> None:
        self._refresh()
        self.set_interval(CHECK_S, self._refresh)

    def action_close(self) -> None:
        self.dismiss(None)

    def action_take(self) -> None:
        if not self.probe.trigger("request"):
            self.notify("taking the stacks already", markup=False)
        self._refresh()

    def _refresh(self) -> None:
        summary = self.query_one("#stacks-summary", Static)
        if self.probe.latest is None or self.probe.captures == self._shown:
            if self.probe.latest is None:
                summary.update(Text("taking every rank's stack with py-spy..." if self.probe.busy() else
                                    "no stacks taken yet: press s", style="italic"))
            return
        self._shown = self.probe.captures
        capture, finding = self.probe.latest
        summary.update(self._summary(capture, finding))
        columns = self.query_one("#stacks-columns", Horizontal)
        columns.remove_children()
        odd_ranks = set(finding.ranks) if finding is not None and finding.fields.get("kind") in ODD_KINDS else set()
        groups = groups_of(capture)
        groups.sort(key=lambda group: not (odd_ranks & {s.rank for s in group[1]}))  # the odd ones first
        for place, stacks in groups:
            odd = bool(odd_ranks & {s.rank for s in stacks})
            column = VerticalScroll(Static(self._column(place, stacks, odd)), classes="stack-column")
            column.set_class(odd, "-odd")
            columns.mount(column)

    def _summary(self, capture: Capture, finding) -> Text:
        import time

        when = time.strftime("%H:%M:%S", time.localtime(capture.taken))
        text = Text(f"stacks at {when} ({capture.trigger}, py-spy {capture.took_s:.2f} s, {capture.host})  ",
                    style="dim")
        text.append("s: take again  Esc: back", style="dim italic")
        if finding is not None:
            text.append("\n")
            text.append(safe_text(finding.title), style="bold red" if finding.severity == "error" else "bold")
        if capture.problem:
            text.append("\n" + safe_text(capture.problem), style="yellow")
        for stack in capture.processes:
            if stack.error and not capture.problem:
                text.append("\n" + safe_text(stack.error_line()), style="yellow")
        return text

    def _column(self, place, stacks, odd: bool) -> Text:
        text = Text()
        text.append(who(stacks), style="bold red" if odd else "bold")
        text.append(f"  {place.describe(len(stacks) > 1)}\n", style="red" if odd else "")
        text.append(f"pid {', '.join(str(s.pid) for s in stacks)}\n\n", style="dim")
        thread = stacks[0].main_thread()
        for frame in thread.frames if thread else []:
            mark = frame == place.frame
            style = "reverse bold" if mark else ("" if is_user_code(frame.file) else "dim")
            text.append(("> " if mark else "  ") + safe_text(frame.function), style=style)
            text.append(f"  {safe_text(Path(frame.file).name)}:{frame.line}\n", style="dim" if not mark else style)
            if mark and (code := source_line(frame)):
                text.append(f"    {safe_text(code)}\n", style="italic")
        return text
