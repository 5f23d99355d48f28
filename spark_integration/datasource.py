"""``format("segcat")``: the PySpark Python data source, one entry for every view of a table.

A data source declares one schema before it knows whether it is read as a batch or a stream, so
the options, not the caller, choose the view:

- ``view=versions``: one row per accepted version, as a stream (``version_stream``) or the
  history as a batch (``version_batch``);
- ``view=segments`` (or ``versionAsOf`` / ``timestampAsOf``): one snapshot's segments;
- ``readChangeFeed=true``: the change feed, batch or stream (``change_feed``, ``change_stream``).

Written as a stream (``writeStream.format("segcat")``), it is the exactly-once sink (``stream_sink``).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.types import StructType

from segcat import InvalidArgument
from segcat.spark_integration.change_feed import ChangeFeedSource
from segcat.spark_integration.change_options import is_change_feed
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.stream_sink import stream_writer
from segcat.spark_integration.version_batch import SEGMENTS_SCHEMA, HistoryReader, SegmentsReader
from segcat.spark_integration.version_follower import VERSIONS_SCHEMA
from segcat.spark_integration.version_stream import VersionStreamReader


class SegcatDataSource(DataSource):
    """``format("segcat")``: versions as a stream (or history), or one snapshot's segments."""

    @classmethod
    def name(cls) -> str:
        return "segcat"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._parsed = SourceOptions.parse(options)
        self._feed = ChangeFeedSource(self._parsed) if is_change_feed(self._parsed) else None

    def schema(self) -> StructType | str:
        if self._feed is not None:
            return self._feed.schema()
        return SEGMENTS_SCHEMA if self._parsed.view == "segments" else VERSIONS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if self._feed is not None:
            return self._feed.reader(schema)
        self._parsed.check(streaming=False)
        if self._parsed.view == "segments":
            return SegmentsReader(self._parsed)
        return HistoryReader(self._parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self._feed is not None:
            return self._feed.stream_reader(schema)
        self._parsed.check(streaming=True)
        if self._parsed.view != "versions":
            raise InvalidArgument(
                "a stream of the segcat source emits versions; drop versionAsOf/timestampAsOf"
            )
        return VersionStreamReader(self._parsed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``writeStream.format("segcat")``: one commit per micro-batch, exactly once (``stream_sink``)."""
        return stream_writer(self.options, schema, overwrite)
