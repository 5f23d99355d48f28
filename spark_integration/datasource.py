"""``format("segcat")``: the PySpark Python data source, one entry for every view of a table.

A data source declares one schema before it knows whether it is read as a batch or a stream, so
the options, not the caller, choose the view:

- ``view=rows`` (the default): the table's rows, at a version as a batch (``row_batch``), or
  the rows of the versions as they come as a stream (``row_stream``);
- ``view=versions``: one row per accepted version, as a stream (``version_stream``) or the
  history as a batch (``version_batch``);
- ``view=segments``: one snapshot's segments (``versionAsOf`` / ``timestampAsOf``).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType

from segcat import InvalidArgument
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.row_batch import RowsAt, RowsReader, pin_version, spark_schema
from segcat.spark_integration.row_stream import RowStreamReader
from segcat.spark_integration.version_batch import SEGMENTS_SCHEMA, HistoryReader, SegmentsReader
from segcat.spark_integration.version_follower import VERSIONS_SCHEMA
from segcat.spark_integration.version_stream import VersionStreamReader


class SegcatDataSource(DataSource):
    """``format("segcat")``: the table's rows (batch or stream), its versions, or one snapshot's segments."""

    @classmethod
    def name(cls) -> str:
        return "segcat"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._parsed = SourceOptions.parse(options)
        self._rows: RowsAt | None = None
        """``view=rows``: the version read and its schema, pinned when Spark asks for the schema
        (this object is pickled from there to the planner, so plan and rows agree)."""

    def _rows_at(self, given: StructType | None = None) -> RowsAt:
        """The pinned version and schema; ``given``: the schema Spark hands the reader, which is
        the user's own (``.schema(...)``) when Spark never asked ``schema()``."""
        if self._rows is None:
            pinned = pin_version(self._parsed)
            self._rows = pinned if given is None else RowsAt(pinned.version, given.json())
        return self._rows

    def schema(self) -> StructType | str:
        view = self._parsed.view
        if view == "rows":
            return spark_schema(self._rows_at().schema)
        return SEGMENTS_SCHEMA if view == "segments" else VERSIONS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        self._parsed.check(streaming=False)
        if self._parsed.view == "rows":
            return RowsReader(self._parsed, self._rows_at(schema))
        if self._parsed.view == "segments":
            return SegmentsReader(self._parsed)
        return HistoryReader(self._parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._parsed.check(streaming=True)
        if self._parsed.view == "rows":
            return RowStreamReader(self._parsed, self._rows_at(schema))
        if self._parsed.view != "versions":
            raise InvalidArgument("a stream of the segcat source emits rows or versions, not segments")
        return VersionStreamReader(self._parsed)
