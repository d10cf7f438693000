"""Modal screens: the key help, and the question asked when quitting while the job runs."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

KEYS = (
    # First: at 24 rows the end of the list is below the fold.
    ("?", "this help; Esc (or ? or q) closes it"),
    ("/", "filter the log by regex (only matching lines; the count shows); Esc clears"),
    ("f", "find: a regex highlighted in the log and jumped to, every line kept; ] / [ next / previous match; Esc clears"),
    ("e / w", "only errors / errors and warnings (press again for all lines)"),
    ("r / R", "show only the next / previous rank (cycles back to all ranks)"),
    ("o / O", "a job of several nodes (monitor run --job-dir): show only the next / previous node"),
    ("space", "pause or resume following the end of the log"),
    ("L", "a log opened big shows its last lines: read back 10,000 earlier ones"),
    ("z", "wrap long lines at the screen's width (the rank badge stays), or show each on one row (Left/Right scroll)"),
    ("End / Home", "follow the end / go to the first line (pauses)"),
    ("G / g", "as less: follow the end / go to the first line"),
    ("j / k", "as less: one line down / up"),
    ("ctrl+f / ctrl+b", "as less: a page down / up (so do PageDown / PageUp)"),
    ("n / N", "in the log with a find active: next / previous match (as less); otherwise next / previous finding"),
    ("c", "jump to the root cause"),
    ("d", "into the finding's detail (what to do comes first): arrows, PageUp / PageDown scroll it; Esc back to the log"),
    ("s", "`monitor run`, or a watch of its log: every rank's Python stack now (py-spy), side by side, the odd"
          " ranks marked"),
    ("Enter", "in the findings table: show that finding in the log"),
    ("Tab", "move between log, findings, the finding's detail and filter"),
    ("y / Y", "copy the selected line (else the last line in view: never one off screen) / the selected finding"
               " with what to do (OSC 52: the terminal's clipboard; where a terminal does not take it, Shift+drag"
               " selects text)"),
    ("x", "export the findings as JSON (as `monitor diagnose --json`) to monitor-findings-<time>.json here"),
    ("t", "dark / light theme"),
    ("ctrl+p", "command palette (all of the above by name)"),
    ("q", "quit (asks first when a job started by `monitor run` is still running)"),
    ("ctrl+c", "`monitor run`: stop the job (SIGINT to every rank, as Ctrl-C in a terminal; again: SIGKILL), quit when it ended;"
               " otherwise quit"),
)


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: auto; max-height: 90%;
        border: thick $primary; background: $panel; padding: 1 2; }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, what)
        with VerticalScroll():
            yield Static(Text("monitor: keys", style="bold"))
            yield Static(table)
            yield Static(Text.assemble(
                ("\nUnlike less: ", "bold"),
                "/ filters (hides the lines that do not match); f finds (every line kept). "
                "space pauses following; PageDown or ctrl+f pages. "
                "n / N go to the next finding unless a find is active in the log. "
                "q quits at once (asks first while a job started by `monitor run` runs). "
                "Find and filter are smart case (any case unless the regex holds a capital letter).",
            ))
            yield Static(Text(
                "\nRank badges: each rank has its own colour. Gutter: ★ root cause, ● error, ▲ warning.\n"
                "Findings' first time: the log line's own time; ~HH:MM:SS when the line has none (when the monitor saw it).\n"
                "Log text is shown literally: markup and escape codes in a log never change the display.",
                style="dim",
            ))

    def action_dismiss(self) -> None:
        self.dismiss(None)


class QuitScreen(ModalScreen[str]):
    """Asks what to do with a running job: "stop", "leave" or "cancel"."""

    DEFAULT_CSS = """
    QuitScreen { align: center middle; }
    QuitScreen > Vertical { width: 64; height: auto; border: thick $warning; background: $panel; padding: 1 2; }
    QuitScreen Horizontal { height: auto; margin-top: 1; }
    QuitScreen Button { margin-right: 1; }
    """
    BINDINGS = [
        Binding("s", "choose('stop')", "Stop the job"),
        Binding("l", "choose('leave')", "Leave it running"),
        Binding("escape", "choose('cancel')", "Cancel"),
    ]

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text.assemble(("The job is still running:\n", "bold"), (self.command, "italic")))
            yield Static("Quitting the monitor does not stop it unless you say so.")
            with Horizontal():
                yield Button("Leave it running [l]", id="leave", variant="primary")
                yield Button("Stop the job [s]", id="stop", variant="error")
                yield Button("Cancel [esc]", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)
