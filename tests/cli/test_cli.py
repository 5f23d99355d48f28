"""The ``segcat`` command line on a real broker: happy paths and clear failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from segcat.catalog.config import Config
from tests.spark_support import spark

pytestmark = pytest.mark.kafka

__all__ = ["spark"]


def _env(config: Config, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **os.environ,
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
        "COLUMNS": "200",
        **(extra or {}),
    }


def segcat(
    config: Config, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from segcat.cli import main; main()", *args],
        env=_env(config, env),
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
    v1 = int(first.stdout.rsplit("version", 1)[1])
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
    v2 = int(second.stdout.rsplit("version", 1)[1])
    assert v2 > v1

    lines = [json.loads(line) for line in segcat(config, "log", table_name, "--json").stdout.splitlines()]
    data = [r for r in lines if r["commit"]["operation"] in ("APPEND", "COMPACT")]  # not create's own record
    assert [(r["offset"], r["outcome"], r["commit"]["operation"]) for r in data] == [
        (v1, "ACCEPTED", "APPEND"),
        (v2, "ACCEPTED", "COMPACT"),
    ]
    assert data[0]["commit"]["adds"][0]["stats"][0]["min"] == "2020-01-01"

    head = json.loads(segcat(config, "show", table_name, "--json").stdout)
    assert head["version"] == v2 and [s["segment_id"] for s in head["segments"]] == ["ab"]
    old = json.loads(segcat(config, "show", table_name, "--version", str(v1), "--json").stdout)
    assert sorted(s["segment_id"] for s in old["segments"]) == ["a", "b"]
    diff = segcat(config, "diff", table_name, str(v1), str(v2))
    assert "+1 load" in diff.stdout and "-2 unload" in diff.stdout


def test_diff_table_list_and_describe_answer_strict_json_named_as_the_python_api(
    config: Config, table_name: str
) -> None:
    """``diff``, ``table list`` and ``table describe`` had no --json (issue 20)."""
    from segcat import Catalog

    assert segcat(config, "table", "create", table_name).returncode == 0
    first = segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("a", "b")))
    v1 = int(first.stdout.rsplit("version", 1)[1])
    second = segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("c")))
    v2 = int(second.stdout.rsplit("version", 1)[1])

    diff = _object(segcat(config, "diff", table_name, str(v1), str(v2), "--json").stdout)
    expected = Catalog(config).load_table(table_name).diff(v1, v2)
    assert (diff["table"], diff["from_version"], diff["to_version"]) == (table_name, v1, v2)
    assert [s["segment_id"] for s in diff["added"]] == [s.segment_id for s in expected.added] == ["c"]
    assert (diff["added_count"], diff["removed_count"], diff["removed"]) == (1, 0, [])
    assert diff["truncated"] is False
    back = _object(segcat(config, "diff", table_name, str(v2), "-1", "--json", "--limit", "1").stdout)
    assert (back["removed_count"], len(back["removed"]), back["truncated"]) == (3, 1, True)

    listed = _object(segcat(config, "table", "list", "--json").stdout)
    assert table_name in listed["tables"]

    described = _object(segcat(config, "table", "describe", table_name, "--json").stdout)
    table = Catalog(config).load_table(table_name)
    assert described["table"] == table_name and described["head_offset"] == table.head_offset() == v2
    assert described["protocol"] == {
        "version": table.protocol().version,
        "features": list(table.protocol().features),
    }
    assert described["location"] == table.location()
    assert (described["dropped"], described["version"]) == (False, v2)
    topic = described["topic"]
    assert topic["name"] == f"segcat.{table_name}" and topic["partitions"] == 1
    assert topic["config"]["cleanup.policy"] == "compact"

    missing = segcat(config, "table", "describe", "no_such.table_here", "--json")
    assert missing.returncode == 4 and missing.stdout == "" and "TableNotFound" in missing.stderr
    beyond = segcat(config, "diff", table_name, "0", str(v2 + 5), "--json")
    assert beyond.returncode == 4 and beyond.stdout == "" and "VersionNotFound" in beyond.stderr


def test_a_losing_commit_exits_non_zero_with_the_rule(
    config: Config, table_name: str, tmp_path: Path
) -> None:
    segcat(config, "table", "create", table_name)
    segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("a")))
    again = segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("a")))
    assert again.returncode == 3  # conflict (README, "Exit codes")
    assert "CommitConflict" in again.stderr and "4-duplicate-segment" in again.stderr
    assert "Traceback" not in again.stderr


def test_a_column_type_change_exits_2_not_3(config: Config, table_name: str) -> None:
    """Issue 20 (smaller): rule 4d said "conflict, retry" (exit 3) though no retry can win."""
    segcat(config, "table", "create", table_name)
    segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("a")))
    text = _append_doc("b")
    text["adds"][0]["stats"] = [{"column": "d", "type": "STRING", "min": "a", "max": "b", "null_count": 0}]  # type: ignore[index]
    changed = segcat(config, "commit", table_name, "-", stdin=json.dumps(text))
    assert changed.returncode == 2, changed.stderr
    assert "ColumnTypeConflict" in changed.stderr and "4d-column-type-change" in changed.stderr
    assert "Traceback" not in changed.stderr


@pytest.mark.parametrize(
    ("args", "stdin", "message", "code"),
    [
        (("table", "create", "../etc"), None, "InvalidTableName", 2),
        (("table", "create", "NAME"), None, "TableAlreadyExists", 3),
        (("show", "nope.missing_table"), None, "TableNotFound", 4),
        (("commit", "nope.missing_table", "-"), json.dumps(_append_doc("a")), "TableNotFound", 4),
        (("commit", "NAME", "-"), "{not json", "not valid JSON", 2),
        (("commit", "NAME", "-"), json.dumps({"operation": "APPEND", "drops": ["x"]}), "MalformedCommit", 2),
        (("commit", "NAME", "-"), json.dumps({"operation": "EXPLODE"}), "MalformedCommit", 2),
        (
            ("commit", "NAME", "-"),
            json.dumps({"operation": "APPEND", "bogus": 1}),
            "unknown field 'bogus'",
            2,
        ),
        (("show", "NAME", "--as-of", "yesterday-ish"), None, "neither epoch milliseconds nor ISO-8601", 2),
        (("show", "NAME", "--version", "99999999999999999999"), None, "signed 64-bit integer", 2),
        (("show", "NAME", "--version", "5"), None, "VersionNotFound", 4),
        (("diff", "NAME", "12", "40"), None, "VersionNotFound", 4),
        (("watch", "NAME", "--from", "-5"), None, "must be at least -1", 2),
    ],
)
def test_bad_input_gets_a_clear_error_and_writes_nothing(
    config: Config, table_name: str, args: tuple[str, ...], stdin: str | None, message: str, code: int
) -> None:
    segcat(config, "table", "create", table_name)
    before = segcat(config, "log", table_name, "--json").stdout
    result = segcat(config, *(table_name if a == "NAME" else a for a in args), stdin=stdin)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert segcat(config, "log", table_name, "--json").stdout == before


def _object(text: str) -> dict[str, Any]:
    """One strict JSON object."""
    parsed = _strict(text)
    assert isinstance(parsed, dict), text
    return parsed


def _strict(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} in the output: not strict JSON")

    return json.loads(text, parse_constant=refuse)


def _segment(sid: str, **stats: object) -> dict[str, object]:
    return {"segment_id": sid, "path": f"data/{sid}.parquet", "size_bytes": 10, "row_count": 2, **stats}


def test_a_version_beyond_the_head_names_the_head(config: Config, table_name: str) -> None:
    segcat(config, "table", "create", table_name)
    segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("a")))
    head = json.loads(segcat(config, "show", table_name, "--json").stdout)["version"]
    result = segcat(config, "show", table_name, "--version", str(head + 10))
    assert result.returncode == 4
    assert "VersionNotFound" in result.stderr and f"ends at offset {head}" in result.stderr


def test_a_time_after_the_last_commit_answers_the_head_and_says_so(config: Config, table_name: str) -> None:
    segcat(config, "table", "create", table_name)
    segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc("a")))
    text = segcat(config, "show", table_name, "--as-of", "2099-01-01")
    assert text.returncode == 0, text.stderr
    assert "after the table's last record" in text.stderr
    as_json = segcat(config, "show", table_name, "--as-of", "2099-01-01T00:00:00Z", "--json")
    shown = json.loads(as_json.stdout)
    assert "after the table's last record" in shown["note"]
    assert [s["segment_id"] for s in shown["segments"]] == ["a"]


def test_show_json_lists_every_segment_unless_limited(config: Config, table_name: str) -> None:
    segcat(config, "table", "create", table_name)
    ids = [f"s{i:03d}" for i in range(60)]
    assert segcat(config, "commit", table_name, "-", stdin=json.dumps(_append_doc(*ids))).returncode == 0
    everything = json.loads(segcat(config, "show", table_name, "--json").stdout)
    assert (everything["live_segments"], everything["listed"], everything["truncated"]) == (60, 60, False)
    assert sorted(s["segment_id"] for s in everything["segments"]) == ids
    some = json.loads(segcat(config, "show", table_name, "--json", "--limit", "5").stdout)
    assert (some["live_segments"], some["listed"], some["truncated"], len(some["segments"])) == (
        60,
        5,
        True,
        5,
    )
    text = segcat(config, "show", table_name)
    assert "and 10 more (use --limit)" in text.stdout


def test_log_and_show_json_are_strict_json_with_non_finite_stats(config: Config, table_name: str) -> None:
    segcat(config, "table", "create", table_name)
    stats = [
        {"column": "f", "type": "FLOAT", "min": -1.5, "max": "Infinity", "null_count": 0, "nan_count": 1}
    ]
    doc = {"operation": "APPEND", "adds": [_segment("a", stats=stats)], "timestamp_ms": 1234}
    committed = segcat(config, "commit", table_name, "-", stdin=json.dumps(doc))
    assert committed.returncode == 0, committed.stderr
    lines = [_strict(line) for line in segcat(config, "log", table_name, "--json").stdout.splitlines()]
    (record,) = [r for r in lines if r["commit"]["operation"] == "APPEND"]  # type: ignore[index]
    commit = record["commit"]  # type: ignore[index]
    assert commit["timestamp_ms"] == 1234  # the file's timestamp is honoured
    assert (
        commit["adds"][0]["stats"][0]["max"] == "Infinity" and commit["adds"][0]["stats"][0]["nan_count"] == 1
    )
    shown = _strict(segcat(config, "show", table_name, "--json").stdout)
    assert shown["segments"][0]["stats"][0]["max"] == "Infinity"  # type: ignore[index]


def test_describe_and_upgrade_a_protocol_1_table(config: Config, table_name: str) -> None:
    from segcat.catalog.log.topics import TopicAdmin
    from segcat.catalog.protocol.names import TableName

    TopicAdmin(config).create(TableName.parse(table_name))  # a topic as segcat made them before protocols
    before = segcat(config, "table", "describe", table_name)
    assert before.returncode == 0, before.stderr
    assert "protocol: 1 (features: none)" in before.stdout and "cleanup.policy = compact" in before.stdout
    upgraded = segcat(config, "table", "upgrade", table_name)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "from protocol 1 to protocol 3" in upgraded.stdout
    after = segcat(config, "table", "describe", table_name)
    assert (
        "protocol: 3 (features: lifecycle)" in after.stdout
        and f"location: {config.warehouse}" in after.stdout
    )
    again = segcat(config, "table", "upgrade", table_name)
    assert again.returncode == 0 and "already at protocol 3" in again.stdout


def test_upgrade_refuses_a_table_holding_a_reserved_key_as_plain_text(
    config: Config, table_name: str
) -> None:
    """PROTOCOL §3b: one line, exit 2, nothing written, and the way out; then the upgrade goes."""
    from segcat.catalog.log.topics import TopicAdmin
    from segcat.catalog.protocol.names import TableName

    TopicAdmin(config).create(TableName.parse(table_name))
    plain = json.dumps({"operation": "SET_PROPERTIES", "table_properties": {"segcat.log.start": "7"}})
    assert segcat(config, "commit", table_name, "-", stdin=plain).returncode == 0
    refused = segcat(config, "table", "upgrade", table_name)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.count("\n") == 1 and "MalformedCommit" in refused.stderr
    assert "'segcat.log.start', set as plain text" in refused.stderr
    removal = json.dumps({"operation": "SET_PROPERTIES", "table_properties": {"segcat.log.start": None}})
    assert segcat(config, "commit", table_name, "-", stdin=removal).returncode == 0
    upgraded = segcat(config, "table", "upgrade", table_name)
    assert upgraded.returncode == 0 and "to protocol 3" in upgraded.stdout, upgraded.stderr


def test_sasl_against_a_plaintext_broker_points_at_the_security_settings(config: Config) -> None:
    result = segcat(
        config,
        "table",
        "list",
        env={
            "SEGCAT_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "SEGCAT_KAFKA_SASL_MECHANISM": "PLAIN",
            "SEGCAT_KAFKA_SASL_USERNAME": "user",
            "SEGCAT_KAFKA_SASL_PASSWORD": "secret-pw",
            "SEGCAT_REQUEST_TIMEOUT_S": "3",
        },
    )
    assert result.returncode == 5
    assert "security.protocol (SASL_PLAINTEXT)" in result.stderr and "stack up" not in result.stderr
    assert "secret-pw" not in result.stderr and "Traceback" not in result.stderr


def test_verbose_after_the_subcommand(config: Config, table_name: str) -> None:
    segcat(config, "table", "create", table_name)
    assert segcat(config, "show", table_name, "-v").returncode == 0
    assert segcat(config, "table", "list", "-vv").returncode == 0


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("script", "table", "code", "message"),
    [
        ("compaction.py", "nope.missing_table", 4, "TableNotFound"),
        ("stream_follower.py", "nope.missing_table", 4, "TableNotFound"),
        ("stream_follower.py", "bad..name", 2, "InvalidTableName"),
        ("daily_append.py", "ux_a.--help", 2, "InvalidTableName"),
    ],
)
def test_the_examples_fail_with_one_line(
    config: Config, script: str, table: str, code: int, message: str
) -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--table", table],
        env=_env(config),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr


@pytest.mark.spark
def test_spark_read_and_write_on_a_missing_table_raise_table_not_found(
    spark: SparkSession, config: Config
) -> None:
    """On the suite's one session (a session of its own here started the JVM without the S3
    server's keys, and the S3 test that came later failed in CI)."""
    import segcat.spark_integration as si
    from segcat.catalog.errors import TableNotFound

    df = spark.createDataFrame([(1, "x")], "id long, s string")
    with pytest.raises(TableNotFound):
        si.read(spark, "nope.missing_table", config=config)
    with pytest.raises(TableNotFound):
        si.write(df, "nope.missing_table", config=config)
