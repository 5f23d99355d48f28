"""``segcat serve``'s Iceberg REST catalog (``/iceberg``, docs/HTTP_API.md) read by clients that do not
know segcat: pyiceberg's REST catalog and DuckDB's ``ATTACH ... (TYPE iceberg)``, on a real broker and
Redis; its errors, 405s, tokens and HEAD checked with httpx.

The Iceberg tables are pyiceberg's own (``tests.iceberg_support``), published as the materializer's
Iceberg publisher does: the metadata at ``<log dir>/iceberg/metadata/v<V>.metadata.json`` and the
pointer in Redis.
"""

from __future__ import annotations

import os
import pathlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError

from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError
from segcat.catalog.iceberg.layout import metadata_path
from segcat.catalog.iceberg.pointer import IcebergPointer, write_pointer
from segcat.catalog.read.table import TableReader, Tables
from segcat.catalog.storage.redis import RedisStore
from segcat.server.iceberg_api import keep_referenced_snapshots, page_of
from segcat.server.iceberg_config import reader_config
from segcat.server.settings import ServeSettings
from tests.iceberg_support import block_first, iceberg_table, publish
from tests.server_support import serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

TOKEN = "iceberg-test-token-" + uuid.uuid4().hex
BEARER = {"Authorization": f"Bearer {TOKEN}"}
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})
MORE = pa.table({"id": pa.array([4, 5], pa.int64()), "name": pa.array(["d", "e"])})
BLOCK_REASON = "a tombstone's predicate cannot be evaluated (UnsupportedPredicate)"
WRITE_NAMES = ("segcat.write", "si.write", "Spark sink", "Table.append")


@dataclass(frozen=True)
class Served:
    url: str
    ns: str
    config: Config
    published: tuple[str, ...]

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        kwargs["headers"] = {**BEARER, **kwargs.get("headers", {})}
        return httpx.get(self.url + path, timeout=60, **kwargs)

    def table_path(self, table: str) -> str:
        return f"/iceberg/v1/namespaces/{self.ns}/tables/{table}"


def iceberg_error(response: httpx.Response, status: int, kind: str) -> str:
    """The body is Iceberg's ``{"error": {"message", "type", "code"}}``; returns the message."""
    assert response.status_code == status, (response.request.url, response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "code"}, body
    assert body["error"]["type"] == kind and body["error"]["code"] == status, body
    message: str = body["error"]["message"]
    assert message and "Traceback" not in message and "/tmp" not in message, message
    return message


@pytest.fixture(scope="module")
def served(config: Config) -> Iterator[Served]:
    """One namespace of tables in every state a pointer can say, and a server with a token."""
    ns = f"ice{uuid.uuid4().hex[:10]}"
    tables = Tables(config)
    redis = RedisStore.from_config(config)
    store = tables.store

    def create(stem: str) -> TableReader:
        return tables.create_table(f"{ns}.{stem}")

    pub = create("pub")
    publish(pub, store, redis, iceberg_table(pub, store, ROWS, MORE), 0)
    blocked = create("blocked")
    publish(blocked, store, redis, iceberg_table(blocked, store, ROWS), 0, blocked=(1, BLOCK_REASON))
    block_first(create("firstblocked"), redis, 0, BLOCK_REASON)
    create("unpublished")
    dropped = create("dropped")
    dropped.drop()
    broken = create("broken")
    publish(broken, store, redis, iceberg_table(broken, store, ROWS), 0)
    assert broken.files is not None
    store.put(metadata_path(broken.files, 0), b"{not json")
    missing = create("missing")
    publish(missing, store, redis, iceberg_table(missing, store, ROWS), 0)
    assert missing.files is not None
    store.delete(metadata_path(missing.files, 0))
    other_log = create("otherlog")
    write_pointer(
        redis, other_log.name, IcebergPointer("A" * 22, 0, "/elsewhere/v0.metadata.json", None, None, 0)
    )
    with serving(config, token=TOKEN) as url:
        yield Served(url, ns, config, ("blocked", "broken", "missing", "pub"))


# ---------------------------------------------------------------------------- readers


