"""Where the Spark writer puts a partition's files: Hive-style names every filesystem takes.

A directory name longer than 255 bytes (a long value, or a short one of many escaped bytes)
failed the write job in an executor; such a name is now a readable head and a digest.
"""

from __future__ import annotations

import datetime as dt

from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.producers.segment_files import (
    MAX_NAME_BYTES,
    NULL_PARTITION,
    escape,
    partition_directory,
    value_text,
)

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=400)
"""Any value Spark can hold in a string (no lone surrogates), short and long, ASCII or not."""


def test_ordinary_values_keep_their_hive_names() -> None:
    assert partition_directory(("day",), (dt.date(2024, 1, 1),)) == "data/day=2024-01-01"
    assert partition_directory(("a", "b"), (1, "x y")) == "data/a=1/b=x%20y"
    assert partition_directory(("p",), (None,)) == f"data/p={NULL_PARTITION}"
    assert partition_directory(("p",), ("x" * 251,)) == f"data/p={'x' * 251}"  # 253 bytes: kept


@settings(max_examples=300, deadline=None)
@given(column=st.text(min_size=1, max_size=300), first=_TEXT, second=_TEXT)
def test_every_name_fits_and_distinct_values_get_distinct_directories(
    column: str, first: str, second: str
) -> None:
    one = partition_directory((column,), (first,))
    other = partition_directory((column,), (second,))
    for directory in (one, other):
        parts = directory.split("/")
        assert parts[0] == "data" and len(parts) == 2
        assert len(parts[1].encode()) <= MAX_NAME_BYTES
        assert parts[1] not in ("", ".", "..")
    if value_text(first) != value_text(second):
        assert one != other
    full = f"{escape(column)}={escape(value_text(first))}"
    if len(full) <= MAX_NAME_BYTES:
        assert one == f"data/{full}"  # the Hive name whenever it fits
    else:
        head, _, digest = one.removeprefix("data/").rpartition("~")
        assert full.startswith(head) and len(digest) == 32
