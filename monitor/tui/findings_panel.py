"""Findings as they appear, the root cause marked; the selected one's evidence and remedy."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.cells import cell_len
from rich.text import Text
from textual.containers import Container, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static
from textual.widgets.data_table import CellDoesNotExist

from monitor.model import SEVERITY_ORDER, Finding
from monitor.tui import text_format as fmt
from monitor.tui.log_view import GUTTER_MARKS

# The title before the category: in a panel too narrow for every column (45% of 120), what is
# cut at the right edge is the category (the detail below names it), not what went wrong.
COLUMNS = ("mark", "sev", "ranks", "count", "first", "title", "category")
LABELS = dict(zip(COLUMNS, ("", "sev", "ranks", "n", "first", "title", "category")))
WIDTHS = dict(zip(COLUMNS, (1, 5, None, None, 9, None, None)))
# A narrow screen (80 columns: the table gets half, 6 rows) gives the title the width: the severity
# is the mark's (the log's gutter marks), the ranks are in the detail beside it, and there is no
# header row, so six findings show with ~35 characters of their titles.
NARROW_COLUMNS = ("mark", "title")
# A wide screen short of the widest (the panel is 45% of it) also keeps when: the title stays
# readable (at 120 columns with every column it showed ~20 characters).
MEDIUM_COLUMNS = ("mark", "sev", "ranks", "first", "title")
# Screen widths from which the findings go beside the log (below it, under WIDE) with the
# medium set of columns, and from which they show every column.
WIDE, FULL = 120, 200
# Rows the table grows to beside the log (below it, it fills the panel's height).
MAX_TABLE_ROWS = 12
SEVERITY_LABEL = {"error": "error", "warning": "warn", "info": "info"}
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _plain(cell) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


@dataclass(frozen=True)
class JobTimeline:
    """Show every time as +MM:SS since the job's start: a replay's log stamps are from the day it was
    recorded and its "seen" times from today, so clock times would mix two days."""

    # The job's start, in the clock of its log stamps (seconds since the epoch, as the engine reads them).
    started: float
    # How much of the job's time has gone by now (a replay: the recording's seconds replayed so far).
    elapsed: Callable[[], float]
    # The job's time of a log line (file, line number) when it is known exactly (a replay), else None.
    line_time: Callable[[str, int], float | None] = lambda file, line: None

    def stamp(self, first_seen: float) -> float:
        offset = first_seen - self.started
        # A stamp without a year is read in the current year: drop whole days of difference.
        offset %= 86400.0
        return offset - 86400.0 if offset > 43200.0 else offset


def describe(finding: Finding, is_root: bool, first: str) -> Text:
    """The full story of one finding: what to do first (what a user came for, in view however
    small the pane), then where, and the evidence (literal text)."""
    finding = finding.for_display()
    text = Text()
    if is_root:
        text.append("ROOT CAUSE  ", style="bold white on red")
    if finding.node:
        text.append(f"node {finding.node}: ", style="bold")
    text.append(finding.title, style="bold")
    if finding.remedy:
        text.append("\nwhat to do\n", style="bold green")
        text.append(finding.remedy.strip() + "\n")
    text.append(f"\n{finding.severity} · {finding.category} · {finding.role} · rule {finding.rule}", style="dim")
    if finding.confidence != "certain":
        text.append(f"\nconfidence: {finding.confidence} ({finding.confidence_note})", style="yellow")
    # A finding no log line made (a preflight check, the exit, a metric) comes from its source.
    where = f"at {finding.file}:{finding.line}" if finding.line else f"from {finding.origin}"
    if finding.rank is not None or finding.node:
        where += f" ({', '.join(p for p in (finding.node and f'node {finding.node}', finding.rank is not None and f'rank {finding.rank}') if p)})"
    when = f"written by {first[1:]} (its line has no time)" if first.startswith("~") else f"logged {first}"
    if first.lstrip("~")[:1] in ("+", "-"):
        when += ", counted from the job's start"
    text.append(f"\nfirst {where}, {when}")
    if finding.count > 1 or len(finding.ranks) > 1:
        text.append(f"; {finding.count}× on ranks {fmt.ranks(finding.ranks)}")
        if len(finding.nodes) > 1:
            text.append(f" of nodes {', '.join(finding.nodes)}")
    if finding.evidence:
        text.append("\n\nevidence\n", style="bold")
        for line in finding.evidence:
            text.append(f"  {line}\n", style="italic")
    return text


class FindingsTable(DataTable):
    """The findings' table. It says when its own width changed: its titles are cut to that width,
    and the table can get its width after its panel got its own (a busy machine lays it out a
    refresh later), when no resize of the panel follows."""

    class Resized(Message):
        """The table's size changed."""

    def on_resize(self) -> None:
        self.post_message(self.Resized())


