"""``segcat``: one command line for the stack, tables, commits and reads."""

from __future__ import annotations

import logging
import os
import sys

import click
from rich.console import Console

from catalog.cli.commit_cmd import commit_cmd
from catalog.cli.demo import demo_cmd
from catalog.cli.read_cmds import diff_cmd, log_cmd, show_cmd
from catalog.cli.service_cmds import materializer_cmd, watch_cmd
from catalog.cli.stack_cmds import stack
from catalog.cli.table_cmds import table
from catalog.errors import SegcatError

err_console = Console(stderr=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file (or SEGCAT_CONFIG)."
)
@click.option("-v", "--verbose", count=True, help="More log lines (-v info, -vv debug).")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, verbose: int) -> None:
    """segcat: an event-sourced table catalog on Kafka."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if verbose < 2:
        logging.getLogger("segcat.librdkafka").setLevel(logging.ERROR)
    if config_path:
        os.environ["SEGCAT_CONFIG"] = config_path
    ctx.ensure_object(dict)


cli.add_command(stack)
cli.add_command(table)
cli.add_command(commit_cmd)
cli.add_command(log_cmd)
cli.add_command(show_cmd)
cli.add_command(diff_cmd)
cli.add_command(demo_cmd)
cli.add_command(materializer_cmd)
cli.add_command(watch_cmd)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except SegcatError as exc:
        err_console.print(f"[bold red]error:[/] {type(exc).__name__}: {exc}")
        sys.exit(1)
