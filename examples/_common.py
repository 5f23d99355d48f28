"""Shared bits of the examples: the config, the Spark session, opening or creating a table."""

from __future__ import annotations

from pyspark.sql import SparkSession

from catalog.config import Config
from catalog.errors import ServiceUnavailable, TableNotFound
from catalog.table import Catalog, Table
from spark_integration import local_session


def open_table(config: Config, name: str, *, create: bool = False) -> Table:
    """The table ``name``; created first when ``create`` and it does not exist yet."""
    catalog = Catalog(config)
    try:
        return catalog.table(name)
    except TableNotFound as exc:
        if not create:
            raise SystemExit(f"table {name} does not exist (examples/daily_append.py creates it)") from exc
        return catalog.create_table(name)
    except ServiceUnavailable as exc:
        raise SystemExit(f"{exc}\nIs the local stack running?  .venv/bin/segcat stack up") from exc


def session(app_name: str) -> SparkSession:
    spark = local_session(app_name)
    spark.sparkContext.setLogLevel("ERROR")
    return spark
