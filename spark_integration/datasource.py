"""``format("segcat")``: the PySpark Python data source, one entry for every view of a table.

A data source declares one schema before it knows whether it is read as a batch or a stream, so
the options, not the caller, choose the view:

- ``view=versions``: one row per accepted version, as a stream (``version_stream``) or the
  history as a batch (``version_batch``);
- ``view=segments`` (or ``versionAsOf`` / ``timestampAsOf``): one snapshot's segments.

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

    def schema(self) -> StructType | str:
        return SEGMENTS_SCHEMA if self._parsed.view == "segments" else VERSIONS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        self._parsed.check(streaming=False)
        if self._parsed.view == "segments":
            return SegmentsReader(self._parsed)
        return HistoryReader(self._parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._parsed.check(streaming=True)
        if self._parsed.view != "versions":
            raise InvalidArgument(
                "a stream of the segcat source emits versions; drop versionAsOf/timestampAsOf"
            )
        return VersionStreamReader(self._parsed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``writeStream.format("segcat")``: one commit per micro-batch, exactly once (``stream_sink``)."""
        return stream_writer(self.options, schema, overwrite)
