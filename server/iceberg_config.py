"""What an Iceberg reader needs to open a table's files: the ``config`` of a LoadTableResult.

Iceberg's FileIO properties (``s3.endpoint``, ``s3.region``, ``s3.path-style-access``,
``s3.access-key-id`` ...) are the names pyiceberg, Iceberg Java and DuckDB read from a REST
catalog's answer. A local warehouse needs none: its paths are the files.

**Decision — credentials.** The server never hands out storage credentials unless started with
``--iceberg-credentials`` (which needs a token): a catalog that answers every caller with the
warehouse's keys would turn read access to the catalog into write access to the data. With the
flag it hands out the credentials its own process uses (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``), the same for every table; without it readers
bring their own, as with any Iceberg catalog that does not vend credentials.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from segcat import Config

_CREDENTIALS = (
    ("AWS_ACCESS_KEY_ID", "s3.access-key-id"),
    ("AWS_SECRET_ACCESS_KEY", "s3.secret-access-key"),
    ("AWS_SESSION_TOKEN", "s3.session-token"),
)


def reader_config(
    config: Config, *, credentials: bool, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """FileIO properties for the tables of ``config``'s warehouse (empty for a local one)."""
    if not config.warehouse.startswith("s3://"):
        return {}
    env = os.environ if env is None else env
    found: dict[str, str] = {}
    if config.s3_endpoint is not None:
        endpoint = config.s3_endpoint
        found["s3.endpoint"] = endpoint if "://" in endpoint else f"https://{endpoint}"
        found["s3.path-style-access"] = "true"  # MinIO and most S3-compatible stores: what segcat uses too
    region = config.s3_region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region is None and config.s3_endpoint is not None:
        region = "us-east-1"  # as segcat's own client does for a custom endpoint (objectstore.s3_filesystem)
    if region is not None:
        found["s3.region"] = region
    if credentials and env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        for variable, prop in _CREDENTIALS:
            if env.get(variable):
                found[prop] = env[variable]
    return found
