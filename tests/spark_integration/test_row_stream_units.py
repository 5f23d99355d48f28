"""The rows stream's offsets, admission and option checks, without Spark or services."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat import InvalidArgument, StreamSchemaChanged
from segcat.catalog.read.changes import FileRead
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.row_batch import OPEN_COST_BYTES, RowsAt, pack
from segcat.spark_integration.row_stream import Budget, Position, RowStreamReader
from tests.strategies import SETTINGS

SCHEMA = json.dumps(
    {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
)


def reads(*sizes: int, rows: int = 10) -> list[FileRead]:
    return [FileRead(f"file:///t/{k}.parquet", rows, size, 1, None) for k, size in enumerate(sizes)]


positions = st.builds(
    lambda version, done, index: Position(version, done, -1 if done else index),
    st.integers(-1, 10**12),
    st.booleans(),
    st.integers(-1, 10**6),
)


@settings(SETTINGS, max_examples=200)
@given(positions)
def test_offsets_are_plain_json_that_reads_back_the_same(position: Position) -> None:
    text = json.dumps(position.to_json())
    assert Position.parse(json.loads(text)) == position


@settings(SETTINGS, max_examples=200)
@given(positions, positions)
def test_offsets_order_as_the_rows_they_cover(a: Position, b: Position) -> None:
    """Inside the snapshot of V (by index) < V done < anything of a later version."""
    assert (a < b) == ((a.version, a.done, a.index) < (b.version, b.done, b.index))
    assert Position(5, False, 1_000_000) < Position(5, True) < Position(6, False, -1)


def test_offsets_of_another_stream_or_format_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="view=versions"):
        Position.parse({"version": 3})
    with pytest.raises(InvalidArgument, match="offset format 2"):
        Position.parse({"sourceVersion": 2, "version": 3, "index": -1, "isStartingVersion": False})
    with pytest.raises(InvalidArgument, match="not an offset"):
        Position.parse({"sourceVersion": 1, "version": "3", "index": -1, "isStartingVersion": False})


def test_limits_are_soft_and_count_every_kind() -> None:
    budget = Budget(files=2, bytes=None, rows=None)
    assert budget.admit(reads(1, 1, 1))  # the first always goes in, even over the limit
    assert not budget.admit(reads(1))
    budget = Budget(files=10, bytes=100, rows=None)
    assert budget.admit(reads(60)) and not budget.admit(reads(50)) and budget.admit(reads(40))
    assert budget.spent
    budget = Budget(files=None, bytes=None, rows=25)
    assert (
        budget.admit(reads(1, rows=10))
        and budget.admit(reads(1, rows=15))
        and not budget.admit(reads(1, rows=1))
    )
    unlimited = Budget(None, None, None)
    assert all(unlimited.admit(reads(10**12)) for _ in range(5)) and not unlimited.spent


def test_files_are_packed_in_order_and_spread() -> None:
    assert pack([]) == []
    two = pack(reads(10, 10))
    assert [len(p.reads) for p in two] == [1, 1]  # at least two tasks for two files
    many = pack(reads(*([OPEN_COST_BYTES] * 100)))
    flat = [r for p in many for r in p.reads]
    assert flat == reads(*([OPEN_COST_BYTES] * 100)) and 2 <= len(many) < 100
    assert [p.value for p in many] == list(range(len(many)))


def options(**given: str) -> SourceOptions:
    return SourceOptions.parse({"table": "ns.t", **given})


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"maxVersionsPerTrigger": "1"}, "maxVersionsPerTrigger bounds the stream of versions"),
        ({"maxFilesPerTrigger": "0"}, "maxFilesPerTrigger must be ≥ 1"),
        ({"maxBytesPerTrigger": "x"}, "maxBytesPerTrigger must be an integer"),
        ({"skipChangeCommits": "yes"}, "skipChangeCommits must be true or false"),
        ({"startingVersion": "1", "startingTimestamp": "0"}, "not both"),
    ],
)
def test_bad_options_are_refused_naming_them(given: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        RowStreamReader(options(**given), RowsAt(3, SCHEMA))


def test_a_stream_of_a_table_without_files_needs_a_schema() -> None:
    empty = json.dumps({"type": "struct", "fields": []})
    with pytest.raises(StreamSchemaChanged, match=r"ns.t has no files at version 3.*\.schema\(\.\.\.\)"):
        RowStreamReader(options(), RowsAt(3, empty))
