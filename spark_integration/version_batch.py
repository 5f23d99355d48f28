"""Batch reads of the ``segcat`` source's metadata views: the history and one snapshot's segments.

``view=versions`` lists the accepted versions between two bounds (the rows the version stream
emits); ``view=segments`` lists one snapshot's live segments with their stats.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    InputPartition,
)

from segcat import (
    InvalidArgument,
    load_catalog,
)
from segcat.catalog.protocol.jsonio import segment_to_json
from segcat.catalog.read.as_of import as_of_ms
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.version_follower import VersionFollower

SEGMENTS_SCHEMA = (
    "table STRING, version BIGINT, segment_id STRING, path STRING, uri STRING, partition STRING, "
    "format STRING, size_bytes BIGINT, row_count BIGINT, added_version BIGINT, "
    "stats MAP<STRING, STRUCT<type: STRING, min: STRING, max: STRING, null_count: BIGINT>>, "
    "bloom_column STRING"
)


class HistoryReader(DataSourceReader):
    """Batch read of the version rows: the accepted versions between two bounds (default: all)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._upto = options.int_option("endingVersion")
        if self._upto is not None and self._upto < 0:
            raise InvalidArgument(f"endingVersion must be ≥ 0, not {self._upto}")
        if options.get("versionAsOf") is not None or options.get("timestampAsOf") is not None:
            raise InvalidArgument(
                "view=versions lists the history; versionAsOf/timestampAsOf ask for segments"
            )

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        follower = VersionFollower(self._options.config(), self._options.name)
        try:
            after = self._options.starting_after(follower)
            if self._upto is not None and self._upto <= after:
                raise InvalidArgument(
                    f"endingVersion {self._upto} is before startingVersion {after + 1}: the range is empty"
                )
            yield from follower.accepted_after(after, self._upto)
        finally:
            follower.close()


class SegmentsReader(DataSourceReader):
    """Batch read of one snapshot's live segments, stats included, one row per segment."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        for key in ("startingVersion", "endingVersion"):
            if options.get(key) is not None:
                raise InvalidArgument(
                    f"{key} bounds the history (view=versions), not one snapshot's segments"
                )
        self._version = options.version_option("versionAsOf")
        timestamp = options.get("timestampAsOf")
        self._as_of = (
            None if timestamp is None else as_of_ms(int(timestamp) if timestamp.isdigit() else timestamp)
        )

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        table = load_catalog(self._options.config()).load_table(self._options.name)
        snapshot = table.snapshot(self._version, as_of=self._as_of)
        wide = snapshot.segments
        added = dict(
            zip(wide.column("segment_id").to_pylist(), wide.column("added_version").to_pylist(), strict=True)
        )
        for segment in snapshot.segment_list():
            raw = segment_to_json(segment)
            stats = {
                s["column"]: (s["type"], _text(s.get("min")), _text(s.get("max")), s.get("null_count"))
                for s in raw["stats"]
            }
            yield (
                self._options.table,
                snapshot.version,
                segment.segment_id,
                segment.path,
                snapshot.resolve(segment.path),
                segment.partition,
                segment.format,
                segment.size_bytes,
                segment.row_count,
                added.get(segment.segment_id),
                stats,
                segment.bloom.column if segment.bloom is not None else None,
            )


def _text(value: Any) -> str | None:
    """Stats as text: ISO dates/times, base64 bytes (as jsonio writes them), numbers as written."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
