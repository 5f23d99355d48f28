"""The predicate grammar of tombstones and text row filters (docs/PROTOCOL.md §4a).

A small subset of Spark SQL boolean expressions, so that a tombstone committed to the log
can always be applied, by Spark or by anything else, with the same meaning:

    predicate  := or EOF
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | "(" or ")" | test
    test       := column op literal | literal op column
                | column ["NOT"] "IN" "(" literal ("," literal)* ")"
                | column "IS" ["NOT"] "NULL"
    op         := "=" | "==" | "!=" | "<>" | "<" | "<=" | ">" | ">="
    column     := [A-Za-z_][A-Za-z0-9_]* | `back-quoted` (`` inside means `)
    literal    := ["-"] digits            integer (Python int)
                | ["-"] digits "." digits  exact decimal (Decimal), as Spark SQL reads it
                | ["-"] number ("e" exp | "D")   double
                | 'text' ('' inside means ')
                | TRUE | FALSE
                | DATE 'yyyy-mm-dd'
                | TIMESTAMP 'yyyy-mm-dd[( |T)hh:mm[:ss[.f{1,6}]][Z|±hh:mm]]' (no zone: UTC)
                | X'hex' (pairs of hex digits)
                | CAST('NaN' | 'Infinity' | '-Infinity' AS DOUBLE)

Keywords are case-insensitive. Comparing with NULL is refused (it is never true in SQL;
``IS NULL`` is what is meant), and so is a number Spark cannot hold as a literal (more than
38 digits). What a parsed predicate means, literals of another type than the column
included, is docs/PROTOCOL.md §4a. ``to_sql`` writes a predicate back in this grammar (a
left-deep AND / OR chain flat, so long chains stay within ``MAX_DEPTH``), so
``parse_predicate(to_sql(p)) == p``.

docs/PROTOCOL.md §4a.1 is the contract, in EBNF. ``parse_predicate`` reads exactly it: ASCII
digits and whitespace, DATE / TIMESTAMP strings of the written forms, an even number of hex
digits, finite doubles. ``lenient=True`` also reads what protocol 1 and 2 tombstones could
hold, because those logs accepted it: Unicode digits and spaces, any string Python 3.11's
``date`` / ``datetime.fromisoformat`` reads, hex with spaces, doubles past the range as
infinities.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from decimal import Decimal

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol.expressions import And, Compare, IsIn, IsNull, LiteralValue, Not, Or, Predicate

MAX_DEPTH = 64
"""Nesting deeper than this is refused (no recursion blow-up on hostile input)."""

_TOKEN_PATTERN = r"""
    (?P<ws>\s+)
  | (?P<number>-?(?:\d+\.\d+|\d+)(?:[eE][+-]?\d+)?[DdLl]?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<quoted>`(?:[^`]|``)+`)
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op><=|>=|<>|!=|==|=|<|>)
  | (?P<punct>[(),])
    """
_TOKEN = re.compile(_TOKEN_PATTERN, re.VERBOSE | re.ASCII)
"""The grammar's tokens: whitespace and digits are ASCII only."""
_TOKEN_LENIENT = re.compile(_TOKEN_PATTERN, re.VERBOSE)
"""Protocol 1–2 tombstones: whitespace and digits as Python's Unicode patterns read them."""
_DATE_TEXT = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIMESTAMP_TEXT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:[ T][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{1,6})?)?(?:Z|[+-][0-9]{2}:[0-9]{2})?)?"
)
_HEX_TEXT = re.compile(r"(?:[0-9A-Fa-f]{2})*")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "CAST", "AS"}
"""Reserved: never a column name unless back-quoted."""
_PREFIXES = {"DATE", "TIMESTAMP", "X"}
"""Typed-literal prefixes: a literal when a quoted string follows, else an ordinary column name."""
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Literal = LiteralValue


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    at: int


def _tokens(text: str, lenient: bool) -> list[_Token]:
    out: list[_Token] = []
    position = 0
    pattern = _TOKEN_LENIENT if lenient else _TOKEN
    while position < len(text):
        match = pattern.match(text, position)
        if match is None:
            raise InvalidPredicate(f"unexpected character {text[position]!r} at position {position}")
        kind = match.lastgroup or ""
        if kind != "ws":
            out.append(_Token(kind, match.group(), position))
        position = match.end()
    return out


class _Parser:
    def __init__(self, text: str, lenient: bool = False) -> None:
        self.text = text
        self.lenient = lenient
        self.tokens = _tokens(text, lenient)
        self.position = 0
        self.depth = 0

    # -- token helpers
    def peek(self) -> _Token | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> _Token:
        token = self.peek()
        if token is None:
            raise InvalidPredicate(f"unexpected end of predicate {self.text[:80]!r}")
        self.position += 1
        return token

    def keyword(self, *words: str) -> str | None:
        token = self.peek()
        if token is not None and token.kind == "word" and token.text.upper() in words:
            self.position += 1
            return token.text.upper()
        return None

    def expect_keyword(self, word: str) -> None:
        if self.keyword(word) is None:
            self.fail(f"expected {word}")

    def expect_punct(self, char: str) -> None:
        token = self.take()
        if token.kind != "punct" or token.text != char:
            self.fail(f"expected {char!r}", token)

    def fail(self, message: str, token: _Token | None = None) -> None:
        token = token or self.peek()
        where = "at the end" if token is None else f"at position {token.at} ({token.text!r})"
        raise InvalidPredicate(f"{message} {where} in predicate {self.text[:80]!r}")

    # -- grammar
    def parse(self) -> Predicate:
        if not self.tokens:
            raise InvalidPredicate("empty predicate")
        result = self.or_()
        if self.peek() is not None:
            self.fail("unexpected token")
        return result

    def nested(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise InvalidPredicate(f"predicate nests deeper than {MAX_DEPTH} levels")

    def or_(self) -> Predicate:
        self.nested()
        parts = [self.and_()]
        while self.keyword("OR"):
            parts.append(self.and_())
        self.depth -= 1
        return parts[0] if len(parts) == 1 else Or(*parts)

    def and_(self) -> Predicate:
        parts = [self.not_()]
        while self.keyword("AND"):
            parts.append(self.not_())
        return parts[0] if len(parts) == 1 else And(*parts)

    def not_(self) -> Predicate:
        if self.keyword("NOT"):
            self.nested()
            inner = self.not_()
            self.depth -= 1
            return Not(inner)
        token = self.peek()
        if token is not None and token.kind == "punct" and token.text == "(":
            self.take()
            inner = self.or_()
            self.expect_punct(")")
            return inner
        return self.test()

    def test(self) -> Predicate:
        column = self.column()
        if column is None:
            value = self.literal()
            op = self.operator()
            column = self.column()
            if column is None:
                self.fail("expected a column after a literal and an operator")
            assert column is not None
            return Compare(column, _FLIP[op], value)
        if self.keyword("IS"):
            negate = self.keyword("NOT") is not None
            self.expect_keyword("NULL")
            return IsNull(column, negate=negate)
        negate = self.keyword("NOT") is not None
        if self.keyword("IN"):
            self.expect_punct("(")
            values = [self.literal()]
            while True:
                token = self.take()
                if token.kind == "punct" and token.text == ",":
                    values.append(self.literal())
                    continue
                if token.kind == "punct" and token.text == ")":
                    break
                self.fail("expected ',' or ')'", token)
            found = IsIn(column, tuple(values))
            return Not(found) if negate else found
        if negate:
            self.fail("expected IN after NOT")
        return Compare(column, self.operator(), self.literal())

    def operator(self) -> str:
        token = self.take()
        if token.kind != "op":
            self.fail("expected a comparison operator", token)
        return {"=": "==", "<>": "!="}.get(token.text, token.text)

    def column(self) -> str | None:
        token = self.peek()
        if token is None:
            return None
        if token.kind == "quoted":
            self.take()
            return token.text[1:-1].replace("``", "`")
        if token.kind == "word" and token.text.upper() not in _KEYWORDS and not self._typed_literal_ahead():
            self.take()
            return token.text
        return None

    def _typed_literal_ahead(self) -> bool:
        token = self.peek()
        following = self.tokens[self.position + 1] if self.position + 1 < len(self.tokens) else None
        return (
            token is not None
            and token.text.upper() in _PREFIXES
            and following is not None
            and following.kind == "string"
        )

    def literal(self) -> Literal:
        token = self.take()
        if token.kind == "number":
            return _number(token.text, self.lenient)
        if token.kind == "string":
            return _unquote(token.text)
        if token.kind != "word":
            self.fail("expected a literal", token)
        word = token.text.upper()
        if word in ("TRUE", "FALSE"):
            return word == "TRUE"
        if word == "NULL":
            raise InvalidPredicate(
                f"comparing with NULL is never true; use IS NULL / IS NOT NULL (predicate {self.text[:80]!r})"
            )
        if word in _PREFIXES:
            quoted = self.take()
            if quoted.kind != "string":
                self.fail(f"expected a quoted value after {word}", quoted)
            return _typed(word, _unquote(quoted.text), self.lenient)
        if word == "CAST":
            self.expect_punct("(")
            quoted = self.take()
            if quoted.kind != "string":
                self.fail("CAST takes a quoted 'NaN', 'Infinity' or '-Infinity'", quoted)
            self.expect_keyword("AS")
            self.expect_keyword("DOUBLE")
            self.expect_punct(")")
            special = {"nan": math.nan, "infinity": math.inf, "-infinity": -math.inf}
            value = special.get(_unquote(quoted.text).lower())
            if value is None:
                self.fail("CAST(... AS DOUBLE) takes 'NaN', 'Infinity' or '-Infinity'", quoted)
            assert value is not None
            return value
        self.fail("expected a literal", token)
        raise AssertionError("unreachable")


