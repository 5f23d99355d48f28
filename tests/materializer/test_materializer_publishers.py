"""A publisher added to the service touches no other: registered from outside, it sees every
record's delta and the image after it, once per loader lifetime and in offset order; after a
restart the loader starts again from its newest key frame and hands over the records after it
again, identical. The built-in publishers' outputs stay those of a clean replay."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from segcat import Catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage.redis import RedisStore
from segcat.materializer.publisher import (
    CaughtUp,
    Loaded,
    Publisher,
    PublisherFactory,
    RecordDelta,
    TableDelta,
    TableImage,
)
from tests.materializer_support import (
    PrivateRedis,
    assert_outputs_match_clean_replay,
    bound_files,
    head_offset,
    materializer_config,
    namespace,
    replay_states,
    running_materializer,
    wait_for_head,
    wait_until_following,
    write_load,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

Seen = tuple[TableDelta | None, TableImage | None]
"""(delta, image) as published; (None, None) for ``close``."""


class Recorder(Publisher):
    """Records what it is handed; knows nothing of the other publishers."""

    name = "recorder"

    def __init__(self, out: list[Seen], lock: threading.Lock) -> None:
        self._out = out
        self._lock = lock

    def publish(self, delta: TableDelta, image: TableImage) -> None:
        with self._lock:
            self._out.append((delta, image))

    def close(self) -> None:
        with self._lock:
            self._out.append((None, None))


@pytest.fixture
def mconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    return materializer_config(config, private_redis.url, tmp_path / "warehouse", every=5)


def _recording(out: list[Seen]) -> PublisherFactory:
    lock = threading.Lock()
    return lambda table: Recorder(out, lock)


def _expected(state: TableState, log_id: str | None) -> TableImage:
    accepted = state.last_accepted_version
    return TableImage(
        state.table,
        log_id,
        state.version,
        accepted,
        state.last_accepted_timestamp_ms if accepted >= 0 else None,
        state.last_commit_id,
        state.live_count,
        state.live_bytes,
        state.live_rows,
        state.schema,
        dict(state.properties),
        state.protocol,
    )


def _check_run(seen: list[Seen], at: dict[int, TableState], log_id: str | None) -> list[RecordDelta]:
    """One loader lifetime: Loaded, then every record after its image once, in offset order, each
    with the image a clean replay has there; accepted versions chain; closed last. Its records."""
    assert seen, "the publisher was never called"
    loaded, start = seen[0]
    assert isinstance(loaded, Loaded) and start is not None
    empty = TableState(start.table)
    assert start == _expected(at.get(start.offset, empty), log_id)
    assert seen[-1] == (None, None), "close() is the last call"
    records = [delta for delta, _ in seen if isinstance(delta, RecordDelta)]
    offsets = [d.record.offset for d in records]
    assert offsets == list(range(start.offset + 1, start.offset + 1 + len(records)))
    previous = start.version
    for delta, image in seen[1:-1]:
        assert image is not None
        if isinstance(delta, RecordDelta):
            assert image == _expected(at[delta.record.offset], log_id)
            assert (delta.commit is not None) == (image.version == delta.record.offset)
            if delta.commit is not None:
                assert delta.commit.prev_version == previous
                previous = delta.commit.version
        else:
            assert isinstance(delta, CaughtUp)
    caught_up = [i for i, (delta, _) in enumerate(seen) if isinstance(delta, CaughtUp)]
    assert len(caught_up) <= 1
    lives = [d.live for d in records]
    assert lives == sorted(lives), "live once caught up, never back"
    return records


def test_a_registered_publisher_sees_every_delta_and_image_in_order_across_a_restart(
    mconfig: Config,
) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    store = RedisStore.from_config(mconfig)
    first: list[Seen] = []
    second: list[Seen] = []
    with running_materializer(mconfig, pattern, publishers=[_recording(first)]) as service:
        wait_until_following(service, name)
        write_load(mconfig, name, 12, 1)  # live, with conflicting compactions (REJECTED records)
        wait_for_head(store, name, head_offset(mconfig, name))
    write_load(mconfig, name, 9, 2)  # a backlog for the next instance to catch up
    with running_materializer(mconfig, pattern, publishers=[_recording(second)]):
        wait_for_head(store, name, head_offset(mconfig, name))
        write_load(mconfig, name, 4, 3)  # live again
        wait_for_head(store, name, head_offset(mconfig, name))
    end = head_offset(mconfig, name)
    _, at = replay_states(mconfig, name)
    log_id = bound_files(mconfig, name).log_id
    before = _check_run(first, at, log_id)
    after = _check_run(second, at, log_id)
    assert after[-1].record.offset == end
    assert any(isinstance(delta, CaughtUp) for delta, _ in second), "the backlog was caught up"
    # the restart starts from the newest key frame: the records after it come again, the same
    loaded = second[0][1]
    assert loaded is not None and loaded.table == TableName.parse(name).qualified
    assert loaded.offset <= before[-1].record.offset
    again = [d for d in after if d.record.offset <= before[-1].record.offset]
    assert [(d.record, d.verdict, d.commit) for d in again] == [
        (d.record, d.verdict, d.commit) for d in before if d.record.offset > loaded.offset
    ]
    offsets = sorted({d.record.offset for d in itertools.chain(before, after)})
    assert offsets == list(range(end + 1)), "every record of the log was published"
    assert_outputs_match_clean_replay(mconfig, name)