class FindingsPanel(Container):
    """A table of findings above (or beside) the selected finding's detail."""

    DEFAULT_CSS = f"""
    FindingsPanel {{ layout: vertical; }}
    FindingsPanel > DataTable {{ height: auto; max-height: {MAX_TABLE_ROWS}; }}
    FindingsPanel > #finding-detail {{ height: 1fr; padding: 0 1; border-top: solid $primary-muted; }}
    """

    class Selected(Message):
        """The user chose a finding (cursor or click)."""

        def __init__(self, finding: Finding) -> None:
            super().__init__()
            self.finding = finding

    def __init__(self, *, clock: Callable[[], float] = time.time, timeline: JobTimeline | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self._clock = clock
        self.timeline = timeline
        # When this panel first showed each finding: its "first" time when the log line has none.
        self._seen: dict[str, float] = {}
        self.findings: list[Finding] = []
        self.root: Finding | None = None
        self._by_key: dict[str, Finding] = {}
        self._keys: list[str] = []
        self._shown: dict[str, tuple] = {}
        self._columns = COLUMNS
        self._widths: dict[str, int] = {}  # each shown column's width, as the table was built with it
        self._title_room: int | None = None  # the title column's width, when titles are cut to it
        self._detail_key: str | None = None  # the finding the detail shows

    def compose(self):
        yield FindingsTable(cursor_type="row", zebra_stripes=False, id="finding-table")
        with VerticalScroll(id="finding-detail"):
            yield Static(Text("no findings yet", style="dim"), id="finding-text")

    def on_mount(self) -> None:
        # The log worker's first batch can be handled before this panel's table is composed (a
        # loaded machine): what it brought is shown now.
        self._fit_columns()
        if self.findings:
            self.show(self.findings, self.root)

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def _composed(self) -> bool:
        return bool(self.query(DataTable))

    def fit(self, screen_width: int) -> None:
        """Fewer columns on a narrower screen, so the title shows."""
        columns = NARROW_COLUMNS if screen_width < WIDE else MEDIUM_COLUMNS if screen_width < FULL else COLUMNS
        if columns == self._columns:
            return
        self._columns = columns
        if self._composed():
            self._fit_columns()
            self.show(self.findings, self.root)

    def _fit_columns(self) -> None:
        self.table.show_header = self._columns != NARROW_COLUMNS

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit_text)  # once the table and the detail have their sizes

    def on_findings_table_resized(self) -> None:
        self._fit_text()

    def _fit_text(self) -> None:
        rows = self._rows_of(self.findings) if self.findings else []
        if rows and self._room(self._column_widths(rows), len(rows)) != self._title_room:
            self.show(self.findings, self.root)  # the titles are cut to another width
        else:
            self._show_detail()  # its paths are broken for another width

    def show(self, findings: list[Finding], root: Finding | None, selected: str | None = None) -> None:
        if not self._composed():
            self.findings, self.root = findings, root  # shown once the table is there (``on_mount``)
            return
        table = self.table
        selected = selected or self.selected_key()
        root_key = root.id if root else None
        if root_key is not None and root_key != (self.root.id if self.root else None):
            # A new root cause comes into view; until then the cursor stays where it was (a
            # preflight note shown before the job failed must not hide the failure).
            selected = root_key
        # The root cause may be the engine's reading of a finding (with only timeouts: "rank 7
        # stalled", the rank that never reached the collective): show that, as diagnose does.
        findings = [root if f.id == root_key else f for f in findings]
        now = self.timeline.elapsed() if self.timeline else self._clock()
        for finding in findings:
            if finding.id not in self._seen:
                self._seen[finding.id] = now if self.timeline else _written_by(finding, now)
        # Root cause first, then by severity, each in the order of the times the "first" column shows.
        self.findings = sorted(findings, key=lambda f: (f.id != root_key, SEVERITY_ORDER.get(f.severity, 3),
                                                        self._first_seconds(f), f.seq))
        self.root = root
        self._by_key = {f.id: f for f in self.findings}
        rows = self._rows_of(self.findings)
        widths = self._column_widths(rows)
        self._title_room = self._room(widths, len(rows))
        if self._title_room is not None:
            title = self._columns.index("title")
            rows = [(key, cells[:title] + (Text(fmt.fit_words(cells[title].plain, self._title_room)),) + cells[title + 1:])
                    for key, cells in rows]
            widths["title"] = self._content_width("title", [cells[title] for _, cells in rows])
        if [key for key, _ in rows] == self._keys and widths == self._widths:
            # The same findings in the same order, in columns as wide as before (counts grew):
            # change only the cells that differ.
            for key, cells in rows:
                for column, cell, old in zip(self._columns, cells, self._shown[key]):
                    if _plain(cell) != _plain(old):
                        table.update_cell(key, column, cell)
        else:
            # Every column is given its width here: the table's own widths come on its next idle,
            # and rows it draws before that stay cached at the header's width (titles cut to a
            # word) until some other change redraws them.
            table.clear(columns=True)
            for key, width in widths.items():
                table.add_column(LABELS[key], key=key, width=width)
            for key, cells in rows:
                table.add_row(*cells, key=key)
            self._widths = widths
        if selected in self._by_key and selected != self.selected_key():
            table.move_cursor(row=table.get_row_index(selected), animate=False)
        self._keys = [key for key, _ in rows]
        self._shown = dict(rows)
        self._show_detail()

    def _rows_of(self, findings: list[Finding]) -> list[tuple[str, tuple]]:
        root_key = self.root.id if self.root else None
        return [(f.id, self._cells(f, f.id == root_key)) for f in findings]

    def _column_widths(self, rows: list[tuple[str, tuple]]) -> dict[str, int]:
        return {key: self._content_width(key, [cells[i] for _, cells in rows]) for i, key in enumerate(self._columns)}

    def _content_width(self, key: str, cells: list) -> int:
        """A column's width: its fixed one, else its widest cell's or its header's."""
        header = [cell_len(LABELS[key])] if self.table.show_header else []
        return WIDTHS[key] or max(header + [cell_len(_plain(cell)) for cell in cells] or [1])

    def _room(self, widths: dict[str, int], count: int) -> int | None:
        """The width the title column has beside the others (``widths``, of ``count`` rows), so
        that a long title ends in "…" at a word instead of being cut by the panel's edge (or
        pushing the category past it); None when the table is not laid out yet."""
        table = self.table
        if not table.size.width:
            return None
        padding = 2 * table.cell_padding
        others = sum(width + padding for key, width in widths.items() if key != "title")
        shown = table.size.height if self._columns == NARROW_COLUMNS else MAX_TABLE_ROWS
        scrollbar = table.styles.scrollbar_size_vertical if count > shown - table.show_header else 0
        return max(table.size.width - scrollbar - others - padding, 8)

    def _first(self, finding: Finding) -> tuple[float | None, bool]:
        """When the finding first happened, in the column's clock (seconds since the epoch, or with
        a timeline since the job's start), and whether that is only when this panel saw it."""
        seen = self._seen.get(finding.id)
        if self.timeline is not None:
            if finding.file and (recorded := self.timeline.line_time(finding.file, finding.line)) is not None:
                return recorded, False
            if finding.first_seen is not None:
                return self.timeline.stamp(finding.first_seen), False
            return seen, True
        if finding.first_seen is not None:
            return finding.first_seen, False
        if finding.before is not None:
            return finding.before, True  # its line has no time; the next line of its log that has one
        return seen, True

    def _first_seconds(self, finding: Finding) -> float:
        return self._first(finding)[0] or 0.0

    def first_time(self, finding: Finding) -> str:
        """The log line's time, or "~" and a time it was written by: the next time its log gives,
        else when this panel first showed it or its file was last written, whichever came first
        (with a timeline: both as +MM:SS since the job's start)."""
        when, only_seen = self._first(finding)
        if when is None:
            return "—"
        text = fmt.since_start(when) if self.timeline is not None else fmt.clock(when)
        return "~" + text if only_seen else text

    def _cells(self, finding: Finding, is_root: bool) -> tuple:
        # Every cell is a Text: DataTable reads plain strings as markup, and these come from logs and rules.
        finding = finding.for_display()
        cells = {
            "mark": self._mark(finding, is_root),
            "sev": Text(SEVERITY_LABEL.get(finding.severity, finding.severity),
                        style=SEVERITY_STYLE.get(finding.severity, "")),
            "ranks": Text(_where_in_job(finding)),
            "count": Text(str(finding.count)),
            "first": Text(self.first_time(finding)),
            "title": Text(finding.title),
            "category": Text(finding.category),
        }
        return tuple(cells[column] for column in self._columns)

    def _mark(self, finding: Finding, is_root: bool) -> Text:
        """★ for the root cause; without the severity column, the severity as the log's gutter
        marks it (● error, ▲ warning, · info)."""
        if is_root:
            return Text("★", style="bold red")
        if "sev" in self._columns:
            return Text("")
        return Text(GUTTER_MARKS.get(finding.severity, ""), style=SEVERITY_STYLE.get(finding.severity, ""))

    def selected_key(self) -> str | None:
        table = self.table
        if not table.row_count:
            return None
        try:
            return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except CellDoesNotExist:
            return None

    def select(self, finding: Finding) -> None:
        key = finding.id
        if key in self._by_key:
            self.table.move_cursor(row=self.table.get_row_index(key), animate=False)
            self._show_detail()

    def selected(self) -> Finding | None:
        key = self.selected_key()
        return self._by_key.get(key) if key else None

    def _show_detail(self) -> None:
        finding = self.selected()
        detail = self.query_one("#finding-text", Static)
        if finding is None:
            detail.update(Text("no findings yet", style="dim"))
            self._detail_key = None
            return
        is_root = self.root is not None and finding.id == self.root.id
        detail.update(fmt.break_long_paths(describe(finding, is_root, self.first_time(finding)), self._detail_width()))
        if finding.id != self._detail_key:
            # Another finding opens at its top, "what to do" first; the same one redrawn (its
            # count grew) stays where the user scrolled it.
            self._detail_key = finding.id
            self.query_one("#finding-detail").scroll_home(animate=False, immediate=True)

    def _detail_width(self) -> int:
        """The detail's width for its text, its scrollbar's room kept (the text is taller than
        the pane on a small screen): 0 before the first layout."""
        scroll = self.query_one("#finding-detail")
        return max(scroll.content_region.width - scroll.styles.scrollbar_size_vertical, 0)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._show_detail()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        finding = self._by_key.get(event.row_key.value)
        if finding is not None:
            self._show_detail()
            self.post_message(self.Selected(finding))


def _where_in_job(finding: Finding) -> str:
    """The ranks column: ``0-2``, ``3``, ``gpu-07:3`` when one node of several holds them all; the
    rank a finding names first."""
    if finding.rank is not None and finding.rank not in finding.ranks:
        # The rank the finding names is not among those that printed it ("Rank 1 stalled; the
        # others timed out": the timeouts came from rank 0).
        ranks = str(finding.rank)
    else:
        ranks = fmt.ranks(finding.ranks) if finding.ranks else ("—" if finding.rank is None else str(finding.rank))
    if finding.node and len(finding.nodes) < 2:
        return f"{finding.node}:{ranks}" if ranks != "—" else finding.node
    return ranks


def _written_by(finding: Finding, now: float) -> float:
    """When a finding without a time was written by: ``now`` (when it was shown), or its file's
    last write when that was earlier (an old, finished log opened today)."""
    try:
        return min(now, os.stat(finding.file).st_mtime) if finding.file else now
    except OSError:
        return now
