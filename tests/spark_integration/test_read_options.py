"""The ``segcat`` source's options, parsed without Spark: what a missing table name says."""

from __future__ import annotations

import pytest

from segcat import InvalidArgument
from segcat.spark_integration.read_options import SourceOptions


@pytest.mark.parametrize("options", [{}, {"checkpointlocation": "/tmp/ck"}, {"table": ""}])
def test_a_missing_table_names_every_way_to_give_it(options: dict[str, str]) -> None:
    """``writeStream.toTable(name)`` reaches the source with no table at all (Spark passes a Python
    data source neither the name nor the catalog table's options): the error says what works."""
    with pytest.raises(InvalidArgument) as caught:
        SourceOptions.parse(options)
    message = str(caught.value)
    for way in ('.load("', '.start("', '.option("table"', "toTable()"):
        assert way in message
