"""Key frame + accepted deltas (Arrow) must answer exactly like a replay (TableState)."""

from __future__ import annotations

import random

import pytest

from segcat.catalog.protocol import rules
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import Commit, Operation, Tombstone
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView
from tests.factories import segment


def _random_log(seed: int, n: int) -> list[Commit]:
    rng = random.Random(seed)
    shadow: list[str] = []
    commits = []
    for k in range(n):
        roll = rng.random()
        if roll < 0.5 or len(shadow) < 3:
            adds = tuple(
                segment(f"s{k}-{j}", rng.choice(["p0", "p1", None]), rows=rng.randint(1, 50))
                for j in range(3)
            )
            commits.append(Commit(Commit.new_id(), "ns.t", Operation.APPEND, k - 1, "w", 0, adds=adds))
            shadow.extend(s.segment_id for s in adds)
        elif roll < 0.8:
            drops = tuple(rng.sample(shadow, 2))
            commits.append(
                Commit(
                    Commit.new_id(),
                    "ns.t",
                    Operation.COMPACT,
                    k - 1,
                    "w",
                    0,
                    drops=drops,
                    adds=(segment(f"c{k}", "p0"),),
                )
            )
            shadow = [s for s in shadow if s not in drops] + [f"c{k}"]
        elif roll < 0.9:
            commits.append(
                Commit(
                    Commit.new_id(),
                    "ns.t",
                    Operation.DELETE,
                    k - 1,
                    "w",
                    0,
                    tombstones=(Tombstone(f"id = {k}"),),
                )
            )
        else:
            commits.append(
                Commit(
                    Commit.new_id(),
                    "ns.t",
                    Operation.SET_PROPERTIES,
                    k - 1,
                    "w",
                    0,
                    table_properties={"k": str(k), "gone": None},
                )
            )
        if rng.random() < 0.1:  # a stale compaction that the rules reject
            commits.append(
                Commit(
                    Commit.new_id(),
                    "ns.t",
                    Operation.COMPACT,
                    -1,
                    "w",
                    0,
                    drops=("nope",),
                    adds=(segment(f"x{k}"),),
                )
            )
    return commits


@pytest.mark.parametrize("seed", range(6))
def test_frame_plus_deltas_equals_replay(seed: int) -> None:
    commits = _random_log(seed, 120)
    state = TableState("ns.t")
    accepted: list[CommitDelta] = []
    frames: dict[int, tuple[FrameView, TableState]] = {}
    cut = random.Random(seed).randrange(len(commits))
    for offset, commit in enumerate(commits):
        offset_v = offset * 3  # versions are offsets, not dense
        _, delta = rules.apply_commit(state, offset_v, 1_000 + offset_v, commit)
        if delta is not None:  # the same delta the in-memory image applied
            accepted.append(delta)
        if offset == cut:
            frame = keyframe.from_parquet(keyframe.to_parquet(keyframe.build(state)))
            frames[offset_v] = (FrameView.from_keyframe(frame), state.copy())
    ((cut_v, (frame_view, _)),) = frames.items()
    caught_up = frame_view.apply(accepted, offset=state.version)
    from_frame = Snapshot(caught_up, "/root", origin="redis")
    from_state = Snapshot(state, "/root")
    assert from_frame.version == from_state.version
    assert from_frame.timestamp_ms == from_state.timestamp_ms
    assert from_frame.segment_list() == from_state.segment_list()
    assert sorted(from_frame.files()) == sorted(from_state.files())
    assert (from_frame.live_rows, from_frame.live_bytes, from_frame.live_count) == (
        from_state.live_rows,
        from_state.live_bytes,
        from_state.live_count,
    )
    assert from_frame.tombstones == from_state.tombstones
    assert from_frame.properties == from_state.properties
    assert sorted(from_frame.segments.column("segment_id").to_pylist()) == sorted(state.segments)
    # diff across sources: the frame at the cut vs the head replay
    frame_at_cut = Snapshot(frame_view, "/root")
    replay_at_cut = Snapshot(frames[cut_v][1], "/root")
    assert frame_at_cut.diff(from_state) == replay_at_cut.diff(from_frame)


def test_applying_nothing_is_identity_and_stale_commits_are_ignored() -> None:
    state = TableState("ns.t")
    commit = Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=(segment("a"),))
    rules.apply(state, 0, 5, commit)
    view = FrameView.from_state(state)
    assert view.apply([]) is view
    assert view.apply([CommitDelta(0, 5, commit)]) is view  # already covered
    assert view.apply([], offset=9).offset == 9
