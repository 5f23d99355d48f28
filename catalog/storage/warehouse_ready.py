"""Wait until the configured warehouse answers, creating its S3 bucket when asked.

A container stack starts its object store and its writers together: the materializer must
not start before the bucket exists, and a health check that only sees an open port would pass
for a server that refuses every request (wrong keys, missing bucket). This checks the thing
the catalog needs: the warehouse root can be listed with the configured credentials.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from segcat.catalog.config import Config
from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.storage import objectstore


@dataclass(frozen=True)
class WarehouseReady:
    """What was found: the warehouse URI, and whether this call made its bucket."""

    warehouse: str
    created_bucket: bool
    attempts: int


def wait_until_ready(
    config: Config,
    *,
    create_bucket: bool,
    wait_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> WarehouseReady:
    """Retry until the warehouse root lists (or ``wait_s`` passes: ServiceUnavailable)."""
    deadline = clock() + wait_s
    attempts = 0
    while True:
        attempts += 1
        try:
            created = _check_once(config, create_bucket=create_bucket)
            return WarehouseReady(config.warehouse, created, attempts)
        except OSError as exc:
            if clock() >= deadline:
                raise ServiceUnavailable(
                    f"warehouse {config.warehouse} did not answer within {wait_s:g}s "
                    f"({attempts} attempts): {exc}"
                ) from exc
        sleep(min(1.0, max(0.0, deadline - clock())))


def _check_once(config: Config, *, create_bucket: bool) -> bool:
    if not config.warehouse.startswith("s3://"):
        fs, root = objectstore.filesystem(config.warehouse, config.s3_endpoint, config.s3_region)
        fs.create_dir(root, recursive=True)
        fs.get_file_info(pafs.FileSelector(root, allow_not_found=False))
        return False
    bucket = urlsplit(config.warehouse).netloc
    fs = objectstore.s3_filesystem(bucket, config.s3_endpoint, config.s3_region)
    created = False
    if fs.get_file_info(bucket).type != pafs.FileType.Directory:
        if not create_bucket:
            raise FileNotFoundError(f"bucket {bucket!r} does not exist (pass --create-bucket)")
        creator = objectstore.s3_filesystem(bucket, config.s3_endpoint, config.s3_region, create_buckets=True)
        creator.create_dir(bucket)
        created = True
    # the bucket must not only exist but list with these credentials
    fs.get_file_info(pafs.FileSelector(bucket, allow_not_found=False))
    return created