def test_pyiceberg_lists_loads_and_scans_through_the_rest_catalog(served: Served) -> None:
    rest = load_catalog("segcat", type="rest", uri=served.url + "/iceberg", token=TOKEN)
    assert (served.ns,) in rest.list_namespaces()
    assert rest.namespace_exists(served.ns)
    assert not rest.namespace_exists(f"no{served.ns}")
    assert rest.list_tables(served.ns) == [(served.ns, t) for t in served.published]
    table = rest.load_table(f"{served.ns}.pub")
    assert table.properties["segcat.version"] == "0"
    rows = table.scan().to_arrow().sort_by("id")
    assert rows.to_pydict() == pa.concat_tables([ROWS, MORE]).to_pydict()
    assert rest.table_exists(f"{served.ns}.pub")
    assert not rest.table_exists(f"{served.ns}.unpublished")
    with pytest.raises(NoSuchTableError, match="no Iceberg metadata yet"):
        rest.load_table(f"{served.ns}.unpublished")
    with pytest.raises(NotImplementedError):  # config's endpoints name no write: refused client-side
        rest.create_table(f"{served.ns}.new", ROWS.schema)


def _duckdb_extension(name: str) -> pathlib.Path | None:
    """A DuckDB extension shipped by the ``duckdb-ext-<name>`` package (DuckDB cannot download it
    offline; other-engines notes)."""
    import duckdb_ext

    for root in duckdb_ext.__path__:
        for found in pathlib.Path(root).glob(f"extensions/v1.4.4/*/{name}.duckdb_extension"):
            return found
    return None


def test_duckdb_attaches_the_rest_catalog_and_reads_the_rows(served: Served) -> None:
    import duckdb

    extensions = {name: _duckdb_extension(name) for name in ("httpfs", "avro", "parquet", "iceberg")}
    absent = [name for name, path in extensions.items() if path is None]
    if absent and not os.environ.get("CI"):
        pytest.skip(f"install the dev extras: no duckdb-ext-{', '.join(absent)}")
    assert not absent, f"the dev extras install duckdb-ext-{absent[0]}"
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for path in extensions.values():
        con.execute(f"LOAD '{path}'")
    con.execute(f"CREATE SECRET segcat_token (TYPE iceberg, TOKEN '{TOKEN}')")
    con.execute(
        f"ATTACH 'segcat' AS lake (TYPE iceberg, ENDPOINT '{served.url}/iceberg', SECRET segcat_token)"
    )
    rows = con.execute(f"SELECT id, name FROM lake.{served.ns}.pub ORDER BY id").fetchall()
    assert rows == list(zip(*pa.concat_tables([ROWS, MORE]).to_pydict().values(), strict=True))


# ---------------------------------------------------------------------------- answers


def test_config_lists_only_the_read_endpoints(served: Served) -> None:
    body = served.get("/iceberg/v1/config?warehouse=anything").json()
    assert body["defaults"] == {} and body["overrides"] == {}
    assert body["endpoints"] and all(e.split()[0] in ("GET", "HEAD") for e in body["endpoints"])
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in body["endpoints"]


