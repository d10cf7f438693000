"""The merged per-rank log: a Line API view that draws only the visible lines of a LogStore.

The store keeps the newest lines only (``LogStore.first`` is the oldest kept): rows are the kept
lines, and when older ones are dropped a paused view moves up with its lines so that what is on
screen stays."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import replace

import regex
from rich.cells import cell_len, get_character_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from monitor.tui.log_store import (
    FILTER_BUDGET_S,
    LEVEL_ERROR,
    LEVEL_INFO,
    LEVEL_WARNING,
    FilterError,
    LineFilter,
    LogStore,
    compile_pattern,
)

# Badge colours per rank (cycled): distinct on dark and light backgrounds, none of them the red
# that marks errors.
RANK_COLOURS = (
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#ff9da7",
    "#6b8e23", "#8c6bb1", "#17becf", "#bcbd22", "#1f77b4", "#e377c2", "#7f7f7f", "#2ca02c",
)
# Widest a line is drawn (cells); the rest is reachable by scrolling right only up to here.
MAX_DRAWN = 4000
GUTTER_MARKS = {"root": "★", "error": "●", "warning": "▲", "info": "·"}
_MARK_LEVELS = {"root": LEVEL_ERROR, "error": LEVEL_ERROR, "warning": LEVEL_WARNING}
# Widest a node's name is drawn in its badge (cells).
MAX_NODE_BADGE = 12


# Made once: a Style made for every row drawn was a visible share of the view's cost.
_RANK_STYLES = tuple(Style(color="#000000", bgcolor=colour, bold=True) for colour in RANK_COLOURS)


def rank_style(rank: int) -> Style:
    return _RANK_STYLES[rank % len(_RANK_STYLES)]


class LogView(ScrollView, can_focus=True):
    """Shows the lines of ``store`` that pass ``line_filter``, following the end unless paused."""

    COMPONENT_CLASSES = {
        "logview--error", "logview--warning", "logview--match", "logview--cursor", "logview--gutter",
    }
    DEFAULT_CSS = """
    LogView { background: $surface; }
    LogView > .logview--error { color: $text-error; }
    LogView > .logview--warning { color: $text-warning; }
    LogView > .logview--match { background: $warning 40%; text-style: bold; }
    LogView > .logview--cursor { background: $accent 30%; }
    LogView > .logview--gutter { color: $error; }
    """
    BINDINGS = [
        Binding("end", "scroll_end", "Follow", show=False),
        # less's keys, for the hands that know them (the help says which keys differ from less).
        Binding("G", "scroll_end", "Follow", show=False),
        Binding("g", "scroll_home", "First line", show=False),
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
        Binding("ctrl+f", "page_down", "Page down", show=False),
        Binding("ctrl+b", "page_up", "Page up", show=False),
    ]

    follow: reactive[bool] = reactive(True)

    class StatusChanged(Message):
        """Follow state, counts or filter changed: the status line should be redrawn."""

    def __init__(self, store: LogStore, **kwargs) -> None:
        super().__init__(**kwargs)
        self.store = store
        self.line_filter = LineFilter()
        self._pattern: regex.Pattern[str] | None = None
        # What `find` looks for: highlighted where shown, jumped to, no line hidden.
        self.find_text = ""
        self._find: regex.Pattern[str] | None = None
        self._rows: array | None = None  # store indices shown, or None for all lines
        self.cursor_index: int | None = None
        self.marks: dict[int, str] = {}
        self._marked_levels: dict[int, int] = {}  # the level each mark stands for (``set_marks``)
        self.unseen = 0  # lines that arrived while paused
        # The row last put in the middle (a jump) and the scroll that did it: kept there on resize.
        self._centred: tuple[int, float] | None = None
        self._cache: LRUCache[tuple, Strip] = LRUCache(2048)
        self._styles: dict[str, Style] = {}
        self._first_kept = 0  # store.first when rows were last counted
        # Long lines wrapped at the view's width (the gutter and badges kept on the first row,
        # the rest indented under the text): then ``_wrapped[r]`` is the first screen row of row
        # ``r`` (one more entry: the total), kept for ``_wrap_width``.
        self.wrap = False
        self._wrapped: array | None = None
        self._wrap_width = 0

    # ----- data in
    @property
    def row_count(self) -> int:
        return len(self.store) - self.store.first if self._rows is None else len(self._rows)

    def _index_at(self, row: int) -> int:
        return self.store.first + row if self._rows is None else self._rows[row]

    def lines_added(self, first: int) -> None:
        """Lines ``first``.. were appended to the store: show those that pass the filter."""
        self._drop_forgotten()
        if self._rows is not None:
            try:
                self._rows.extend(self.store.select(self.line_filter, first, self._marked_levels))
            except FilterError:
                pass  # counted as no match; the filter bar already says the regex is slow
        added = len(self.store) - max(first, self.store.first)
        self._extend_wrapped()
        self._update_size()
        if self.follow:
            self._scroll_end()
        else:
            self.unseen += added
        self.post_message(self.StatusChanged())

    def _drop_forgotten(self) -> None:
        """The store dropped its oldest lines: drop their rows, and keep a paused view on its lines."""
        first = self.store.first
        if first == self._first_kept:
            return
        if self._rows is None:
            gone = first - self._first_kept
        else:
            gone = bisect_left(self._rows, first)
            del self._rows[:gone]
        self._first_kept = first
        if self.cursor_index is not None and self.cursor_index < first:
            self.cursor_index = None
        if self._wrapped is not None and gone:
            gone_rows = self._wrapped[gone]
            self._wrapped = array("L", (r - gone_rows for r in self._wrapped[gone:]))
            gone = gone_rows
        if not self.follow and gone:
            self.scroll_to(y=max(0, self.scroll_offset.y - gone), animate=False)

    def set_filter(self, line_filter: LineFilter) -> None:
        """Apply a filter to all lines. Raises FilterError (bad or too slow regex); keeps the old one then."""
        pattern = compile_pattern(line_filter.pattern) if line_filter.pattern else None
        rows = self.store.select(line_filter, raised=self._marked_levels) if line_filter.active else None
        self.line_filter, self._pattern, self._rows = line_filter, pattern, rows
        self._rows_changed()
        if self.cursor_index is not None and self.row_of(self.cursor_index) is not None:
            self._scroll_to_row(self.row_of(self.cursor_index))
        elif self.follow:
            self._scroll_end()
        self.refresh()
        self.post_message(self.StatusChanged())

    def _rows_changed(self) -> None:
        """Which lines are shown changed: drawn rows, wrapping and the scroll size go with them."""
        self._cache.clear()
        self._wrapped = None
        self._update_size()

    def replace_store(self, store: LogStore, cursor: int) -> None:
        """Show ``store`` instead (the same lines with earlier ones in front), the cursor on ``cursor``."""
        self.store = store
        self._first_kept = store.first
        self.cursor_index = None
        self.set_filter(self.line_filter)
        self.jump_to(cursor)

    def set_find(self, text: str) -> None:
        """Highlight ``text`` (a regex, smart case) in every shown line; "" clears (and brings back
        the lines' starts, scrolled away to show a match). Raises FilterError."""
        self._find = compile_pattern(text) if text else None
        self.find_text = text
        if not text:
            self.show_line_starts()
        self._cache.clear()
        self.refresh()
        self.post_message(self.StatusChanged())

    def find_next(self, direction: int = 1) -> tuple[int, int] | None:
        """Put the cursor on the next (or previous) shown line holding the find's text, from the
        cursor, wrapping around; (position among the matches 1.., how many), or None for none.
        Raises FilterError."""
        if not self.find_text:
            return None
        found = self.store.select(replace(self.line_filter, pattern=self.find_text), raised=self._marked_levels)
        if not found:
            return None
        here = self.cursor_index if self.cursor_index is not None else (self._index_at(self.row_count - 1) if self.row_count else 0)
        if direction > 0:
            pos = bisect_right(found, here)
            pos = 0 if pos == len(found) else pos
        else:
            pos = bisect_left(found, here) - 1
            pos = len(found) - 1 if pos < 0 else pos
        self.jump_to(found[pos])
        self._reveal_match(found[pos])
        return pos + 1, len(found)

    def _reveal_match(self, index: int) -> None:
        """Scroll sideways so the find's match in line ``index`` is in view (lines are not wrapped)."""
        match = self._find.search(self.store.text(index)[:MAX_DRAWN].expandtabs(4)) if self._find else None
        if match is None or self.wrap:
            return
        # The text's part of the row: the gutter and badges stay pinned at the left.
        width = self.scrollable_content_region.width - self._badge_width() - 1
        if match.end() <= width:
            self.show_line_starts()
        else:
            self.scroll_to(x=max(0, match.start() - width // 3), animate=False)

    def show_line_starts(self) -> None:
        """Scroll back to the start of the lines (Esc, Home, End, a find cleared)."""
        self.scroll_to(x=0, animate=False)

    def set_marks(self, marks: dict[int, str]) -> None:
        if marks == self.marks:
            return  # counts changed, not which lines are marked: nothing to redraw
        self.marks = marks  # part of each cached line's key: lines whose mark changed redraw
        # A line a finding marks shows under "errors only" (or warnings) at the finding's level,
        # whatever its own words say (TensorFlow's "(0) INVALID_ARGUMENT: ..." names no level).
        self._marked_levels = {index: _MARK_LEVELS[mark] for index, mark in marks.items() if mark in _MARK_LEVELS}
        if self.line_filter.min_level > LEVEL_INFO:
            self._reselect()
        else:
            self.refresh()

    def _reselect(self) -> None:
        """The filter's rows again (which lines pass it changed, not the filter), the view kept on
        the line at its top: a finding placed while the user reads elsewhere does not move them."""
        top = self._index_at(self._row_at_screen(int(self.scroll_offset.y))[0]) if self.row_count else None
        try:
            self._rows = self.store.select(self.line_filter, raised=self._marked_levels)
        except FilterError:
            return  # the filter bar already says the regex is slow; the rows stay as they were
        self._rows_changed()
        if self.follow:
            self._scroll_end()
        elif top is not None:
            row = min(bisect_left(self._rows, top), max(0, len(self._rows) - 1))
            self.scroll_to(y=self._screen_row(row) if self._rows else 0, animate=False)
        self.refresh()
        self.post_message(self.StatusChanged())

    def line_to_copy(self) -> tuple[int, bool] | None:
        """What the user sees to copy: (the cursor's line, True) when it is on screen, else (the
        last line in view, False); None when no line is shown. Following, the cursor may lie far
        above what is shown, and a copy must never be a line the user cannot see."""
        if not self.row_count:
            return None
        top = int(self.scroll_offset.y)
        first_row = self._row_at_screen(top)[0]
        last_row = min(self._row_at_screen(top + max(1, self.scrollable_content_region.height) - 1)[0],
                       self.row_count - 1)
        cursor_row = self.row_of(self.cursor_index) if self.cursor_index is not None else None
        if cursor_row is not None and first_row <= cursor_row <= last_row:
            return self.cursor_index, True
        return self._index_at(last_row), False

    def row_of(self, index: int) -> int | None:
        if self._rows is None:
            return index - self.store.first if self.store.first <= index < len(self.store) else None
        rows = self._rows
        pos = bisect_left(rows, index)
        return pos if pos < len(rows) and rows[pos] == index else None

    def jump_to(self, index: int) -> None:
        """Put the cursor on store line ``index`` (clearing a filter that hides it) and pause following."""
        if self.row_of(index) is None:
            self.set_filter(LineFilter())
        self.follow = False
        self.cursor_index = index
        self._cache.clear()
        self._scroll_to_row(self.row_of(index) or 0)
        self.refresh()

    # ----- following
    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.unseen = 0
            self._scroll_end()
        self.post_message(self.StatusChanged())

    def action_scroll_end(self) -> None:
        self.show_line_starts()
        self.follow = True

    def action_scroll_up(self) -> None:
        self.follow = False
        super().action_scroll_up()

    def action_page_up(self) -> None:
        self.follow = False
        super().action_page_up()

    def action_scroll_home(self) -> None:
        self.follow = False
        self.scroll_home(animate=False)  # the first line's start, also when scrolled sideways

    def _on_mouse_scroll_up(self, event) -> None:
        self.follow = False
        super()._on_mouse_scroll_up(event)

    def on_click(self, event) -> None:
        """Clicking a line puts the cursor on it (and stops following, so it stays in view)."""
        row = self._row_at_screen(int(self.scroll_offset.y) + event.y)[0]
        if 0 <= row < self.row_count:
            self.follow = False
            self.cursor_index = self._index_at(row)
            self._cache.clear()
            self.refresh()

    def _scroll_to_row(self, row: int) -> None:
        def scroll() -> None:
            height = self.scrollable_content_region.height or 1
            y = max(0, self._screen_row(row) - height // 2)
            self.scroll_to(y=y, animate=False)
            self._centred = (row, min(y, self.max_scroll_y))

        scroll()
        # Again once a pending layout (new size, scrollbar shown) is done: it may have clamped the first.
        self.call_after_refresh(scroll)

    def _scroll_end(self) -> None:
        self.scroll_to(y=self.max_scroll_y, animate=False)
        self.call_after_refresh(lambda: self.follow and self.scroll_to(y=self.max_scroll_y, animate=False))

    # ----- wrapping
    def toggle_wrap(self) -> None:
        """Wrap long lines at the view's width, or show them whole on one row (scroll sideways)."""
        self.wrap = not self.wrap
        self._wrapped = None
        self._cache.clear()
        if self.wrap:
            self.scroll_to(x=0, animate=False)
        self._update_size()
        if self.cursor_index is not None and self.row_of(self.cursor_index) is not None:
            self._scroll_to_row(self.row_of(self.cursor_index))
        elif self.follow:
            self._scroll_end()
        self.refresh()
        self.post_message(self.StatusChanged())

    def on_resize(self, event) -> None:
        if self.wrap and self._text_width() != self._wrap_width:
            self._wrapped = None
            self._update_size()
        if self.follow:
            # A new height moves the end: a view that says "following" shows the newest lines.
            self._scroll_end()
        else:
            self._keep_centred()

    def watch_show_horizontal_scrollbar(self, shown: bool) -> None:
        # A horizontal scrollbar takes a row from the view (no resize is sent for it).
        if not self.follow:
            self._keep_centred()

    def _keep_centred(self) -> None:
        """A line put in the middle by a jump, which the user has not scrolled away from, stays
        in the middle when the view's height changes (a later layout showing a scrollbar)."""
        if self._centred is not None and self.scroll_y == self._centred[1]:
            self.call_after_refresh(self._scroll_to_row, self._centred[0])

    def _text_width(self) -> int:
        return max(8, self.scrollable_content_region.width - self._badge_width() - 1)

    def _rows_of(self, index: int, width: int) -> int:
        return len(wrap_starts(self.store.text(index)[:MAX_DRAWN].expandtabs(4), width))

    def _ensure_wrapped(self) -> array:
        """The wrap map for the current rows and width (built when missing)."""
        width = self._text_width()
        if self._wrapped is None or width != self._wrap_width:
            self._wrap_width, self._wrapped = width, array("L", [0])
            self._extend_wrapped()
        return self._wrapped

    def _extend_wrapped(self) -> None:
        """Rows that arrived since the map was made get their screen rows."""
        if self._wrapped is None:
            return
        total, width = self._wrapped[-1], self._wrap_width
        for row in range(len(self._wrapped) - 1, self.row_count):
            total += self._rows_of(self._index_at(row), width)
            self._wrapped.append(total)

    def _screen_row(self, row: int) -> int:
        """The first screen row of (filtered) row ``row``."""
        return self._ensure_wrapped()[row] if self.wrap else row

    def _row_at_screen(self, screen_row: int) -> tuple[int, int]:
        """(filtered row, which of its wrapped pieces) shown at ``screen_row``."""
        if not self.wrap:
            return screen_row, 0
        wrapped = self._ensure_wrapped()
        row = bisect_right(wrapped, screen_row) - 1
        return row, screen_row - wrapped[row]

    def _update_size(self) -> None:
        if self.wrap:
            size = Size(self.scrollable_content_region.width, self._ensure_wrapped()[-1])
        else:
            size = Size(min(self.store.longest, MAX_DRAWN) + self._badge_width() + 1, self.row_count)
        old = self.virtual_size
        if size == old:
            return
        if size.width == old.width and size.height > old.height and self.show_vertical_scrollbar:
            # Only taller, and the scrollbar is already there: nothing else on screen moves, so
            # skip the whole-screen layout pass that setting virtual_size starts (most of the
            # app's CPU while following a busy job); update the scrollbars and redraw this view.
            self.set_reactive(LogView.virtual_size, size)
            self._scroll_update(size)
            self.refresh()
        else:
            self.virtual_size = size

    # ----- drawing
    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()
        self._styles.clear()

    def _style(self, name: str) -> Style:
        """The widget's base style ("") or a component's, computed once per theme (it is slow)."""
        style = self._styles.get(name)
        if style is None:
            # The cursor's background blends with the widget's (not partial); the others only add colour.
            style = self.rich_style if not name else self.get_component_rich_style(name, partial=name != "logview--cursor")
            self._styles[name] = style
        return style

    def _badge_width(self) -> int:
        """The node badge's cells (a job of several nodes) and the rank badge's."""
        nodes = self.store.nodes_seen
        node_width = min(MAX_NODE_BADGE, max(map(len, nodes))) + 1 if nodes else 0
        return node_width + (len(str(max(self.store.ranks_seen))) + 2 if self.store.ranks_seen else 0)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        row, piece = self._row_at_screen(scroll_y + y)
        width = self.scrollable_content_region.width
        if row >= self.row_count:
            return Strip.blank(width, self._style(""))
        index = self._index_at(row)
        key = (index, index == self.cursor_index, self._badge_width(), self.marks.get(index))
        if self.wrap:
            strip = self._cache.get(key)
            if strip is None:
                badges, text_segments = self._row_parts(index)
                strip = self._cache[key] = Strip(badges + text_segments)
            prefix, text_width = self._badge_width() + 1, self._wrap_width
            text = self.store.text(index)[:MAX_DRAWN].expandtabs(4)
            starts = wrap_starts(text, text_width)
            start = prefix + starts[piece] if piece < len(starts) else prefix + cell_len(text)
            end = prefix + starts[piece + 1] if piece + 1 < len(starts) else start + text_width
            if piece == 0:
                return strip.crop(0, end).crop_extend(0, width, self._style(""))
            indent = Strip.blank(prefix, self._style(""))
            return Strip.join([indent, strip.crop(start, end)]).crop_extend(0, width, self._style(""))
        shown_key = (*key, scroll_x, width)
        strip = self._cache.get(shown_key)
        if strip is None:
            strip = self._cache[shown_key] = self._shown_row(index, scroll_x, width)
        return strip

    def _shown_row(self, index: int, scroll_x: int, width: int) -> Strip:
        """Line ``index`` as its row shows it, ``width`` cells, scrolled ``scroll_x`` cells
        sideways: only the text scrolls, the gutter and badges stay pinned (as lnav's left
        columns). Made as one Strip from the segments: a view following a busy log draws every
        row anew each time it scrolls, and the Strips made by cropping and joining (each with
        its seven caches) were most of its cost (benchmarks/README.md, `watch` in a real terminal)."""
        badges, text = self._row_parts(index)
        prefix = self._badge_width() + 1
        if self.store.nodes_seen:  # a node's name may hold wide characters
            badges = Segment.adjust_line_length(badges, prefix, self._style(""))
        room = max(0, width - prefix)
        if scroll_x:
            parts = list(Segment.divide(text, [scroll_x, scroll_x + room]))
            text = parts[1] if len(parts) > 1 else []
        text = Segment.adjust_line_length(text, room, self._style(""))
        return Strip(badges + text, prefix + room)

    def _row_parts(self, index: int) -> tuple[list[Segment], list[Segment]]:
        """Line ``index``'s gutter and badges (``_badge_width() + 1`` cells), and its text."""
        store = self.store
        base = self._style("")
        if index == self.cursor_index:
            base = base + self._style("logview--cursor")
        level = store.level(index)
        text_style = base
        if level == LEVEL_ERROR:
            text_style = base + self._style("logview--error")
        elif level == LEVEL_WARNING:
            text_style = base + self._style("logview--warning")
        mark = self.marks.get(index)
        gutter = GUTTER_MARKS.get(mark, "·") if mark else " "
        segments = [Segment(gutter, base + self._style("logview--gutter"))]
        badge_width = self._badge_width()
        if store.nodes_seen:
            node_width = min(MAX_NODE_BADGE, max(map(len, store.nodes_seen))) + 1
            node = store.node(index)
            node_style = base if node is None else Style(color=RANK_COLOURS[store.nodes_seen.index(node) % len(RANK_COLOURS)], bold=True)
            segments.append(Segment((node or "")[:node_width - 1].ljust(node_width), base + node_style))
            badge_width -= node_width
        if badge_width:
            rank = store.rank(index)
            if rank is None:
                segments.append(Segment(" " * badge_width, base))
            else:
                segments.append(Segment(f"r{rank}".ljust(badge_width - 1), rank_style(rank)))
                segments.append(Segment(" ", base))
        text = store.text(index)[:MAX_DRAWN].expandtabs(4)
        return segments, self._text_segments(text, text_style)

    def _text_segments(self, text: str, style: Style) -> list[Segment]:
        """The text as literal segments (never markup), with the filter's and the find's matches
        highlighted."""
        patterns = [p for p in (self._pattern, self._find) if p is not None]
        if not patterns or not text:
            return [Segment(text, style)]
        spans = []
        try:
            for pattern in patterns:
                spans += [m.span() for m in pattern.finditer(text, timeout=FILTER_BUDGET_S) if m.end() > m.start()]
        except TimeoutError:
            pass
        match_style = style + self._style("logview--match")
        segments, pos = [], 0
        for start, end in sorted(spans):
            start = max(start, pos)
            if end <= start:
                continue
            if start > pos:
                segments.append(Segment(text[pos:start], style))
            segments.append(Segment(text[start:end], match_style))
            pos = end
        if pos < len(text):
            segments.append(Segment(text[pos:], style))
        return segments


def wrap_starts(text: str, width: int) -> Sequence[int]:
    """The cells where each wrapped piece of ``text`` starts, no wide character (CJK) cut in two:
    a piece ends before a character that would not fit. Walked character by character only for
    a line with wide characters that does not fit (the map of every row is built from these)."""
    if len(text) * 2 <= width:
        return range(1)
    if text.isascii() or (cells := cell_len(text)) == len(text):
        return range(0, max(1, len(text)), width)
    if cells <= width:
        return range(1)
    starts, cells, used = [0], 0, 0
    for character in text:
        size = get_character_cell_size(character)
        if used + size > width and used:
            starts.append(cells)
            used = 0
        cells += size
        used += size
    return starts
