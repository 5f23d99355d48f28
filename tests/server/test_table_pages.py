"""``/api/tables`` pages without a server: the cursor, the walk, and the directory's freshness.

A walk of pages with random limits, while tables are created and dropped between pages, lists
every table that existed throughout exactly once, in name order, and never one twice."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat import InvalidArgument, TableName
from segcat.server import table_pages
from segcat.server.table_directory import NAMES_TTL_S, TableDirectory

IDENT = st.text(alphabet="ab-_0Z", min_size=1, max_size=4).filter(lambda s: s[0] != "-")
NAMES = st.builds(TableName, IDENT, IDENT)


@settings(max_examples=200, deadline=None)
@given(
    start=st.sets(NAMES, max_size=40),
    steps=st.lists(
        st.tuples(
            st.integers(1, 7),
            st.sets(NAMES, max_size=4),  # created before the next page
            st.sets(st.integers(0, 1_000), max_size=3),  # indexes of tables dropped before it
        ),
        min_size=1,
        max_size=30,
    ),
)
def test_a_walk_lists_each_lasting_table_once_in_order(
    start: set[TableName], steps: list[tuple[int, set[TableName], set[int]]]
) -> None:
    current = set(start)
    lasting = set(start)
    listed: list[TableName] = []
    cursor: str | None = None
    for limit, created, dropped_at in steps * 50:  # the steps repeat until the walk ends
        names = sorted(current)
        after = None if cursor is None else table_pages.decode_cursor(cursor)
        page, last = table_pages.page_of(names, after, limit)
        assert len(page) <= limit
        listed.extend(page)
        if last is None:
            break
        cursor = table_pages.encode_cursor(last)
        ordered = sorted(current)
        gone = {ordered[i % len(ordered)] for i in dropped_at} if ordered else set()
        current = (current - gone) | created
        lasting -= gone
    else:
        pytest.fail("the walk never ended")
    assert listed == sorted(listed) and len(listed) == len(set(listed)), "a table repeated or out of order"
    assert lasting <= set(listed), f"skipped: {sorted(lasting - set(listed))}"


@given(NAMES)
def test_a_cursor_round_trips_and_is_opaque(name: TableName) -> None:
    text = table_pages.encode_cursor(name)
    assert table_pages.decode_cursor(text) == name
    assert name.qualified not in text


@pytest.mark.parametrize(
    "bad",
    ["", "x", "t1.", "t1.!!!!", "t1." + "QQ", "t1.bm9kb3Q", "t1.bnMudA==", "t2.bnMudA", "t1." + "A" * 500],
)
def test_a_bad_cursor_is_an_invalid_argument_naming_the_field(bad: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^cursor: "):
        table_pages.decode_cursor(bad)


class _Catalog:
    def __init__(self, names: list[TableName]) -> None:
        self.names = names
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()

    def list_tables(self) -> list[TableName]:
        self.calls += 1
        self.gate.wait(10)
        return list(self.names)


def test_the_directory_asks_kafka_once_per_ttl_whatever_the_requests() -> None:
    now = [100.0]
    catalog = _Catalog([TableName("b", "t"), TableName("a", "t")])
    directory = TableDirectory(catalog, clock=lambda: now[0])  # type: ignore[arg-type]
    assert directory.names() == [TableName("a", "t"), TableName("b", "t")]
    for _ in range(100):
        directory.names()
    assert catalog.calls == 1
    catalog.names.append(TableName("c", "t"))
    now[0] += NAMES_TTL_S / 2
    assert TableName("c", "t") not in directory.names()
    directory.add(TableName("a", "new"))  # announced: listed before the next refresh
    assert directory.names()[0] == TableName("a", "new")
    now[0] += NAMES_TTL_S
    assert TableName("c", "t") in directory.names() and catalog.calls == 2
    directory.forget(TableName("c", "t"))
    assert TableName("c", "t") not in directory.names()


def test_concurrent_requests_share_one_refresh() -> None:
    now = [0.0]
    catalog = _Catalog([TableName("a", "t")])
    directory = TableDirectory(catalog, clock=lambda: now[0])  # type: ignore[arg-type]
    catalog.gate.clear()
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(directory.names())) for _ in range(8)]
    for thread in threads:
        thread.start()
    while catalog.calls == 0:
        threading.Event().wait(0.01)
    catalog.gate.set()
    for thread in threads:
        thread.join(10)
    assert catalog.calls == 1 and len(results) == 8
