"""``segcat`` failures that need no running service: one line on stderr, the documented exit code,
no traceback (issue 7, items 12 and 16, and the CLI side of item 2).

These call the real entry point, ``segcat.cli.main``, in-process (fast); tests/cli/test_cli.py runs
it as a subprocess against a real broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import segcat.cli.table_cmds as table_cmds
from segcat.cli import main
from segcat.local_stack.private import free_port


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment whose services do not exist: any I/O would fail, and fast."""
    env = {
        "SEGCAT_HOME": str(tmp_path / "home"),
        "SEGCAT_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "SEGCAT_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
        "SEGCAT_WAREHOUSE": str(tmp_path / "warehouse"),
        "SEGCAT_REQUEST_TIMEOUT_S": "2",
    }
    for key in [k for k in os.environ if k.startswith("SEGCAT_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def segcat(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else 1), out.out, out.err


def one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "ns.t", "--version", "99999999999999999999"), "must fit a signed 64-bit integer"),
        (("show", "ns.t", "--version", "-5"), "must be at least -1"),
        (("show", "ns.t", "--version", "1_000"), "neither a version nor a tag name"),
        (("show", "ns.t", "--as-of", "-5"), "from 1970 on"),
        (("show", "ns.t", "--as-of", "1900-01-01"), "from 1970 on"),
        (("show", "ns.t", "--as-of", "yesterday-ish"), "neither epoch milliseconds nor ISO-8601"),
        (("show", "ns.t", "--limit", "-1"), "must be at least 0"),
        (("show", "ns.t", "--version", "3", "--as-of", "5"), "not both"),
        (("diff", "ns.t", "12", "99999999999999999999"), "must fit a signed 64-bit integer"),
        (("diff", "ns.t", "-2", "4"), "must be at least -1"),
        (("log", "ns.t", "--from", "-1"), "must be at least 0"),
        (("log", "ns.t", "--limit", "0"), "must be at least 1"),
        (("watch", "ns.t", "--from", "-5"), "must be at least -1"),
        (("watch", "ns.t", "--count", "0"), "must be at least 1"),
        (("watch", "--all", "ns.t"), "takes no NAME"),
        (("table", "create", "ns.t", "--max-message-bytes", "10"), "must be at least 65536"),
        (("table", "create", "ns.t", "--max-message-bytes", str(2**31)), "must be at most 2147483647"),
        (("table", "create", "ux_a.--help"), "not starting with -"),
        (("table", "create", "../etc"), "InvalidTableName"),
        (("materializer", "--metrics-port", "70000"), "0<=x<=65535"),
        (("demo", "--days", "0"), "must be at least 1"),
        (("no-such-command",), "No such command"),
    ],
)
def test_impossible_arguments_exit_2_before_any_io(
    nowhere: dict[str, str], capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, _, err = segcat(capsys, *args)
    assert code == 2, err
    assert message in one_line_error(err)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "is not UTF-8 text"),
        (b"[" * 100_000, "nests deeper than"),
        (b'{"operation": "APPEND", "adds": "abc"}', "adds: expected array"),
        (b'{"operation": "APPEND", "adds": {"a": 1}}', "adds: expected array"),
        (b'{"operation": "SET_SCHEMA", "schema": {"a": 1}}', "schema: expected string or null"),
        (
            b'{"operation": "APPEND", "adds": [{"segment_id": "a", "path": "p", "size_bytes": '
            + str(2**70).encode()
            + b', "row_count": 1}]}',
            "adds[0].size_bytes: must be at most",
        ),
        (
            b'{"operation": "APPEND", "adds": [{"segment_id": "a", "path": "p", "size_bytes": 1,'
            b' "row_count": 1, "stats": [{"column": "c", "type": "INT", "null_count": "3"}]}]}',
            "adds[0].stats[0].null_count: expected integer",
        ),
        (b'{"operation": "APPEND", "a": NaN}', "NaN is not JSON"),
        (b'{"operation": "APPEND", "operation": "DELETE"}', "duplicate key 'operation'"),
        (b'{"operation": "APPEND", "table": "other.table"}', "table: the document is for table"),
    ],
)
def test_a_bad_commit_file_exits_2_before_any_io(
    nowhere: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    document: bytes,
    message: str,
) -> None:
    path = tmp_path / "commit.json"
    path.write_bytes(document)
    code, _, err = segcat(capsys, "commit", "ns.t", str(path))
    assert code == 2, err
    assert message in one_line_error(err)
    assert "MalformedCommit" in err


