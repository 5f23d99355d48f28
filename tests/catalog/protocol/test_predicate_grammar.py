"""docs/PROTOCOL.md §4a.1, the predicate grammar, held to the parser: the document's example
table is read and every row checked, so the contract cannot drift from the code; then what the
EBNF says about tokens, keywords, escapes and nesting, and protocol 3's exact reading of
tombstones against protocol 2's lenient one (issue 20, item 10)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol.expressions import Compare, IsNull, Not, col
from segcat.catalog.protocol.model import Operation, Tombstone
from segcat.catalog.protocol.predicates import MAX_DEPTH, parse_predicate, to_sql
from segcat.catalog.protocol.rules import Outcome
from tests.catalog.protocol.test_rules import commit
from tests.catalog.protocol.test_rules_v3 import log_at

PROTOCOL = Path(__file__).resolve().parents[3] / "docs" / "PROTOCOL.md"
MARKER = "<!-- grammar examples: each row is checked by tests/catalog/protocol/test_predicate_grammar.py -->"
_CODE = re.compile(r"(`+) ?(.*?) ?\1")


def _code(cell: str) -> str | None:
    """The text of a cell that is one code span, else None (``refused``, ``the same``)."""
    match = _CODE.fullmatch(cell.strip())
    return match.group(2) if match else None


def _examples() -> list[tuple[str, str | None, str | None]]:
    """(text, exact reading or None = refused, lenient reading or None = refused)."""
    lines = PROTOCOL.read_text(encoding="utf-8").splitlines()
    start = lines.index(MARKER) + 3  # the marker, the header, the rule
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        text_cell, exact_cell, lenient_cell = (c for c in line.strip().strip("|").split(" | "))
        text = _code(text_cell)
        assert text is not None, line
        exact = _code(exact_cell)
        assert exact is not None or exact_cell.strip() == "refused", line
        lenient = exact if lenient_cell.strip() == "the same" else _code(lenient_cell)
        assert lenient is not None or lenient_cell.strip() in ("refused", "the same"), line
        rows.append((text, exact, lenient))
    return rows


EXAMPLES = _examples()


def _reading(text: str, *, lenient: bool) -> str | None:
    try:
        return to_sql(parse_predicate(text, lenient=lenient))
    except InvalidPredicate:
        return None


def test_the_document_holds_examples_of_every_kind() -> None:
    assert len(EXAMPLES) >= 25
    assert any(exact is None and lenient is not None for _, exact, lenient in EXAMPLES)
    assert any(exact is None and lenient is None for _, exact, lenient in EXAMPLES)


@pytest.mark.parametrize(("text", "exact", "lenient"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_every_example_of_the_document_reads_as_it_says(
    text: str, exact: str | None, lenient: str | None
) -> None:
    assert _reading(text, lenient=False) == exact
    assert _reading(text, lenient=True) == lenient


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n=1", col("n") == 1),
        ("N IS NULL", IsNull("N")),
        ("n iS nOt NuLl", IsNull("n", negate=True)),
        ("`select` = 1", col("select") == 1),  # not a keyword here: quoting is harmless
        ("`NULL` = 1", col("NULL") == 1),
        ("timestamp = 1", col("timestamp") == 1),  # a prefix without a string is a column
        ("x > 1", col("x") > 1),
        ("DATE'2024-01-02' <= d", col("d") >= dt.date(2024, 1, 2)),
        ("n = -0", col("n") == 0),
        ("\tn\n=\r1\f", col("n") == 1),
    ],
)
def test_tokens_keywords_and_quoting(text: str, expected: object) -> None:
    assert parse_predicate(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "n = - 1",  # a sign belongs to its number
        "n = 1 -- comment",
        "n = 1;",
        "NULL = 1",  # reserved
        "and = 1",
        "n = DATE",  # a prefix in a literal's place needs its string
        "n NOT = 1",
        "(n) = 1",
        "n = ``",
        "n = X'0'",
        "n BETWEEN 1 AND 2",
        "n LIKE 'a%'",
        "a + 1 > 2",
        "n = 'unterminated",
    ],
)
def test_what_the_grammar_does_not_hold_is_refused(text: str) -> None:
    with pytest.raises(InvalidPredicate):
        parse_predicate(text)


def test_nesting_counts_parentheses_and_nots_not_chains() -> None:
    deepest = "NOT " * (MAX_DEPTH - 1) + "n = 1"
    assert isinstance(parse_predicate(deepest), Not)
    with pytest.raises(InvalidPredicate, match="nests deeper"):
        parse_predicate("NOT " + deepest)
    with pytest.raises(InvalidPredicate, match="nests deeper"):
        parse_predicate("(" * MAX_DEPTH + "n = 1" + ")" * MAX_DEPTH)
    chain = " OR ".join(f"n = {i}" for i in range(5_000))
    assert to_sql(parse_predicate(chain)).count("(") == 1


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_the_exact_reading_is_a_part_of_the_lenient_one(text: str) -> None:
    """Readers apply every tombstone leniently: that must mean the same for any text protocol 3
    accepted."""
    try:
        exact = parse_predicate(text)
    except InvalidPredicate:
        return
    assert parse_predicate(text, lenient=True) == exact


@pytest.mark.parametrize(
    "predicate",
    ["d = DATE '20240102'", "n = 1e999", "t = TIMESTAMP '2024-01-02T03'", "b = X'0a ff'", "n = ١"],
)
def test_a_protocol_3_tombstone_is_read_exactly_a_protocol_2_one_leniently(predicate: str) -> None:
    """Issue 20, item 10: protocol 2 accepted whatever Python made of a tombstone's text; from
    protocol 3 a tombstone is in the grammar as written, or INVALID."""
    tombstone = (Tombstone(predicate),)
    for version, outcome in ((2, Outcome.ACCEPTED), (3, Outcome.INVALID)):
        log = log_at(version)
        verdict = log.send(commit(Operation.DELETE, -1, tombstones=tombstone))
        assert verdict.outcome is outcome, (version, verdict)


def test_to_sql_writes_what_the_exact_grammar_reads() -> None:
    for predicate in (
        col("t") < dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        col("d") == dt.date(9999, 12, 31),
        col("f") == 5e-324,
        col("f") > 1.7976931348623157e308,
        col("b") == b"",
        Compare("x", "<", "it's"),
    ):
        assert parse_predicate(to_sql(predicate)) == predicate
