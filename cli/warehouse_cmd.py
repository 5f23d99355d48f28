"""``segcat warehouse ready``: wait for the configured warehouse, making its bucket if asked.

Container stacks (docker-compose.yml's ``s3-init``) and orchestrators' init steps need one
command that succeeds only once the object store serves the warehouse with these credentials.
"""

from __future__ import annotations

import click

from segcat.catalog.config import Config
from segcat.catalog.storage.warehouse_ready import wait_until_ready
from segcat.cli.params import DURATION
from segcat.cli.render import console


@click.group("warehouse")
def warehouse() -> None:
    """The object store the catalog writes key frames and segments to (SEGCAT_WAREHOUSE)."""


@warehouse.command("ready")
@click.option("--create-bucket", is_flag=True, help="Create the s3:// warehouse's bucket if it is missing.")
@click.option(
    "--wait", "wait", type=DURATION, default="0s", show_default=True, help="Keep trying this long (60s, 2m)."
)
def ready_cmd(create_bucket: bool, wait: int) -> None:
    """Exit 0 once the warehouse root lists with the configured credentials."""
    config = Config.load()
    found = wait_until_ready(config, create_bucket=create_bucket, wait_s=wait / 1000)
    made = " (bucket created)" if found.created_bucket else ""
    console.print(f"warehouse {found.warehouse} is ready{made}")
