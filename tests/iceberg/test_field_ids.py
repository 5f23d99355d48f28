"""The Parquet field ids ``segcat.write`` puts on files never disagree with the Iceberg metadata.

Iceberg readers match a file's columns by the ids it carries; a file numbered differently from
the metadata is read wrongly (one column's values as another's, or nulls). Regression: the writer
numbered columns itself from the head's live files, so a write that added a top-level column to a
table with a nested one renumbered the nested field (``a.x`` 2 → 3, ``b`` took 2).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import segcat
from segcat import Catalog, Config, load_catalog
from segcat.catalog.protocol.parquet_field_ids import FIELD_ID
from tests.iceberg_publisher_support import iceberg_rows, segcat_rows, wait_for_pointer
from tests.materializer_support import namespace, running_materializer, wait_until_following

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def _local(uri: str) -> str:
    return uri.removeprefix("file://")


def _ids(schema: pa.Schema) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    for field in schema:
        found[field.name] = (field.metadata or {}).get(FIELD_ID)
        if pa.types.is_struct(field.type):
            for child in field.type:
                found[f"{field.name}.{child.name}"] = (child.metadata or {}).get(FIELD_ID)
    return found


def test_files_carry_the_published_ids_or_none(mconfig: Config) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    nested = pa.table({"a": pa.array([{"x": 1}, {"x": 2}])})
    widened = pa.table({"a": pa.array([{"x": 3}]), "b": pa.array(["new"])})
    with load_catalog(mconfig).load_table(name) as table, running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        log_id = table.topic.topic_id
        first = segcat.write(table, nested)
        wait_for_pointer(mconfig, name, log_id, first)
        # ``b`` is new: the metadata does not name it yet, so this file carries no id at all
        second = segcat.write(table, widened)
        wait_for_pointer(mconfig, name, log_id, second)
        # now every column has its id: the next file carries the metadata's
        third = segcat.write(table, widened)
        pointer = wait_for_pointer(mconfig, name, log_id, third)
        assert pointer.blocked_version is None and pointer.location is not None
        assert iceberg_rows(pointer.location) == segcat_rows(table, mconfig, third)

        files = {r.added_version: pq.read_schema(_local(r.uri)) for r in table.scan().files()}
        assert set(_ids(files[second]).values()) == {None}
        assert _ids(files[third]) == {"a": b"1", "a.x": b"2", "b": b"3"}
        # the first file was written before anything was published: no ids either
        assert set(_ids(files[first]).values()) == {None}
