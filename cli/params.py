"""Click parameter types that refuse impossible values before any I/O (exit 2).

``click.INT`` takes ``1_000``, `` 12 `` and numbers no Kafka offset can be; these take
decimal integers in a stated range and say which range when they refuse.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import click

from segcat.catalog.errors import InvalidArgument
from segcat.catalog.protocol.tags import check_tag_name
from segcat.catalog.read.as_of import parse_as_of
from segcat.catalog.read.retention import MAX_DURATION_MS

if TYPE_CHECKING:  # click ≥ 8.2 makes ParamType generic; subscripting it at run time needs that
    _IntType = click.ParamType[int]
    _VersionType = click.ParamType[int | str]
    _TextType = click.ParamType[str]
else:
    _IntType = _VersionType = _TextType = click.ParamType

INT64_MAX = 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+")


class Integer(_IntType):
    """A decimal integer in ``[minimum, maximum]``; ``what`` names it in errors."""

    name = "integer"

    def __init__(
        self, minimum: int, maximum: int = INT64_MAX, *, what: str = "a number", note: str = ""
    ) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.what = what
        self.note = note

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _INTEGER.fullmatch(value) and len(value) <= 40:
            number = int(value)
        else:
            self.fail(f"{str(value)[:40]!r} is not {self.what} (a decimal integer)", param, ctx)
        if not self.minimum <= number <= self.maximum:
            shown = str(number) if len(str(number)) <= 25 else f"{str(number)[:25]}…"
            limit = (
                f"at most {self.maximum}"
                + (" (it must fit a signed 64-bit integer)" if self.maximum == INT64_MAX else "")
                if number > self.maximum
                else f"at least {self.minimum}"
            )
            self.fail(f"{shown} is not {self.what}: it must be {limit}{self.note}", param, ctx)
        return number


VERSION = Integer(-1, what="a version", note="; versions are Kafka offsets, -1 is the empty table")
"""A table version: an offset ≥ 0, or -1 for the empty table (what ``Table.snapshot`` accepts)."""


class VersionOrTag(_VersionType):
    """A version (as ``VERSION``) or a tag's name (checked as tag names are; resolved when read)."""

    name = "version-or-tag"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, str) and value and not _INTEGER.fullmatch(value):
            try:
                return check_tag_name(value)
            except InvalidArgument as exc:
                self.fail(f"{value[:40]!r} is neither a version nor a tag name: {exc}", param, ctx)
        return VERSION.convert(value, param, ctx)


VERSION_OR_TAG = VersionOrTag()


class TagName(_TextType):
    """A tag's name, refused before any I/O when it cannot be one (exit 2)."""

    name = "tag"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            return check_tag_name(value)
        except InvalidArgument as exc:
            self.fail(str(exc), param, ctx)


TAG = TagName()
OFFSET = Integer(0, what="an offset")
COUNT = Integer(0, what="a count")
POSITIVE = Integer(1, what="a positive count")
PORT = Integer(0, 65_535, what="a port", note=" (0 = off)")


class AsOf(_IntType):
    """A broker time: epoch milliseconds, or ISO-8601 (UTC when no zone is given); never before 1970."""

    name = "time"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            ms = value
        else:
            try:
                ms = parse_as_of(str(value))
            except ValueError as exc:
                self.fail(str(exc), param, ctx)
        if not 0 <= ms < INT64_MAX:
            self.fail(
                f"{value!s:.40} is not a time a Kafka log can hold (from 1970 on, in epoch ms)", param, ctx
            )
        return ms


AS_OF = AsOf()


_DURATION = re.compile(r"([0-9]{1,12})(ms|s|m|h|d|w)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


class Duration(_IntType):
    """A duration with a unit: ``500ms``, ``45s``, ``30m``, ``12h``, ``7d``, ``2w`` (or ``0``), in ms."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            ms = value
        else:
            text = str(value).strip().lower()
            match = _DURATION.fullmatch(text)
            if text == "0":
                ms = 0
            elif match is None:
                self.fail(
                    f"{str(value)[:40]!r} is not a duration: a number with a unit, e.g. 30m, 12h, 7d",
                    param,
                    ctx,
                )
            else:
                ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
        if not 0 <= ms <= MAX_DURATION_MS:
            self.fail(f"{str(value)[:40]!r} is not a duration from 0 to 100 years", param, ctx)
        return ms


DURATION = Duration()