def _number(text: str, lenient: bool = False) -> int | float | Decimal:
    suffix = text[-1].upper()
    value: int | float | Decimal
    try:
        if suffix == "L":
            value = int(text[:-1])
        elif suffix == "D" or "e" in text or "E" in text:
            value = float(text[:-1] if suffix == "D" else text)
        elif "." in text:
            value = Decimal(text)
        else:
            value = int(text)
    except ValueError as exc:
        raise InvalidPredicate(f"bad number {text!r}") from exc
    if isinstance(value, float) and not (lenient or math.isfinite(value)):
        raise InvalidPredicate(f"{text!r} does not fit a double (write CAST('Infinity' AS DOUBLE))")
    return value


def _unquote(text: str) -> str:
    return text[1:-1].replace("''", "'")


def _typed(kind: str, text: str, lenient: bool = False) -> Literal:
    form = {"DATE": _DATE_TEXT, "TIMESTAMP": _TIMESTAMP_TEXT, "X": _HEX_TEXT}[kind]
    if not (lenient or form.fullmatch(text)):
        written = {
            "DATE": "yyyy-mm-dd",
            "TIMESTAMP": "yyyy-mm-dd[( |T)hh:mm[:ss[.ffffff]][Z|+hh:mm|-hh:mm]]",
            "X": "pairs of hex digits",
        }[kind]
        raise InvalidPredicate(f"bad {kind} literal {text!r}: expected {written}")
    try:
        if kind == "DATE":
            return dt.date.fromisoformat(text)
        if kind == "X":
            return bytes.fromhex(text)
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidPredicate(f"bad {kind} literal {text!r}: {exc}") from exc
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def parse_predicate(text: str, *, lenient: bool = False) -> Predicate:
    """Parse ``text`` (the grammar above) into a predicate; ``InvalidPredicate`` says what is wrong.

    ``lenient``: also read what protocol 1 and 2 accepted in tombstones (module docstring); only
    for judging those logs and applying their tombstones, never for new input."""
    if not isinstance(text, str):
        raise InvalidPredicate(f"a predicate is text, not {type(text).__name__}")
    return _Parser(text, lenient).parse()


