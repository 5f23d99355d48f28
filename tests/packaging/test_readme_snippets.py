"""README.md's Python and Spark snippets run as written, against the real services (issue 7, item 16).

Each snippet is taken from the README at test time and run in a fresh interpreter with
only the environment a user would have; the tests replace nothing but the table names
(so runs never collide) and append a few checks of what the snippet produced.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import segcat
from segcat import load_catalog
from segcat.catalog.config import Config

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.DOTALL | re.MULTILINE)


def snippet(marker: str) -> str:
    (block,) = [b for b in python_blocks() if marker in b]
    return block


def run(config: Config, code: str, tmp_path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SEGCAT_")},
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
    }
    script = tmp_path / "snippet.py"
    script.write_text(code)
    return subprocess.run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=timeout
    )


def test_the_readme_has_the_four_snippets() -> None:
    assert len(python_blocks()) == 4
    assert 'type="rest"' in snippet("pyiceberg")
    assert "table.compact" in snippet("table.compact") and "si.write" in snippet("si.write")
    assert "table.scan" in snippet("segcat.write(")


def test_the_python_snippet_runs_as_written(config: Config, table_name: str, tmp_path: Path) -> None:
    code = snippet("table.compact").replace('"sales.orders"', repr(table_name))
    code += """
assert snap.version == head, (snap.version, head)
assert sorted(snap.segment_ids()) == ["ab", "c"]
assert sorted(snap.prune(col("day") >= day2).segment_ids()) == ["c"]
assert [h.commit.operation.value for h in table.history()][-3:] == ["APPEND", "APPEND", "COMPACT"]
print("README snippet ok")
"""
    result = run(config, code, tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "README snippet ok" in result.stdout


def test_the_arrow_snippet_runs_as_written(config: Config, table_name: str, tmp_path: Path) -> None:
    code = snippet("segcat.write(").replace('"sales.events"', repr(table_name))
    code += """
assert rows.to_pylist() == [{"id": 2}], rows
print("README Arrow snippet ok")
"""
    result = run(config, code, tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "README Arrow snippet ok" in result.stdout


@pytest.mark.spark
def test_the_spark_snippet_runs_as_written(config: Config, table_name: str, tmp_path: Path) -> None:
    code = snippet("si.write").replace('"sales.daily"', repr(table_name))
    code += """
assert recent.count() == 1 and recent.first()["id"] == 2
assert rows.isStreaming and rows.columns == ["id", "day", "amount"]
spark.stop()
print("README Spark snippet ok")
"""
    result = run(config, code, tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "README Spark snippet ok" in result.stdout


def test_the_iceberg_snippet_runs_as_written(mconfig: Config, tmp_path: Path) -> None:
    """pyiceberg through ``segcat serve``'s ``/iceberg``, as the README shows it."""
    from tests.iceberg_publisher_support import wait_for_pointer
    from tests.materializer_support import namespace, running_materializer, wait_until_following
    from tests.server_support import serving

    ns, pattern = namespace()
    name = f"{ns}.orders"
    data = pa.table({"id": [1, 2, 3]})
    with (
        load_catalog(mconfig).create_table(name) as table,
        running_materializer(mconfig, pattern) as service,
        serving(mconfig) as url,
    ):
        wait_until_following(service, name)
        version = segcat.write(table, data)
        wait_for_pointer(mconfig, name, table.topic.topic_id, version)
        code = (
            snippet("pyiceberg").replace("http://127.0.0.1:8765", url).replace('"sales.orders"', repr(name))
        )
        code = code.replace(".scan().to_arrow()", ".scan().to_arrow().sort_by('id').to_pylist()")
        lines = code.rstrip().splitlines()
        lines[-1] = f"rows = {lines[-1]}"
        code = (
            "\n".join(lines)
            + "\nassert rows == [{'id': 1}, {'id': 2}, {'id': 3}], rows\nprint('README Iceberg snippet ok')\n"
        )
        result = run(mconfig, code, tmp_path, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "README Iceberg snippet ok" in result.stdout
