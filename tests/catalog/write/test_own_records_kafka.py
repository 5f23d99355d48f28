"""A writer judges its own records by the commits it holds, on a real broker.

Its own records are not decoded (the codec round trip is exact for them,
tests/catalog/protocol/test_codec.py), and its image is still exactly a fresh replay's; a record
at the offset of one of ours that is not byte for byte ours is decoded like any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from unittest import mock

import pytest

from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.model import ColumnStats, ColumnType, LogRecord, Operation, Segment
from segcat.catalog.protocol.replay import replay
from segcat.catalog.protocol.state import TableState
from segcat.catalog.write.writer import Writer
from tests.factories import segment

pytestmark = pytest.mark.kafka


@pytest.fixture
def decodes() -> Iterator[list[str]]:
    """The commit ids of every record the rules decode meanwhile."""
    seen: list[str] = []
    real = codec.decode_commit

    def counting(value: bytes) -> rules.Commit:
        commit = real(value)
        seen.append(commit.commit_id)
        return commit

    with mock.patch.object(rules.codec, "decode_commit", counting):
        yield seen


def test_a_writer_does_not_decode_its_own_records(config: Config, table: Table, decodes: list[str]) -> None:
    with Writer(config, table.name) as writer:
        writer.refresh()
        decodes.clear()
        futures = [writer.append_async([segment(f"s{i}")]) for i in range(40)]
        versions = [f.result(timeout=60) for f in futures]
        versions.append(writer.append([segment("last")]))
        assert decodes == []
        image = writer.refresh()
    with LogReader(config, table.name) as reader:
        fresh = replay(reader.read(0), TableState(table.name.qualified))
    assert sorted(versions) == versions and len(set(versions)) == len(versions)
    assert image == fresh
    assert image.fingerprint() == fresh.fingerprint()


def test_a_commit_the_codec_would_normalise_is_decoded(
    config: Config, table: Table, decodes: list[str]
) -> None:
    integral = ColumnStats("x", ColumnType.FLOAT, 1, 2, 0)  # stored as 1.0, 2.0
    with Writer(config, table.name) as writer:
        writer.refresh()
        decodes.clear()
        commit = writer.new_commit(
            Operation.APPEND, adds=[Segment("f", "data/f.parquet", 1, 1, stats=(integral,))]
        )
        assert not codec.round_trips_exactly(commit)
        writer.commit(commit)
        assert decodes == [commit.commit_id]
        held = writer.state.segments["f"].segment.stats[0]
        assert type(held.min) is float


def test_only_the_very_bytes_at_the_reported_offset_are_taken_as_ours(config: Config, table: Table) -> None:
    from segcat.catalog.log.pipeline import CommitFuture, InFlight
    from segcat.catalog.protocol.rules import Prechecked

    with Writer(config, table.name) as writer:
        commit = writer.new_commit(Operation.APPEND, adds=[segment("a")])
        key, value = commit.commit_id.encode(), codec.encode_commit(commit)
        checked = Prechecked(commit, table.name.qualified, 0, 1)
        entry = InFlight(commit.commit_id, key, value, CommitFuture(), 1, offset=7, prechecked=checked)
        pipeline = writer._pipeline
        with pipeline.lock:
            pipeline._delivered[commit.commit_id] = entry
            try:
                assert pipeline._own(LogRecord(7, 0, key, value)) is checked
                assert pipeline._own(LogRecord(8, 0, key, value)) is None  # e.g. a re-send's copy
                other = codec.encode_commit(writer.new_commit(Operation.APPEND, adds=[segment("b")]))
                assert pipeline._own(LogRecord(7, 0, key, other)) is None  # our id, other bytes
                assert pipeline._own(LogRecord(7, 0, key, None)) is None  # a pruning tombstone
                assert pipeline._own(LogRecord(7, 0, None, value)) is None
            finally:
                del pipeline._delivered[commit.commit_id]