# ---------------------------------------------------------------------------- writing back


def to_sql(predicate: Predicate) -> str:
    """``predicate`` in the grammar above (fully parenthesised, so precedence never matters)."""
    if isinstance(predicate, And | Or):
        # a chain is written flat, "(a AND b AND c)", and parses back to the same chain
        word = " AND " if isinstance(predicate, And) else " OR "
        return "(" + word.join(to_sql(part) for part in predicate.parts) + ")"
    if isinstance(predicate, Not):
        return f"(NOT {to_sql(predicate.operand)})"
    if isinstance(predicate, IsNull):
        return f"{_column_sql(predicate.column)} IS {'NOT ' if predicate.negate else ''}NULL"
    if isinstance(predicate, IsIn):
        if not predicate.values:
            raise InvalidPredicate(f"IN () with no values on {predicate.column!r} cannot be written")
        values = ", ".join(literal_sql(v) for v in predicate.values)
        return f"{_column_sql(predicate.column)} IN ({values})"
    if isinstance(predicate, Compare):
        op = "=" if predicate.op == "==" else predicate.op
        if predicate.value is None:
            raise InvalidPredicate(f"comparing {predicate.column!r} with NULL is never true; use IS NULL")
        return f"{_column_sql(predicate.column)} {op} {literal_sql(predicate.value)}"
    raise InvalidPredicate(f"cannot write {type(predicate).__name__} as a predicate")


def _column_sql(name: str) -> str:
    if _IDENTIFIER.fullmatch(name) and name.upper() not in _KEYWORDS | _PREFIXES:
        return name
    return "`" + name.replace("`", "``") + "`"


def literal_sql(value: object) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidPredicate(f"decimal {value} has no SQL literal")
        text = format(value, "f")
        return text if "." in text else text + ".0"
    if isinstance(value, float):
        if math.isnan(value):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(value):
            return "CAST('Infinity' AS DOUBLE)" if value > 0 else "CAST('-Infinity' AS DOUBLE)"
        return repr(value) + "D"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, bytes):
        return f"X'{value.hex().upper()}'"
    if isinstance(value, dt.datetime):
        if getattr(value, "nanosecond", 0):
            raise InvalidPredicate(f"{value} has nanoseconds; SQL timestamps hold microseconds")
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        utc = aware.astimezone(dt.UTC).replace(tzinfo=None)
        return f"TIMESTAMP '{utc.isoformat(sep=' ', timespec='microseconds')}Z'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    raise InvalidPredicate(f"no SQL literal for a {type(value).__name__}")
