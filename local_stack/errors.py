"""The local stack's own error type."""

from __future__ import annotations

from segcat.catalog.errors import SegcatError


class StackError(SegcatError):
    """The local development stack could not be started, stopped or inspected."""
