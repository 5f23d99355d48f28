"""The public handle (issue 21, item 1): ``segcat.load_catalog()`` → ``Catalog`` → ``Table``.

Against the real stack: every method a user calls is reachable on one object, a handle that
only reads never opens a producer, keyword overrides are checked, and everything in
``segcat.__all__`` imports (errors included) with one name for a time argument: ``as_of``.
"""

from __future__ import annotations

import datetime as dt
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import segcat
from segcat import Catalog, Config, Operation, Table, load_catalog
from segcat.catalog import errors
from tests.factories import segment

TABLE_METHODS = (
    "append", "append_async", "commit", "submit", "new_commit", "commit_with_retry", "compact", "replace",
    "delete", "drop_partitions", "intent", "set_properties", "set_schema", "refresh", "snapshot",
    "resolve_version", "history", "records", "diff", "watch", "lease", "protocol", "location",
    "log_start", "head_offset", "prune_log", "vacuum", "upgrade_protocol", "close",
)  # fmt: skip
CATALOG_METHODS = (
    "create_table", "load_table", "table_exists", "list_tables", "drop_table", "undrop_table",
    "purge_table", "close",
)  # fmt: skip


def _public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every function of ``segcat.__all__`` and every public method (and constructor) of its classes."""
    for name in segcat.__all__:
        value = getattr(segcat, name)
        if inspect.isclass(value):
            yield f"{name}()", value
            for attr, member in inspect.getmembers(value):
                if not attr.startswith("_") and callable(member):
                    yield f"{name}.{attr}", member
        elif callable(value):
            yield name, value


def test_every_name_in_all_imports_and_is_listed_once() -> None:
    assert len(set(segcat.__all__)) == len(segcat.__all__)
    for name in segcat.__all__:
        assert getattr(segcat, name) is not None, name
    namespace: dict[str, Any] = {}
    exec("from segcat import *", namespace)
    assert set(segcat.__all__) <= set(namespace)


def test_every_error_is_importable_from_segcat() -> None:
    def subclasses(kind: type[BaseException]) -> set[type[BaseException]]:
        found = set(kind.__subclasses__())
        return found.union(*(subclasses(k) for k in found)) if found else found

    defined = {k for k in subclasses(errors.SegcatError) if k.__module__ == errors.__name__}
    defined.add(errors.SegcatError)
    for kind in defined:
        assert kind.__name__ in segcat.__all__, kind
        assert getattr(segcat, kind.__name__) is kind


def test_the_public_api_takes_a_time_as_as_of_never_as_of_ms() -> None:
    checked = 0
    for where, member in _public_callables():
        try:
            signature = inspect.signature(member)
        except (TypeError, ValueError):  # builtins without a signature (enum helpers, ...)
            continue
        checked += 1
        assert "as_of_ms" not in signature.parameters, where
    assert checked > 100


def test_as_of_is_one_type_in_the_handle_and_on_spark() -> None:
    import segcat.spark_integration as si

    for function in (Table.snapshot, Table.resolve_version, si.read):
        assert inspect.signature(function).parameters["as_of"].annotation == "AsOf | None", function
    for name in si.__all__:
        member = getattr(si, name)
        if callable(member) and not inspect.isclass(member):
            assert "as_of_ms" not in inspect.signature(member).parameters, name


def test_the_handle_offers_every_method_a_user_needs() -> None:
    for method in TABLE_METHODS:
        assert callable(getattr(Table, method, None)), method
    for method in CATALOG_METHODS:
        assert callable(getattr(Catalog, method, None)), method
    assert isinstance(Table.__dict__["name"], property) and isinstance(Table.__dict__["topic"], property)


def test_importing_segcat_loads_no_kafka_client() -> None:
    """``import segcat`` is light: the handle (and confluent_kafka, pyarrow) load on first use."""
    import subprocess

    code = "import sys, segcat; segcat.CommitConflict; print('confluent_kafka' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# ---------------------------------------------------------------------------- load_catalog


def test_keywords_override_the_environment_and_the_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    toml = tmp_path / "segcat.toml"
    toml.write_text(
        'bootstrap_servers = "file:9092"\nwarehouse = "/from/file"\n[kafka]\n"client.id" = "file"\n'
    )
    monkeypatch.setenv("SEGCAT_BOOTSTRAP_SERVERS", "env:9092")
    catalog = load_catalog(toml, warehouse=tmp_path / "kw", kafka={"client.id": "kw", "acks": "all"})
    assert catalog.config.bootstrap_servers == "env:9092"  # the environment wins over the file
    assert catalog.config.warehouse == str(tmp_path / "kw")  # a keyword over both (a Path is a path)
    assert dict(catalog.config.kafka) == {"client.id": "kw", "acks": "all"}
    assert load_catalog(toml, bootstrap_servers="kw:9092").config.bootstrap_servers == "kw:9092"


def test_an_unknown_keyword_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(segcat.InvalidArgument, match="unknown keyword argument 'bootstrap_server'"):
        load_catalog(bootstrap_server="x:9092")
    with pytest.raises(segcat.InvalidArgument, match="'stack'"):
        load_catalog(stack={})  # the local stack's section is no catalog setting


@pytest.mark.parametrize(
    ("keywords", "named"),
    [
        ({"replication_factor": "3"}, "keyword argument 'replication_factor' must be an integer"),
        ({"redis_cluster": "yes"}, "keyword argument 'redis_cluster' must be a boolean"),
        ({"warehouse": ""}, "keyword argument 'warehouse' must be a non-empty string"),
        ({"kafka": "acks=all"}, "keyword argument 'kafka' must be a mapping"),
        ({"kafka": {"acks": None}}, "keyword argument kafka\\['acks'\\] must be a string"),
    ],
)
def test_a_bad_keyword_value_is_a_config_error_naming_it(keywords: dict[str, Any], named: str) -> None:
    with pytest.raises(segcat.ConfigError, match=named):
        load_catalog(**keywords)


@pytest.mark.kafka
def test_writer_settings_are_checked_before_anything_is_created(config: Config, table_name: str) -> None:
    catalog = load_catalog(config)
    for bad in ({"max_in_flight": 0}, {"max_in_flight": True}, {"writer_id": ""}, {"writer_id": 7}):
        with pytest.raises(segcat.InvalidArgument):
            catalog.create_table(table_name, **bad)  # type: ignore[arg-type]
    assert not catalog.table_exists(table_name)


def test_a_config_and_keywords_together_are_refused(config: Config) -> None:
    with pytest.raises(segcat.InvalidArgument, match="not both"):
        load_catalog(config, warehouse="/x")
    with pytest.raises(segcat.InvalidArgument, match="a Config or a TOML file's path"):
        load_catalog(42)  # type: ignore[arg-type]
    assert load_catalog(config).config is config


# ---------------------------------------------------------------------------- against the stack


class _ProducerCount:
    """Counts the producers segcat opens toward a cluster (librdkafka settings checks, which
    never connect, are not counted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import confluent_kafka

        self.opened = 0
        real = confluent_kafka.Producer

        def counting(conf: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            if "bootstrap.servers" in conf:
                self.opened += 1
            return real(conf, *args, **kwargs)

        for module in list(sys.modules.values()):
            if module.__name__.startswith("segcat.") and getattr(module, "Producer", None) is real:
                monkeypatch.setattr(module, "Producer", counting)
        # the one write path's client factory, a default bound when the module was loaded
        from segcat.catalog.log.producer import SharedProducer

        defaults = SharedProducer.__init__.__kwdefaults__
        assert defaults is not None
        monkeypatch.setitem(defaults, "client_factory", counting)


@pytest.mark.kafka
@pytest.mark.redis
def test_a_handle_that_only_reads_opens_no_producer(
    config: Config, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = replace(config, request_timeout_s=28.0)  # a config whose producer no other test holds
    with load_catalog(own) as setup, setup.create_table(table_name) as writer:
        first = writer.append([segment("a")])
        writer.append([segment("b")])
    producers = _ProducerCount(monkeypatch)  # the setup catalog let go of its producer
    with load_catalog(own) as catalog:
        table = catalog.load_table(table_name)
        head = table.snapshot()
        table.snapshot(first)
        table.snapshot(as_of=dt.datetime.now(dt.UTC))
        table.resolve_version(as_of="2020-01-01T00:00:00Z")
        table.history()
        list(table.records())
        table.diff(first, head.version)
        table.protocol(), table.location(), table.log_start(), table.head_offset()
        with table.watch(from_version=-1, poll_s=0.05) as changes:
            assert next(iter(changes)).version == 0
        with table.lease(head.version, ttl_s=30) as held:
            assert held.held
        assert table.vacuum(dry_run=True).head == head.version
        assert producers.opened == 0
        table.append([segment("c")])
        table.append([segment("d")])
        assert producers.opened == 1  # the handle's writer, opened once, on the first write


@pytest.mark.kafka
@pytest.mark.redis
def test_every_method_is_reachable_on_one_handle(config: Config, table_name: str) -> None:
    with load_catalog(config) as catalog:
        table = catalog.create_table(table_name, writer_id="handle-test")
        assert catalog.table_exists(table_name) and not catalog.table_exists(f"{table_name}x")
        assert table.name in catalog.list_tables(namespace=table.name.namespace)
        assert table.topic.name == table.name and table.catalog is catalog
        v0 = table.append([segment("a", "p1"), segment("b", "p2")])
        v1 = table.commit(table.new_commit(Operation.APPEND, adds=[segment("c", "p1")]))
        v2 = table.submit(table.new_commit(Operation.APPEND, adds=[segment("d", "p3")])).result(timeout=30)
        v3 = table.append_async([segment("e", "p3")]).result(timeout=30)
        v4 = table.compact(["a", "c"], [segment("ac", "p1")])
        v5 = table.replace([segment("p2new", "p2")], scope=["p2"])
        v6 = table.delete(predicates=["id = 3"])
        v7 = table.drop_partitions(["p3"])
        v8 = table.set_properties({"owner": "team-a"})
        with table.intent("data/job/") as intent:
            v9 = intent.commit(table.new_commit(Operation.APPEND, adds=[segment("f", "p1")]))
        v10 = table.commit_with_retry(lambda image: None)
        assert v10 is None
        versions = [v0, v1, v2, v3, v4, v5, v6, v7, v8, v9]
        assert versions == sorted(versions) and len(set(versions)) == len(versions)
        assert [h.version for h in table.history()][-1] == v9
        assert table.snapshot(v4).segment_ids() == {"ac", "b", "d", "e"}
        assert table.snapshot().segment_ids() == {"ac", "p2new", "f"}
        assert table.snapshot().properties["owner"] == "team-a"
        assert table.diff(v4, v5).removed and table.diff(v4, v5).added
        assert table.upgrade_protocol() == table.snapshot().version  # at the current protocol already
        assert table.prune_log(dry_run=True).marker_version is None
        assert table.refresh().version >= v9
        dropped = catalog.drop_table(table_name)
        with pytest.raises(segcat.TableDropped):
            table.snapshot()
        assert catalog.undrop_table(table_name) > dropped
        catalog.drop_table(table_name)
        report = catalog.purge_table(table_name)
        assert report.topic_deleted and not catalog.table_exists(table_name)
        with pytest.raises(segcat.TableNotFound):
            catalog.load_table(table_name)


@pytest.mark.kafka
def test_closing_the_catalog_closes_its_tables(config: Config, table_name: str) -> None:
    catalog = load_catalog(config)
    table = catalog.create_table(table_name)
    table.append([segment("a")])
    with catalog:
        pass
    with pytest.raises(segcat.InvalidArgument, match="closed"):
        table.append([segment("b")])
    with pytest.raises(segcat.InvalidArgument, match="catalog is closed"):
        catalog.load_table(table_name)
    assert load_catalog(config).load_table(table_name).snapshot().segment_ids() == {"a"}
