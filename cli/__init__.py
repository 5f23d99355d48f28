"""``segcat``: one command line for the stack, tables, commits and reads.

Every failure ends in one line on stderr and an exit code a script can act on
(README, "Exit codes"): 2 invalid input, 3 conflict, 4 not found, 5 service unavailable,
1 anything else. A traceback is printed only with ``-vv``. The commands that need an extra
(``stack``, ``demo``, ``serve``, ``materializer``) load their code when they run, so the base
install runs everything else and a missing extra is one ``MissingExtra`` line.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable
from importlib import metadata
from typing import Any

import click

from segcat import SegcatError
from segcat.catalog.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_INVALID, MissingExtra
from segcat.catalog.errors import exit_code as error_exit_code
from segcat.catalog.extras import install_hint, missing_extra, requires
from segcat.cli.commit_cmd import commit_cmd
from segcat.cli.lease_cmds import leases_cmd
from segcat.cli.lifecycle_cmds import prune_cmd, vacuum_cmd
from segcat.cli.read_cmds import diff_cmd, log_cmd, show_cmd
from segcat.cli.service_cmds import watch_cmd
from segcat.cli.table_cmds import table
from segcat.cli.tag_cmds import tag
from segcat.cli.warehouse_cmd import warehouse


def exit_code(exc: BaseException) -> int:
    """The exit code for an error (README, "Exit codes"): usage errors are invalid input."""
    if isinstance(exc, click.UsageError):
        return EXIT_INVALID
    return error_exit_code(exc)


_verbosity = 0


def _librdkafka_level(verbosity: int) -> int:
    """librdkafka's own lines only with -v (errors) or -vv (debug): a refused login or a missing
    ACL repeats a line per broker and retry, and the command's one ``error:`` line already says
    what went wrong and which setting to fix. Services log them through ``catalog.logs``."""
    return {0: logging.CRITICAL + 1, 1: logging.ERROR}.get(verbosity, logging.DEBUG)


def _add_verbosity(ctx: click.Context, _: click.Parameter, count: int) -> None:
    """``-v`` counts wherever it is given, before or after the subcommand."""
    global _verbosity
    if ctx.parent is None and isinstance(ctx.command, click.Group):
        _verbosity = 0  # a new ``segcat`` invocation (the demo also runs subcommands on their own)
    _verbosity += count
    level = logging.WARNING - 10 * min(_verbosity, 2)
    logging.getLogger().setLevel(level)
    logging.getLogger("segcat.librdkafka").setLevel(_librdkafka_level(_verbosity))


def _verbose_option() -> click.Option:
    return click.Option(
        ["-v", "--verbose"],
        count=True,
        expose_value=False,
        callback=_add_verbosity,
        help="More log lines (-v info, -vv debug and tracebacks); also after the subcommand.",
    )


def _version() -> str:
    try:
        return metadata.version("segcat")
    except metadata.PackageNotFoundError:
        return "unknown"


def _materializer() -> click.Command:
    from segcat.materializer.command import materializer_cmd

    return materializer_cmd


def _serve() -> click.Command:
    from segcat.server.command import serve_cmd

    _with_verbosity(serve_cmd)
    return serve_cmd


def _stack() -> click.Command:
    from segcat.cli.stack_cmds import stack

    _with_verbosity(stack)
    return stack


def _demo() -> click.Command:
    from segcat.cli.demo import demo_cmd

    _with_verbosity(demo_cmd)
    return demo_cmd


_ON_DEMAND: dict[str, tuple[Callable[[], click.Command], tuple[str, ...]]] = {
    "demo": (_demo, ("stack", "materializer")),
    "materializer": (_materializer, ("materializer",)),
    "serve": (_serve, ("server",)),
    "stack": (_stack, ("stack",)),
}
"""The commands that need an extra: how to load each, and the extras it needs."""


def _not_installed(name: str, missing: MissingExtra) -> click.Command:
    """A stand-in for a command whose extra is missing: listed in ``--help``, fails when run."""

    def fail(**_: Any) -> None:
        raise missing

    return click.Command(
        name,
        callback=fail,
        help=f"Not installed: {install_hint(missing.extras)}.",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


class _Segcat(click.Group):
    """``segcat``, with the commands of ``_ON_DEMAND`` loaded when asked for.

    They load on demand because their code needs an extra the base install lacks, and because
    ``segcat.materializer.command`` runs ``python -m segcat.materializer`` on its own and uses
    this package's parameter types: importing it here at load time would be a cycle. A module of
    a missing extra, whether the command's import or its run needs it, ends as ``MissingExtra``.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_ON_DEMAND})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _ON_DEMAND:
            return super().get_command(ctx, cmd_name)
        load, extras = _ON_DEMAND[cmd_name]
        try:
            with requires(f"segcat {cmd_name}", *extras):
                return load()
        except MissingExtra as missing:
            return _not_installed(cmd_name, missing)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            name = ctx.invoked_subcommand or ""
            error = missing_extra(exc, f"segcat {name}", _ON_DEMAND[name][1]) if name in _ON_DEMAND else None
            if error is None:
                raise
            raise error from exc


@click.group(cls=_Segcat, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="TOML config file (or SEGCAT_CONFIG)."
)
@click.version_option(_version(), "--version", prog_name="segcat", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """segcat: an event-sourced table catalog on Kafka."""
    if config_path:
        os.environ["SEGCAT_CONFIG"] = config_path
    ctx.ensure_object(dict)


cli.params.insert(0, _verbose_option())
for _command in (
    table,
    commit_cmd,
    log_cmd,
    show_cmd,
    diff_cmd,
    watch_cmd,
    leases_cmd,
    prune_cmd,
    vacuum_cmd,
    tag,
    warehouse,
):
    cli.add_command(_command)


def _with_verbosity(command: click.Command) -> None:
    if not any(isinstance(p, click.Option) and "-v" in p.opts for p in command.params):
        command.params.append(_verbose_option())
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_verbosity(sub)


for _command in cli.commands.values():
    _with_verbosity(_command)


def _fail(message: str) -> None:
    text = " ".join(message.split("\n"))
    click.echo(f"{click.style('error:', fg='red', bold=True)} {text}", err=True)


def main(argv: list[str] | None = None) -> None:
    """The ``segcat`` entry point: run the command, turn every failure into one line and an exit code."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("segcat.librdkafka").setLevel(_librdkafka_level(0))
    try:
        code = cli.main(argv, prog_name="segcat", standalone_mode=False)
    except click.exceptions.Abort:
        _fail("aborted")
        sys.exit(EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:
        where = exc.ctx.command_path if isinstance(exc, click.UsageError) and exc.ctx else "segcat"
        _fail(f"{exc.format_message()} (see '{where} -h')")
        sys.exit(exit_code(exc) if isinstance(exc, click.UsageError) else EXIT_INVALID)
    except SegcatError as exc:
        if _verbosity >= 2:
            traceback.print_exc()
        _fail(f"{type(exc).__name__}: {exc}")
        sys.exit(exit_code(exc))
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the reader left (| head)
        sys.exit(EXIT_ERROR)
    except Exception as exc:
        if _verbosity >= 2:
            traceback.print_exc()
        _fail(
            f"unexpected {type(exc).__name__}: {exc} — this is a bug in segcat, please report it "
            "with the command you ran (run it again with -vv for the traceback)"
        )
        sys.exit(EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else 0)
