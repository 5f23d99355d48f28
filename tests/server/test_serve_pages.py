"""``GET /api/tables`` in pages (docs/HTTP_API.md): name order, an opaque ``next`` cursor, one
pipelined Redis read of the heads per page, and 400s naming the field for bad input."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.storage.redis import Head, RedisStore
from segcat.server.redis_gate import TimeBoxedRedis
from segcat.server.table_directory import TableDirectory
from tests.factories import segment
from tests.materializer_support import namespace, running_materializer, wait_for_head
from tests.server_support import serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def test_pages_walk_a_namespace_in_order_with_one_heads_read_each(
    mconfig: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, pattern = namespace()
    names = [f"{ns}.t{i}" for i in range(7)]
    catalog = Catalog(mconfig)
    for name in reversed(names):
        catalog.create_table(name)
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern):
        heads = {}
        for name in names[::2]:
            with load_catalog(mconfig).load_table(name) as writer:
                heads[name] = writer.append([segment("a", rows=5)])
        for name in names:
            wait_for_head(store, name, heads.get(name, 0))

    reads: list[int] = []
    real = TimeBoxedRedis.heads

    def counted(self: TimeBoxedRedis, tables: Any) -> dict[str, Head | None]:
        reads.append(len(tables))
        return real(self, tables)

    def per_table(self: TimeBoxedRedis, table: Any) -> Head | None:
        raise AssertionError("a page read one head by itself")

    monkeypatch.setattr(TimeBoxedRedis, "heads", counted)
    monkeypatch.setattr(TimeBoxedRedis, "head", per_table)
    with serving(mconfig) as url:
        listed: list[dict[str, Any]] = []
        cursor: str | None = None
        pages = 0
        while True:
            params = {"namespace": ns, "limit": "3", **({} if cursor is None else {"cursor": cursor})}
            body = httpx.get(f"{url}/api/tables", params=params, timeout=120).json()
            pages += 1
            assert len(body["tables"]) <= 3
            listed.extend(body["tables"])
            cursor = body["next"]
            if cursor is None:
                break
            assert ns not in cursor  # opaque
        whole = httpx.get(f"{url}/api/tables", params={"namespace": ns}, timeout=120).json()
    assert pages == 3 and reads == [3, 3, 1, 7]
    assert [entry["table"] for entry in listed] == names
    assert whole["next"] is None and whole["tables"] == listed
    for entry in listed:
        assert entry["version"] == heads.get(entry["table"], 0) == entry["log_end"]
        assert entry["materializer_lag"] == 0 and "error" not in entry


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"cursor": "ns.t"}, "cursor"),
        ({"cursor": "t1.%%%"}, "cursor"),
        ({"cursor": "x" * 1000}, "cursor"),
    ],
)
def test_bad_paging_input_is_a_400_naming_the_field(
    config: Config, params: dict[str, str], field: str
) -> None:
    with serving(config) as url:
        response = httpx.get(f"{url}/api/tables", params=params, timeout=60)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_argument"
    assert response.json()["message"].startswith(f"{field}: ")


def test_a_table_redis_holds_no_head_of_is_listed_without_reading_its_log(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/HTTP_API.md: ``activity`` is null for a table Redis holds no head of. The list replayed
    the last minute of each such table (a log read per table: a page of 1,000 took 14 s on a
    broker the materializer had not reached)."""
    ns, _ = namespace()
    name = f"{ns}.cold"
    Catalog(config).create_table(name)
    with load_catalog(config).load_table(name) as writer:
        writer.append([segment("a")])
    opened: list[str] = []
    real = TableDirectory.open

    def counted(self: TableDirectory, table: str) -> Any:
        opened.append(table)
        return real(self, table)

    monkeypatch.setattr(TableDirectory, "open", counted)
    with serving(config) as url:
        body = httpx.get(f"{url}/api/tables", params={"namespace": ns}, timeout=120).json()
    (entry,) = body["tables"]
    assert entry["table"] == name and entry["log_end"] == 1
    assert entry["version"] is None and entry["activity"] is None
    assert opened == [name]  # described (a misconfigured topic says why), its log not read