def test_load_table_answers_the_metadata_file_and_no_storage_config_for_a_local_warehouse(
    served: Served,
) -> None:
    response = served.get(served.table_path("pub"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"metadata-location", "metadata", "config"}
    assert body["metadata-location"].endswith("/iceberg/metadata/v0.metadata.json")
    assert body["config"] == {}
    assert len(body["metadata"]["snapshots"]) == 2
    assert "X-Segcat-Iceberg-Blocked-Version" not in response.headers
    refs = served.get(served.table_path("pub") + "?snapshots=refs").json()["metadata"]
    assert [s["snapshot-id"] for s in refs["snapshots"]] == [refs["current-snapshot-id"]]
    assert (
        served.get(served.table_path("pub") + "?snapshots=all").json()["metadata"]["snapshots"]
        == (body["metadata"]["snapshots"])
    )
    iceberg_error(served.get(served.table_path("pub") + "?snapshots=some"), 400, "BadRequestException")


def test_an_etag_answers_304_while_the_pointer_stays(served: Served) -> None:
    first = served.get(served.table_path("pub"))
    etag = first.headers["ETag"]
    again = served.get(served.table_path("pub"), headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert served.get(served.table_path("pub"), headers={"If-None-Match": '"other"'}).status_code == 200
    assert served.get(served.table_path("pub") + "?snapshots=refs").headers["ETag"] != etag


def test_a_blocked_head_serves_the_last_published_version_and_says_why(served: Served) -> None:
    response = served.get(served.table_path("blocked"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert response.headers["X-Segcat-Iceberg-Blocked-Version"] == "1"
    assert body["config"]["segcat.iceberg.blocked-version"] == "1"
    assert body["config"]["segcat.iceberg.blocked-reason"] == BLOCK_REASON
    assert body["metadata"]["properties"]["segcat.version"] == "0"


def test_a_table_without_metadata_is_404_saying_why(served: Served) -> None:
    cases = {
        "unpublished": "no Iceberg metadata yet",
        "dropped": "is dropped",
        "firstblocked": BLOCK_REASON,
        "otherlog": "no Iceberg metadata yet",  # a pointer of another log is no pointer
        "nosuchtable": "does not exist",
    }
    for table, why in cases.items():
        message = iceberg_error(served.get(served.table_path(table)), 404, "NoSuchTableException")
        assert why in message, (table, message)
        head = httpx.head(served.url + served.table_path(table), headers=BEARER, timeout=60)
        assert head.status_code == 404, table
    assert httpx.head(served.url + served.table_path("pub"), headers=BEARER, timeout=60).status_code == 204


def test_one_tables_unreadable_metadata_answers_that_request_only(served: Served) -> None:
    message = iceberg_error(served.get(served.table_path("broken")), 500, "InternalServerError")
    assert "unreadable" in message
    message = iceberg_error(served.get(served.table_path("missing")), 503, "ServiceUnavailableException")
    assert "missing" in message
    assert served.get(served.table_path("pub")).status_code == 200


def test_namespaces_exist_by_their_tables_and_have_one_level(served: Served) -> None:
    ns = served.ns
    assert served.get(f"/iceberg/v1/namespaces/{ns}").json() == {"namespace": [ns], "properties": {}}
    assert httpx.head(f"{served.url}/iceberg/v1/namespaces/{ns}", headers=BEARER).status_code == 204
    for path in (f"/iceberg/v1/namespaces/no{ns}", f"/iceberg/v1/namespaces/no{ns}/tables"):
        iceberg_error(served.get(path), 404, "NoSuchNamespaceException")
    assert httpx.head(f"{served.url}/iceberg/v1/namespaces/no{ns}", headers=BEARER).status_code == 404
    nested = f"/iceberg/v1/namespaces/{ns}%1Fchild"
    assert "one level" in iceberg_error(served.get(nested), 404, "NoSuchNamespaceException")
    assert served.get(f"/iceberg/v1/namespaces?parent={ns}").json()["namespaces"] == []
    iceberg_error(served.get(f"/iceberg/v1/namespaces?parent=no{ns}"), 404, "NoSuchNamespaceException")
    message = iceberg_error(
        served.get("/iceberg/v1/namespaces/bad%20name/tables"), 400, "BadRequestException"
    )
    assert "namespace" in message
    iceberg_error(served.get(f"/iceberg/v1/namespaces/{ns}/tables/bad%20name"), 400, "BadRequestException")


def test_pages_walk_every_namespace_and_table_once(served: Served) -> None:
    """Other tests create and drop namespaces meanwhile on the shared broker: the walk is checked for
    order, no repeats and this module's namespace, not against one listing."""
    everything = served.get("/iceberg/v1/namespaces").json()
    assert everything["next-page-token"] is None and [served.ns] in everything["namespaces"]
    size = max(len(everything["namespaces"]) // 3, 1)
    walked: list[list[str]] = []
    query = f"pageSize={size}"
    for _ in range(10):
        page = served.get(f"/iceberg/v1/namespaces?{query}").json()
        assert len(page["namespaces"]) <= size
        walked += page["namespaces"]
        if page["next-page-token"] is None:
            break
        query = f"pageSize={size}&pageToken={page['next-page-token']}"
    assert walked == sorted(walked) and len({ns[0] for ns in walked}) == len(walked)
    assert [served.ns] in walked
    tables: list[str] = []
    query = "pageSize=2"
    for _ in range(10):
        page = served.get(f"/iceberg/v1/namespaces/{served.ns}/tables?{query}").json()
        tables += [entry["name"] for entry in page["identifiers"]]
        assert all(entry["namespace"] == [served.ns] for entry in page["identifiers"])
        if page["next-page-token"] is None:
            break
        query = f"pageSize=2&pageToken={page['next-page-token']}"
    assert tuple(tables) == served.published
    iceberg_error(served.get("/iceberg/v1/namespaces?pageSize=0"), 400, "BadRequestException")


# ---------------------------------------------------------------------------- refused


WRITES = (
    ("POST", "/iceberg/v1/namespaces"),
    ("POST", "/iceberg/v1/namespaces/{ns}/properties"),
    ("DELETE", "/iceberg/v1/namespaces/{ns}"),
    ("POST", "/iceberg/v1/namespaces/{ns}/tables"),
    ("POST", "/iceberg/v1/namespaces/{ns}/tables/pub"),
    ("DELETE", "/iceberg/v1/namespaces/{ns}/tables/pub?purgeRequested=true"),
    ("POST", "/iceberg/v1/namespaces/{ns}/register"),
    ("POST", "/iceberg/v1/tables/rename"),
    ("POST", "/iceberg/v1/transactions/commit"),
    ("POST", "/iceberg/v1/namespaces/{ns}/tables/pub/metrics"),
    ("PUT", "/iceberg/v1/namespaces/{ns}/tables/pub"),
    ("PATCH", "/iceberg/v1/config"),
)


def test_every_write_is_405_naming_segcats_write_paths(served: Served) -> None:
    for method, path in WRITES:
        response = httpx.request(
            method, served.url + path.format(ns=served.ns), headers=BEARER, json={"any": "body"}, timeout=60
        )
        message = iceberg_error(response, 405, "UnsupportedOperationException")
        assert all(name in message for name in WRITE_NAMES), (method, path, message)
        assert response.headers["Allow"] == "GET, HEAD"
    assert served.get(served.table_path("pub")).status_code == 200  # nothing was written


def test_tokens_are_checked_and_refused_in_icebergs_body(served: Served) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}):
        for path in ("/iceberg/v1/config", served.table_path("pub"), "/iceberg/v1/namespaces"):
            response = httpx.get(served.url + path, headers=headers, timeout=60)
            assert "token" in iceberg_error(response, 401, "NotAuthorizedException")
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
    response = httpx.post(served.url + "/iceberg/v1/tables/rename", json={}, timeout=60)
    iceberg_error(response, 401, "NotAuthorizedException")  # the token first: no hint of what exists
    query = httpx.get(f"{served.url}/iceberg/v1/config?token={TOKEN}", timeout=60, follow_redirects=False)
    iceberg_error(query, 401, "NotAuthorizedException")  # no cookie login for Iceberg clients
    unknown = served.get("/iceberg/v1/namespaces/x/views")
    iceberg_error(unknown, 404, "NotFoundException")


def test_without_a_token_foreign_host_names_are_refused_in_icebergs_body(config: Config) -> None:
    with serving(config) as url:
        response = httpx.get(url + "/iceberg/v1/config", headers={"Host": "evil.example"}, timeout=60)
        assert "Host" in iceberg_error(response, 400, "BadRequestException")
        assert httpx.get(url + "/iceberg/v1/config", timeout=60).status_code == 200


def test_a_redis_that_is_away_answers_503_not_a_traceback(served: Served) -> None:
    away = served.config.with_services(served.config.bootstrap_servers, "redis://127.0.0.1:1/0")
    with serving(away, token=TOKEN) as url:
        for path in (served.table_path("pub"), f"/iceberg/v1/namespaces/{served.ns}/tables"):
            response = httpx.get(url + path, headers=BEARER, timeout=60)
            iceberg_error(response, 503, "ServiceUnavailableException")


# ---------------------------------------------------------------------------- storage config


def test_the_storage_config_hands_out_credentials_only_when_told() -> None:
    local = Config.load(env={"SEGCAT_WAREHOUSE": "/data/warehouse"})
    assert (
        reader_config(local, credentials=True, env={"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})
        == {}
    )
    s3 = Config.load(
        env={"SEGCAT_WAREHOUSE": "s3://bucket/wh", "SEGCAT_S3_ENDPOINT": "http://127.0.0.1:9000"}
    )
    env = {"AWS_ACCESS_KEY_ID": "key", "AWS_SECRET_ACCESS_KEY": "secret"}
    plain = reader_config(s3, credentials=False, env=env)
    assert plain == {
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.path-style-access": "true",
        "s3.region": "us-east-1",
    }
    handed = reader_config(s3, credentials=True, env={**env, "AWS_REGION": "eu-west-1"})
    assert handed["s3.access-key-id"] == "key" and handed["s3.secret-access-key"] == "secret"
    assert handed["s3.region"] == "eu-west-1" and "s3.session-token" not in handed
    aws = Config.load(env={"SEGCAT_WAREHOUSE": "s3://bucket/wh"})
    assert reader_config(aws, credentials=False, env={}) == {}
    with pytest.raises(ConfigError, match="needs a token"):
        ServeSettings(iceberg_credentials=True).check()
    ServeSettings(iceberg_credentials=True, token=TOKEN).check()


# ---------------------------------------------------------------------------- fuzzed


ICEBERG_PATHS = (
    "/iceberg/v1/config",
    "/iceberg/v1/namespaces",
    "/iceberg/v1/namespaces/{ns}",
    "/iceberg/v1/namespaces/{ns}/tables",
    "/iceberg/v1/namespaces/{ns}/tables/{t}",
    "/iceberg/v1/namespaces/{ns}/views",
    "/iceberg/v1/{t}",
)
fuzz_text = st.text(max_size=40)


@st.composite
def iceberg_requests(draw: st.DrawFn) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """(method, path with names filled in, query, headers): names this module's, others or junk."""
    method = draw(st.sampled_from(["GET", "GET", "HEAD", "POST", "DELETE"]))
    ns = draw(st.one_of(st.just("{own}"), st.just("{own}%1Fx"), fuzz_text.map(lambda s: quote(s, safe=""))))
    table = draw(
        st.one_of(st.sampled_from(["pub", "blocked", "unpublished", "dropped", "nosuch"]), fuzz_text)
    )
    path = draw(st.sampled_from(ICEBERG_PATHS)).replace("{t}", quote(table, safe="")).replace("{ns}", ns)
    names = ["pageToken", "pageSize", "parent", "snapshots", "warehouse", "token"]
    query = draw(st.dictionaries(st.sampled_from(names), st.one_of(fuzz_text, st.integers(-3, 3).map(str))))
    headers = {"Authorization": f"Bearer {TOKEN}"} if draw(st.integers(0, 5)) else {}
    if draw(st.booleans()):
        headers["If-None-Match"] = draw(fuzz_text)
    return method, path, query, headers


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=iceberg_requests())
def test_every_iceberg_answer_is_a_success_or_a_typed_4xx(
    served: Served, drawn: tuple[str, str, dict[str, str], dict[str, str]]
) -> None:
    method, path, query, headers = drawn
    path = path.replace("{own}", served.ns)
    sent = {k: "".join(c if 32 <= ord(c) < 127 else quote(c) for c in v).strip() for k, v in headers.items()}
    started = time.monotonic()
    response = httpx.request(method, served.url + path, params=query, headers=sent, timeout=30)
    assert time.monotonic() - started < 15, (method, path, query)
    assert response.status_code < 500, (method, path, query, response.text[:300])
    if response.status_code >= 400 and method != "HEAD":
        document = response.json()
        assert set(document) == {"error"} and set(document["error"]) == {"message", "type", "code"}
        assert document["error"]["code"] == response.status_code
        assert "Traceback" not in document["error"]["message"]


@given(
    items=st.lists(st.from_regex(r"[a-z0-9_]{1,6}", fullmatch=True), unique=True).map(sorted),
    size=st.integers(1, 7),
)
def test_pages_hold_every_item_once_in_order(items: list[str], size: int) -> None:
    walked: list[str] = []
    token: str | None = None
    for _ in range(len(items) + 1):
        page, token = page_of(items, token, size)
        assert len(page) <= size
        walked += page
        if token is None:
            break
    assert walked == items
    assert page_of(items, None, None) == (items, None)


def test_refs_keep_the_snapshots_a_branch_or_tag_names() -> None:
    metadata: dict[str, Any] = {
        "current-snapshot-id": 3,
        "refs": {"main": {"snapshot-id": 3, "type": "branch"}, "v1": {"snapshot-id": 1, "type": "tag"}},
        "snapshots": [{"snapshot-id": n} for n in (1, 2, 3)],
    }
    keep_referenced_snapshots(metadata)
    assert [s["snapshot-id"] for s in metadata["snapshots"]] == [1, 3]
