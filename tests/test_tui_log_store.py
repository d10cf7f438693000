"""The log view's storage and filters (no screen needed)."""

from __future__ import annotations

import time

import pytest

from monitor.model import LogLine
from monitor.tui.log_store import (
    LEVEL_ERROR,
    LEVEL_INFO,
    LEVEL_WARNING,
    FilterError,
    LineFilter,
    LogStore,
    line_level,
)


def filled(n: int = 1000, ranks: int = 4) -> LogStore:
    store = LogStore()
    for i in range(n):
        rank = i % ranks
        text = f"[rank{rank}]: step {i // ranks} loss {1 + (i % 7) / 10:.2f}"
        if i == 500:
            text = "[rank0]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
        if i == 501:
            text = "[rank1]: UserWarning: grad strides do not match"
        store.append(LogLine(f"rank{rank}.log", i // ranks + 1, text, rank))
    return store


def test_text_and_location_round_trip_including_unicode():
    store = LogStore()
    texts = ["plain", "émoji 🏖️ and 中文", "", "tab\there", "x" * 70_000]
    for i, text in enumerate(texts):
        store.append(LogLine("a.log", i + 1, text, None))
    assert [store.text(i) for i in range(len(texts))] == texts
    assert store.find("a.log", 2) == 1
    assert store.rank(1) is None and store.ranks_seen == set()


def test_unclean_text_is_cleaned_before_it_is_stored():
    store = LogStore()
    store.append(LogLine("a.log", 1, "\x1b[31mred\x1b[0m \x1b]0;title\x07ok\x00", 3))
    assert store.text(0) == "red ok"
    assert store.ranks_seen == {3}


def test_find_by_file_and_line_after_truncation_restart():
    store = filled(40)
    assert store.find("rank2.log", 3) == 10
    assert store.find("rank2.log", 99) is None
    assert store.find("missing.log", 1) is None
    # the file was truncated and written again from line 1: the newest copy is found
    store.append(LogLine("rank2.log", 1, "again", 2))
    assert store.find("rank2.log", 1) == 40


@pytest.mark.parametrize("text,level", [
    ("[rank0]: RuntimeError: boom", LEVEL_ERROR),
    ("Traceback (most recent call last):", LEVEL_ERROR),
    ("[E1121 10:00:00 ProcessGroupNCCL.cpp:1] timeout", LEVEL_ERROR),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", LEVEL_ERROR),
    ("W1121 warning: something", LEVEL_WARNING),
    ("UserWarning: deprecated", LEVEL_WARNING),
    ("[W socket.cpp:1] the client socket has timed out", LEVEL_WARNING),
    ("step 3 loss 1.0 (0 errors so far)", LEVEL_INFO),
])
def test_levels(text, level):
    assert line_level(text) == level


def test_filters_by_rank_level_and_regex():
    store = filled()
    assert len(store.select(LineFilter(ranks=frozenset({1, 3})))) == 500
    assert list(store.select(LineFilter(min_level=LEVEL_ERROR))) == [500]
    assert list(store.select(LineFilter(min_level=LEVEL_WARNING))) == [500, 501]
    # Lines a finding raised (by index): at their finding's level, the other filters still applying.
    raised = {7: LEVEL_ERROR, 9: LEVEL_WARNING}
    assert list(store.select(LineFilter(min_level=LEVEL_ERROR), raised=raised)) == [7, 500]
    assert list(store.select(LineFilter(min_level=LEVEL_WARNING), raised=raised)) == [7, 9, 500, 501]
    assert list(store.select(LineFilter(min_level=LEVEL_ERROR, ranks=frozenset({store.rank(500)})), raised=raised)) == [500]
    # smart case: lower case pattern ignores case
    assert list(store.select(LineFilter(pattern="out of MEMORY"))) == []
    assert list(store.select(LineFilter(pattern="out of memory"))) == [500]
    # a regex anchored at the line start matches each line once
    assert len(store.select(LineFilter(pattern=r"^\[rank2\]"))) == 250
    assert list(store.select(LineFilter(ranks=frozenset({0}), pattern="memory|warning"))) == [500]
    # only lines from ``start`` on (what the view uses for lines arriving while filtered)
    assert list(store.select(LineFilter(pattern="step 249 "), start=997)) == [997, 998, 999]


def test_non_ascii_regex_is_searched_line_by_line():
    store = LogStore()
    for i, text in enumerate(["naïve", "naive", "NAÏVE", "🏖️ beach"]):
        store.append(LogLine("a.log", i + 1, text, None))
    assert list(store.select(LineFilter(pattern="ï"))) == [0, 2]
    assert list(store.select(LineFilter(pattern="🏖"))) == [3]


def test_bad_and_catastrophic_regexes_fail_cleanly():
    store = LogStore()
    store.append(LogLine("a.log", 1, "a" * 60 + "b", None))  # 2**60 ways to fail: never finishes
    with pytest.raises(FilterError, match="bad regex"):
        store.select(LineFilter(pattern="(unclosed"))
    started = time.monotonic()
    with pytest.raises(FilterError, match="too slow"):
        store.select(LineFilter(pattern="(a|aa)+c"))
    assert time.monotonic() - started < 10  # stopped after the 1 s budget (slack for a loaded CI)


def test_storage_is_compact():
    store = filled(100_000)
    text_bytes = sum(len(store.text(i)) + 1 for i in range(0, 100_000))
    assert len(store._data) == text_bytes
    per_line_overhead = (
        store._starts.itemsize + store._ranks.itemsize + store._files.itemsize + store._numbers.itemsize + 1
        + store._by_file[0].itemsize
    )
    assert per_line_overhead <= 32


def test_only_the_newest_lines_are_kept_and_indices_stay_global():
    store = LogStore(max_lines=1000, max_bytes=1 << 20)
    for i in range(5000):
        store.append(LogLine(f"rank{i % 4}.log", i // 4 + 1, f"[rank{i % 4}]: line {i}" + (" Error" if i % 100 == 0 else ""), i % 4))
    assert len(store) == 5000
    kept = len(store) - store.first
    assert 0 < store.first and kept <= 1000 and len(store._starts) == kept
    assert store.text(store.first + 1) == f"[rank{(store.first + 1) % 4}]: line {store.first + 1}"
    assert store.text(4999) == "[rank3]: line 4999"
    assert store.text(0) == "" and store.rank(0) is None and store.level(0) == LEVEL_INFO
    assert store.find("rank1.log", 1) is None  # line 1 of rank1.log was global line 1: dropped
    assert store.find("rank3.log", 1250) == 4999
    errors = store.select(LineFilter(min_level=LEVEL_ERROR))
    assert list(errors) == [i for i in range(store.first, 5000) if i % 100 == 0]
    assert list(store.select(LineFilter(pattern=r"line 49\d\d\b"))) == list(range(max(4900, store.first), 5000))
    assert list(store.select(LineFilter(ranks=frozenset({2})), start=4990)) == [4990, 4994, 4998]


def test_a_few_huge_lines_are_dropped_by_their_bytes():
    store = LogStore(max_lines=1000, max_bytes=1 << 20)
    for i in range(20):
        store.append(LogLine("a.log", i + 1, "x" * 300_000, None))
    assert len(store._data) <= (1 << 20) + 300_001 and store.text(19) == "x" * 300_000
    assert store.first > 0


def test_lines_the_screen_skipped_count_but_push_out_everything_kept():
    store = filled(100)
    store.skip(5000)
    assert len(store) == 5100 and store.first == 5100 and store.text(50) == ""
    store.append(LogLine("rank0.log", 9999, "after the gap", 0))
    assert store.text(5100) == "after the gap" and store.find("rank0.log", 9999) == 5100