def test_a_missing_commit_file_is_a_usage_error(
    nowhere: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = segcat(capsys, "commit", "ns.t", "/nonexistent/commit.json")
    assert code == 2
    assert "commit.json" in one_line_error(err)


@pytest.mark.parametrize(
    ("env", "toml", "message"),
    [
        ({"SEGCAT_KAFKA_SECURITY_PROTOKOL": "SSL"}, None, "SEGCAT_KAFKA_SECURITY_PROTOKOL"),
        ({"SEGCAT_REQUEST_TIMEOUT_S": "abc"}, None, "SEGCAT_REQUEST_TIMEOUT_S must be a number"),
        ({}, "kafka = 5", "'kafka' in "),
        ({}, "bootstrap_server = 'x:1'", "unknown key 'bootstrap_server'"),
        ({"SEGCAT_REDIS_URL": "redis://[::1"}, None, "SEGCAT_REDIS_URL is not a valid URL"),
        ({"SEGCAT_WAREHOUSE": "s3://KEY:s3cr3t@bucket/x"}, None, "SEGCAT_WAREHOUSE holds credentials"),
        ({"SEGCAT_REDIS_URL": ""}, "redis_url = 'redis://u:s3cr3t@h:x/0'", "'redis_url' in "),
    ],
)
def test_config_errors_exit_2(
    nowhere: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    toml: str | None,
    message: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if toml is not None:
        path = tmp_path / "segcat.toml"
        path.write_text(toml)
        monkeypatch.setenv("SEGCAT_CONFIG", str(path))
    code, _, err = segcat(capsys, "table", "list")
    assert code == 2, err
    line = one_line_error(err)
    assert "ConfigError" in line and message in line
    assert "s3cr3t" not in err


def test_a_local_stack_that_is_not_running_suggests_starting_it(
    nowhere: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = segcat(capsys, "table", "list")  # nothing listens on that loopback port
    assert code == 5
    line = one_line_error(err)
    assert "ServiceUnavailable" in line and "segcat stack up" in line


def test_another_unreachable_broker_is_not_told_to_start_the_local_stack(
    nowhere: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere["SEGCAT_BOOTSTRAP_SERVERS"] = "192.0.2.1:9092"  # TEST-NET-1: never answers, not this machine
    monkeypatch.setenv("SEGCAT_BOOTSTRAP_SERVERS", nowhere["SEGCAT_BOOTSTRAP_SERVERS"])
    code, _, err = segcat(capsys, "table", "list")
    assert code == 5
    line = one_line_error(err)
    assert nowhere["SEGCAT_BOOTSTRAP_SERVERS"] in line and "security.protocol" in line
    assert "stack up" not in line


def test_stack_status_exits_5_when_the_stack_is_down(
    nowhere: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SEGCAT_STACK_KAFKA_PORT", str(free_port()))
    monkeypatch.setenv("SEGCAT_STACK_REDIS_PORT", str(free_port()))
    code, _, _ = segcat(capsys, "stack", "status")
    assert code == 5
    code, out, _ = segcat(capsys, "stack", "status", "--json")
    assert code == 5
    status = json.loads(out)
    assert status["running"] is False
    assert {s["name"] for s in status["services"]} >= {"kafka", "redis"}
    assert all(s["pid"] is None and s["running"] is False for s in status["services"])


def test_an_unexpected_exception_is_one_line_asking_for_a_report(
    nowhere: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def explode(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(table_cmds, "load_catalog", explode)
    code, _, err = segcat(capsys, "table", "list")
    assert code == 1
    line = one_line_error(err)
    assert "RuntimeError: boom" in line and "please report" in line and "-vv" in line

    code, _, err = segcat(capsys, "table", "list", "-vv")  # -v after the subcommand counts too
    assert code == 1
    assert "Traceback" in err and "RuntimeError: boom" in err


def test_verbose_goes_before_or_after_the_subcommand(
    nowhere: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (("-v", "show", "ns.t", "--version", "-9"), ("show", "ns.t", "-v", "--version", "-9")):
        code, _, err = segcat(capsys, *args)
        assert code == 2 and "must be at least -1" in err  # parsed, not "no such option: -v"
    code, _, err = segcat(capsys, "table", "list", "--verbose", "--verbose", "-x")
    assert code == 2 and "No such option '-x'" in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = segcat(capsys, "--version")
    assert code == 0 and out.startswith("segcat ")


def test_the_console_script_runs_and_reports_one_line(nowhere: dict[str, str]) -> None:
    """The installed ``segcat`` executable, as a user runs it."""
    script = Path(sys.executable).with_name("segcat")
    result = subprocess.run(
        [str(script), "show", "ns.t", "--as-of", "-5"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert one_line_error(result.stderr)
    version = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("segcat ")
    assert json.dumps(version.stdout)  # printable


def test_topic_admin_refuses_a_useless_max_message_bytes(nowhere: dict[str, str]) -> None:
    from segcat.catalog.config import Config
    from segcat.catalog.errors import InvalidArgument
    from segcat.catalog.log.topics import TopicAdmin
    from segcat.catalog.protocol.names import TableName

    admin = TopicAdmin(Config.load())
    for size in (10, 65_535, 2**31):
        with pytest.raises(InvalidArgument, match="max_message_bytes"):
            admin.create(TableName("ns", "t"), max_message_bytes=size)
