"""Issue 20 items 18, 19: pruning in a Spark session's time zone never drops a matching file.

Spark compares a DATE with a TIMESTAMP at the date's midnight *in the session's zone*, reads a
string without an offset in that zone, reads a TIMESTAMP_NTZ wall clock in that zone when
comparing it with a TIMESTAMP, and ignores a string's offset against a TIMESTAMP_NTZ. Files
of a DATE, a TIMESTAMP and a TIMESTAMP_NTZ column hold times around DST gaps and overlaps
(Los Angeles, Lord Howe's half hour, Samoa's skipped day); predicates compare them with
instants, dates, wall-clock strings, strings with offsets and nanosecond times. The oracle
is written here from Spark's rules with Python's ``zoneinfo`` (``fold=0`` resolves a gap
and an overlap as Java does); pruning runs with the session's zone, the column kinds known
or not (``Semantics``), and must keep every file with a matching row.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol.expressions import Compare, IsIn, Not, Predicate, col
from segcat.catalog.protocol.time_semantics import Semantics, TimestampKind
from tests.catalog.protocol.test_pruning_properties import MAYBE, NULL, OPS, Truth, _not, _or
from tests.pruning_support import describe, snapshots

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
US = 1_000
HOUR = 3_600_000_000
ZONES = ["UTC", "America/Los_Angeles", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Kolkata", "-08:00"]
ANCHORS = [
    dt.datetime(2024, 1, 1, tzinfo=UTC),
    dt.datetime(2024, 3, 10, 10, tzinfo=UTC),  # Los Angeles springs forward: 02:00-03:00 does not exist
    dt.datetime(2024, 11, 3, 9, tzinfo=UTC),  # Los Angeles falls back: 01:00-02:00 happens twice
    dt.datetime(2024, 4, 6, 15, tzinfo=UTC),  # Lord Howe falls back half an hour
    dt.datetime(2011, 12, 30, 10, tzinfo=UTC),  # Samoa skipped 2011-12-30
]
SHIFTS = [0, 1, -1, HOUR // 2, -HOUR // 2, HOUR, -HOUR, 2 * HOUR, -2 * HOUR]
SHIFTS += [sign * h * HOUR for h in (5, 7, 8, 9, 11, 13, 14, 24, 36) for sign in (1, -1)]


def _wall_text(moment: dt.datetime, offset: str | None) -> str:
    text = moment.replace(tzinfo=None).isoformat(sep=" ")
    return text if offset is None else text + offset


class Near:
    """Values around one anchor (a DST transition), so that comparisons meet at the edges."""

    def __init__(self, anchor: dt.datetime) -> None:
        shifts = st.sampled_from(SHIFTS)
        self.instants = st.builds(lambda shift: anchor + dt.timedelta(microseconds=shift), shifts)
        self.days = st.builds(lambda d: anchor.date() + dt.timedelta(days=d), st.integers(-2, 2))
        nanos = st.builds(
            lambda t, ns: pd.Timestamp(t) + pd.Timedelta(nanoseconds=ns),
            self.instants,
            st.sampled_from([1, 999]),
        )
        offsets = st.sampled_from([None, None, "Z", "+02:00", "-08:00", "+13:00"])
        self.literals = st.one_of(
            self.instants,
            self.days,
            st.builds(_wall_text, self.instants, offsets),
            self.days.map(dt.date.isoformat),
            nanos,
        )
        columns = ("dt", "tu", "tw")
        self.rows = st.lists(
            st.fixed_dictionaries(
                {name: st.one_of(st.none(), self.days if name == "dt" else self.instants) for name in columns}
            ),
            min_size=1,
            max_size=4,
        )
        self.predicates = st.sampled_from(columns).flatmap(self._leaf)

    def _leaf(self, column: str) -> st.SearchStrategy[Predicate]:
        compare = st.builds(lambda op, v: Compare(column, op, v), st.sampled_from(list(OPS)), self.literals)
        listed = st.builds(lambda vs: col(column).isin(vs), st.lists(self.literals, min_size=1, max_size=3))
        return st.one_of(compare, compare, listed, listed.map(Not))


# ---------------------------------------------------------------------------- the oracle


def _ns(moment: dt.datetime) -> int:
    if isinstance(moment, pd.Timestamp):
        return int(moment.value)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * US


def _local(wall: dt.datetime, zone: dt.tzinfo) -> int:
    """The instant (ns) of a naive wall clock in ``zone``: a gap shifts forward, an overlap takes the
    earlier offset (Java's ``ZonedDateTime.of``, which is Python's ``fold=0``)."""
    return _ns(wall.replace(tzinfo=zone, fold=0).astimezone(UTC))


def _wall(moment_ns: int, zone: dt.tzinfo) -> int:
    """The wall clock (ns, read as UTC) of an instant in ``zone``."""
    moment = EPOCH + dt.timedelta(microseconds=moment_ns // US)
    local = moment.astimezone(zone).replace(tzinfo=None)
    return _ns(local.replace(tzinfo=UTC)) + moment_ns % US


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time())


_ISO = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?")


def _keys(column: str, x: Any, value: Any, zone: dt.tzinfo, timestamps: bool) -> tuple[int, int] | None:
    """(stored, literal) as Spark compares them in ``zone``; None: not modelled here."""
    if column == "dt":
        if isinstance(value, dt.datetime) or timestamps:
            stored = _local(_midnight(x), zone)
            if isinstance(value, dt.datetime):
                return stored, _ns(value)
            if isinstance(value, dt.date):
                return stored, _local(_midnight(value), zone)
            return None if not _ISO.fullmatch(value) else (stored, _string_instant(value, zone))
        if isinstance(value, dt.date):
            return x.toordinal(), value.toordinal()
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            return x.toordinal(), dt.date.fromisoformat(value).toordinal()
        return None
    stored_instant = _ns(x)
    if column == "tw":  # the file holds x's UTC wall clock, without a zone
        wall = stored_instant
        if isinstance(value, dt.datetime):
            return _local(x.replace(tzinfo=None), zone), _ns(value)
        if isinstance(value, dt.date):
            return wall, _ns(_midnight(value).replace(tzinfo=UTC))
        if isinstance(value, str) and _ISO.fullmatch(value):
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            return wall, _ns(parsed.replace(tzinfo=UTC))
        return None
    if isinstance(value, dt.datetime):
        return stored_instant, _ns(value)
    if isinstance(value, dt.date):
        return stored_instant, _local(_midnight(value), zone)
    if isinstance(value, str) and _ISO.fullmatch(value):
        return stored_instant, _string_instant(value, zone)
    return None


def _string_instant(value: str, zone: dt.tzinfo) -> int:
    """A string cast to a TIMESTAMP: its own offset, else a wall clock in ``zone``."""
    parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return _local(parsed, zone) if parsed.tzinfo is None else _ns(parsed)


def evaluate(predicate: Predicate, row: dict[str, Any], zone: dt.tzinfo) -> Truth:
    if isinstance(predicate, Not):
        return _not(evaluate(predicate.operand, row, zone))
    if isinstance(predicate, Compare):
        x = row[predicate.column]
        if x is None:
            return NULL
        keys = _keys(predicate.column, x, predicate.value, zone, False)
        return MAYBE if keys is None else frozenset({OPS[predicate.op](*keys)})
    assert isinstance(predicate, IsIn)
    x = row[predicate.column]
    # a DATE column IN a list holding a time: Spark compares every value as a timestamp
    timestamps = predicate.column == "dt" and any(isinstance(v, dt.datetime) for v in predicate.values)
    result: Truth = frozenset({False})
    for value in predicate.values:
        if x is None:
            step = NULL
        else:
            keys = _keys(predicate.column, x, value, zone, timestamps)
            if keys is None:
                return MAYBE
            step = frozenset({keys[0] == keys[1]})
        result = _or(result, step)
    return result


# ---------------------------------------------------------------------------- the property


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table(
        {
            "dt": pa.array([r["dt"] for r in rows], pa.date32()),
            "tu": pa.array([r["tu"] for r in rows], pa.timestamp("us", "UTC")),
            "tw": pa.array(
                [None if r["tw"] is None else r["tw"].replace(tzinfo=None) for r in rows], pa.timestamp("us")
            ),
        }
    )


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("files")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_prune_in_a_session_never_drops_a_file_holding_a_matching_row(
    root: Path, data: st.DataObject
) -> None:
    near = Near(data.draw(st.sampled_from(ANCHORS), label="anchor"))
    files = data.draw(st.lists(near.rows, min_size=1, max_size=4), label="files")
    bloom_column = data.draw(st.sampled_from([None, "dt", "tu", "tw"]), label="bloom")
    segments = [describe(root, _table(rows), bloom_column=bloom_column) for rows in files]
    zone_name = data.draw(st.sampled_from(ZONES), label="zone")
    zone: dt.tzinfo = dt.timezone(dt.timedelta(hours=-8)) if zone_name == "-08:00" else ZoneInfo(zone_name)
    known = data.draw(st.booleans(), label="kinds known")
    kinds = {"tu": TimestampKind.INSTANT, "tw": TimestampKind.WALL} if known else {}
    semantics = Semantics(zone_name, kinds)
    views = snapshots(segments)
    for predicate in data.draw(st.lists(near.predicates, min_size=1, max_size=8), label="predicates"):
        must_keep = {
            segment.segment_id
            for segment, rows in zip(segments, files, strict=True)
            if any(True in evaluate(predicate, row, zone) for row in rows)
        }
        for view in views:
            try:
                survivors = {s.segment_id for s in view.prune(predicate, semantics).segment_list()}
            except InvalidPredicate:
                continue
            assert not must_keep - survivors, f"{predicate} in {zone_name} dropped a file with a matching row"


def test_the_oracle_itself() -> None:
    """Hand-checked: Los Angeles in January is UTC-8."""
    la = ZoneInfo("America/Los_Angeles")
    row = {
        "dt": dt.date(2024, 1, 1),
        "tu": dt.datetime(2024, 1, 1, 3, tzinfo=UTC),
        "tw": dt.datetime(2024, 1, 2, 3, tzinfo=UTC),
    }
    # the date's midnight in LA is 08:00Z: not <= 03:00Z there, but it is at UTC
    assert evaluate(col("dt") <= dt.datetime(2024, 1, 1, 3, tzinfo=UTC), row, la) == frozenset({False})
    assert evaluate(col("dt") <= dt.datetime(2024, 1, 1, 3, tzinfo=UTC), row, UTC) == frozenset({True})
    # a wall-clock string is LA time: 2024-01-01 00:00 LA is 08:00Z, after 03:00Z
    assert evaluate(col("tu") < "2024-01-01 00:00:00", row, la) == frozenset({True})
    # TIMESTAMP_NTZ ignores the string's offset: 03:00 < 04:00
    assert evaluate(col("tw") < "2024-01-02T04:00:00+02:00", row, la) == frozenset({True})
    # TIMESTAMP_NTZ 03:00 read in LA is 11:00Z
    assert evaluate(col("tw") > dt.datetime(2024, 1, 2, 10, tzinfo=UTC), row, la) == frozenset({True})
