"""The ``segcat`` command line on a real broker: happy paths and clear failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.config import Config

pytestmark = pytest.mark.kafka


def _env(config: Config) -> dict[str, str]:
    return {
        **os.environ,
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
        "COLUMNS": "200",
    }


def segcat(config: Config, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from catalog.cli import main; main()", *args],
        env=_env(config),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _append_doc(*ids: str, partition: str = "2020-01") -> dict[str, object]:
    return {
        "operation": "APPEND",
        "adds": [
            {
                "segment_id": i,
                "path": f"data/{i}.parquet",
                "size_bytes": 10,
                "row_count": 2,
                "partition": partition,
                "stats": [
                    {"column": "d", "type": "DATE", "min": "2020-01-01", "max": "2020-01-31", "null_count": 0}
                ],
            }
            for i in ids
        ],
        "properties": {"job": "cli-test"},
    }


def test_table_commit_log_show_diff(config: Config, table_name: str, tmp_path: Path) -> None:
    assert segcat(config, "table", "create", table_name).returncode == 0
    assert table_name in segcat(config, "table", "list").stdout
    described = segcat(config, "table", "describe", table_name)
    assert "cleanup.policy = compact" in described.stdout

    doc = tmp_path / "c1.json"
    doc.write_text(json.dumps(_append_doc("a", "b")))
    first = segcat(config, "commit", table_name, str(doc))
    assert first.returncode == 0, first.stderr
    assert "version 0" in first.stdout
    second = segcat(
        config,
        "commit",
        table_name,
        "-",
        stdin=json.dumps(
            {
                "operation": "COMPACT",
                "drops": ["a", "b"],
                **{k: v for k, v in _append_doc("ab").items() if k == "adds"},
            }
        ),
    )
    assert second.returncode == 0, second.stderr

    lines = [json.loads(line) for line in segcat(config, "log", table_name, "--json").stdout.splitlines()]
    assert [(r["offset"], r["outcome"], r["commit"]["operation"]) for r in lines] == [
        (0, "ACCEPTED", "APPEND"),
        (1, "ACCEPTED", "COMPACT"),
    ]
    assert lines[0]["commit"]["adds"][0]["stats"][0]["min"] == "2020-01-01"

    head = json.loads(segcat(config, "show", table_name, "--json").stdout)
    assert head["version"] == 1 and [s["segment_id"] for s in head["segments"]] == ["ab"]
    old = json.loads(segcat(config, "show", table_name, "--version", "0", "--json").stdout)
    assert sorted(s["segment_id"] for s in old["segments"]) == ["a", "b"]
    diff = segcat(config, "diff", table_name, "0", "1")
    assert "+1 load" in diff.stdout and "-2 unload" in diff.stdout


def test_a_losing_commit_exits_non_zero_with_the_rule(
    config: Config, table_name: str, tmp_path: Path
) -> None:
    segcat(config, "table", "create", table_name)
    segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("a")))
    again = segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("a")))
    assert again.returncode == 1
    assert "CommitConflict" in again.stderr and "4-duplicate-segment" in again.stderr


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("table", "create", "../etc"), None, "InvalidTableName"),
        (("show", "nope.missing_table"), None, "TableNotFound"),
        (("commit", "NAME", "-"), "{not json", "not valid JSON"),
        (("commit", "NAME", "-"), json.dumps({"operation": "APPEND", "drops": ["x"]}), "MalformedCommit"),
        (("commit", "NAME", "-"), json.dumps({"operation": "EXPLODE"}), "MalformedCommit"),
        (("commit", "NAME", "-"), json.dumps({"operation": "APPEND", "bogus": 1}), "unknown commit fields"),
        (("show", "NAME", "--as-of", "yesterday-ish"), None, "neither epoch milliseconds nor ISO-8601"),
    ],
)
def test_bad_input_gets_a_clear_error_and_writes_nothing(
    config: Config, table_name: str, args: tuple[str, ...], stdin: str | None, message: str
) -> None:
    segcat(config, "table", "create", table_name)
    result = segcat(config, *(table_name if a == "NAME" else a for a in args), stdin=stdin)
    assert result.returncode != 0
    assert message in result.stderr + result.stdout
    log = segcat(config, "log", table_name, "--json")
    assert log.stdout.strip() == ""
