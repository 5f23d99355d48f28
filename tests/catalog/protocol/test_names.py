"""Table identifiers and topic names (docs/PROTOCOL.md §1): `[A-Za-z0-9_-]{1,100}`, nothing else."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import InvalidTableName, SegcatError
from segcat.catalog.protocol.names import TOPIC_PREFIX, TableName, check_identifier, table_name
from tests.strategies import SETTINGS

IDENTIFIER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}")
identifiers = st.from_regex(IDENTIFIER, fullmatch=True)

BAD_QUALIFIED = {
    "empty": "",
    "dot only": ".",
    "no table": "ns.",
    "no namespace": ".t",
    "no dot": "nst",
    "two dots": "ns.t.x",
    "path traversal": "../x",
    "traversal in table": "ns.../etc",
    "slash": "ns/t",
    "slash in table": "ns.a/b",
    "backslash": "ns.a\\b",
    "space": "ns.my table",
    "leading space": " ns.t",
    "trailing newline": "ns.t\n",
    "newline inside": "ns.t\nx",
    "tab": "ns.\tt",
    "NUL": "ns.t\x00",
    "unicode letter": "ns.tåble",
    "unicode digit": "ns.t\u0663",
    "fullwidth letters": "ｎｓ.t",
    "emoji": "ns.🚀",
    "colon": "ns.t:1",
    "star": "ns.*",
    "topic regex": "ns.t|.*",
    "300 chars": "ns." + "t" * 300,
    "101 chars": "ns." + "t" * 101,
    "long namespace": "n" * 101 + ".t",
    "plus": "ns.a+b",
    "option-like table": "ux_a.--help",
    "option-like namespace": "-h.t",
    "dash first": "ns.-t",
}


@pytest.mark.parametrize("qualified", BAD_QUALIFIED.values(), ids=list(BAD_QUALIFIED))
def test_bad_qualified_names_are_refused(qualified: str) -> None:
    with pytest.raises(InvalidTableName) as caught:
        TableName.parse(qualified)
    assert isinstance(caught.value, SegcatError) and isinstance(caught.value, ValueError)
    assert len(str(caught.value)) < 200  # a 300-character name is not echoed back whole


@pytest.mark.parametrize(
    ("namespace", "table"),
    [
        ("", "t"),
        ("ns", ""),
        ("..", "x"),
        ("ns", "a.b"),
        ("ns", "a/b"),
        ("ns", "t" * 101),
        ("é", "t"),
        ("ns", "t\n"),
    ],
)
def test_constructor_validates_both_parts(namespace: str, table: str) -> None:
    with pytest.raises(InvalidTableName):
        TableName(namespace, table)


def test_non_strings_are_refused() -> None:
    with pytest.raises(InvalidTableName):
        check_identifier(123)  # type: ignore[arg-type]
    with pytest.raises(InvalidTableName):
        TableName.parse(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "qualified", ["ns.t", "a.b", "Sales_EU.orders-2024", "0.9", "_._-", "a-.b--", "n" * 100 + "." + "t" * 100]
)
def test_good_names_round_trip_through_the_topic(qualified: str) -> None:
    name = TableName.parse(qualified)
    assert name.qualified == str(name) == qualified
    assert name.topic == f"segcat.{qualified}"
    assert TableName.from_topic(name.topic) == name
    assert table_name(qualified) == name and table_name(name) is name


def test_longest_names_fit_in_a_kafka_topic_name() -> None:
    name = TableName("n" * 100, "t" * 100)
    assert len(name.topic) <= 249  # Kafka's limit
    assert re.fullmatch(r"[A-Za-z0-9._-]+", name.topic)


@pytest.mark.parametrize(
    "topic",
    [
        "ns.t",
        "segcat.",
        "segcat.ns",
        "segcat.ns.t.x",
        "segcat..t",
        "Segcat.ns.t",
        "segcat.ns.t\n",
        "__consumer_offsets",
    ],
)
def test_foreign_or_bad_topics_are_refused(topic: str) -> None:
    with pytest.raises(InvalidTableName):
        TableName.from_topic(topic)


@settings(SETTINGS, max_examples=200)
@given(identifiers, identifiers)
def test_any_valid_pair_round_trips(namespace: str, table: str) -> None:
    name = TableName(namespace, table)
    assert name.topic == f"{TOPIC_PREFIX}{namespace}.{table}"
    assert TableName.from_topic(name.topic) == name
    assert TableName.parse(name.qualified) == name


@settings(SETTINGS, max_examples=300)
@given(st.text(max_size=120))
def test_anything_else_is_refused(text: str) -> None:
    if IDENTIFIER.fullmatch(text):
        assert check_identifier(text) == text
    else:
        with pytest.raises(InvalidTableName):
            check_identifier(text)
