"""A write intent handed over from the process that wrote the files to the one that commits them
(the streaming sink's tasks and committer): it stays live after the writer closes, vacuum keeps
the files, and the other process's commit, or abort, closes it."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from segcat import Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol.model import Operation, Segment
from segcat.catalog.storage.provenance import PROVENANCE_KEYS

pytestmark = [pytest.mark.kafka]


def _old_file(table: Table, relative: str, commit_id: str) -> Path:
    path = Path(table.location()) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("id", pa.int64())], metadata={PROVENANCE_KEYS["commit_id"]: commit_id})
    pq.write_table(pa.table({"id": [1]}, schema=schema), path)
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))
    return path


def test_a_handed_over_intent_outlives_its_writer_until_the_adopter_commits(
    config: Config, table: Table
) -> None:
    commit_id = str(uuid.uuid4())
    with load_catalog(config).load_table(table.name) as task:
        intent = task.intent("data/", ttl_s=60, intent_id=commit_id)
        intent.open()
        written = _old_file(table, "data/part-x.parquet", commit_id)
        intent.hand_over()
    # the task's writer is closed: the intent was not aborted
    assert commit_id in table.refresh().intents
    report = table.vacuum(grace_ms=0)
    assert report.kept_by_intent == 1 and written.exists()

    with load_catalog(config).load_table(table.name) as committer:
        committer.refresh()
        adopted = committer.intent("data/", intent_id=commit_id)
        assert adopted.adopt()
        planned = committer.new_commit(Operation.APPEND, adds=[Segment("x", "data/part-x.parquet", 64, 1)])
        version = adopted.commit(planned)
    state = table.refresh()
    assert state.last_accepted_version == version and commit_id not in state.intents


def test_an_adopted_intent_is_closed_by_its_abort(config: Config, table: Table) -> None:
    commit_id = str(uuid.uuid4())
    with load_catalog(config).load_table(table.name) as task:
        intent = task.intent("data/", ttl_s=60, intent_id=commit_id)
        intent.open()
        intent.hand_over()
    with load_catalog(config).load_table(table.name) as committer:
        committer.refresh()
        adopted = committer.intent("data/", intent_id=commit_id)
        assert adopted.adopt()
        adopted.abort()
    assert commit_id not in table.refresh().intents
