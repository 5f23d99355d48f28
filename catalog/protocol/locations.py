"""Where a segment's file may live: under the table's root or a location the table allows.

Pure string functions (the rules use them, so no I/O and no guessing from a working
directory). Paths are compared literally, never percent-decoded: a filesystem that decodes
URIs (pyarrow's ``from_uri`` does) could otherwise be steered out of the root by ``%2e%2e``,
so absolute URIs holding encoded dots, slashes or backslashes are refused outright.
docs/PROTOCOL.md §2 "Segment paths" is the contract.
"""

from __future__ import annotations

import json
import re

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_URI = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)(/[^?#]*)?")
_ENCODED_SEPARATOR = re.compile(r"%(2e|2f|5c)", re.IGNORECASE)
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}


def is_absolute_uri(path: str) -> bool:
    """``scheme://…``: an absolute location (anything else is relative to the table root)."""
    return "://" in path and _URI.match(path) is not None  # the substring test first: hot in the rules


def relative_problem(path: str) -> str | None:
    """Why ``path`` is not a clean path relative to the table root, or None."""
    if path.startswith("/"):
        return f"segment path {path!r} must be relative to the table root or an absolute URI"
    if "\\" in path:
        return f"segment path {path!r} contains a backslash"
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return f"segment path {path!r} has empty, '.' or '..' components"
    if ":" in parts[0]:
        return f"segment path {path!r}: a relative path's first component may not contain ':'"
    return None


def uri_problem(uri: str) -> str | None:
    """Why ``uri`` is not a clean absolute URI naming one object, or None."""
    match = _URI.fullmatch(uri)
    if match is None:
        return f"{uri!r} is not an absolute URI (scheme://authority/path)"
    _, _, path = match.groups()
    if not path or path == "/":
        return f"{uri!r} names no object path"
    if "\\" in uri:
        return f"{uri!r} contains a backslash"
    if _ENCODED_SEPARATOR.search(uri):
        return f"{uri!r} contains a percent-encoded '.', '/' or '\\\\'"
    if any(part in ("", ".", "..") for part in path[1:].split("/")):
        return f"{uri!r} has empty, '.' or '..' path components"
    return None


def canonical(location: str) -> str:
    """One spelling per place: ``/a/b`` → ``file:///a/b``, ``s3a://`` → ``s3://``, no trailing '/'."""
    text = location.rstrip("/") or location
    if text.startswith("/"):
        return "file://" + text
    match = _SCHEME.match(text)
    if match is None:
        return text
    scheme = match.group(1).lower()
    rest = text[match.end() :]
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    if scheme == "file":
        if rest.startswith("//localhost/"):
            rest = rest[len("//localhost") :]
        if rest.startswith("/") and not rest.startswith("//"):
            rest = "//" + rest  # file:/a -> file:///a
    return f"{scheme}:{rest}"


def is_under(uri: str, root: str) -> bool:
    """Whether ``uri`` names an object strictly below the directory ``root`` (both canonicalised)."""
    base = canonical(root)
    return canonical(uri).startswith(base + "/")


def relative_to(uri: str, root: str) -> str | None:
    """``uri`` as a path relative to ``root``, or None when it is not under it."""
    base = canonical(root) + "/"
    full = canonical(uri)
    return full[len(base) :] if full.startswith(base) else None


def resolve(root: str, path: str) -> str:
    """The file a segment path names: absolute URIs as they are, relative ones under ``root``."""
    return path if is_absolute_uri(path) else f"{root.rstrip('/')}/{path}"


def parse_allowed(value: str | None) -> tuple[str, ...]:
    """The ``segcat.locations.allowed`` property: a JSON array of absolute locations."""
    if value is None:
        return ()
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"segcat.locations.allowed is not a JSON array: {exc}") from exc
    if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
        raise ValueError("segcat.locations.allowed must be a JSON array of strings")
    for item in parsed:
        if problem := location_problem(item):
            raise ValueError(f"segcat.locations.allowed: {problem}")
    return tuple(parsed)


def location_problem(location: str) -> str | None:
    """Why ``location`` cannot be a table root or an allowed location (absolute, clean), or None."""
    if location.startswith("/"):
        if "\\" in location or any(p in (".", "..") for p in location.split("/")):
            return f"location {location!r} has '.', '..' or backslashes"
        if location.rstrip("/") == "":
            return "the filesystem root cannot be a location"
        return None
    if not is_absolute_uri(location):
        return f"location {location!r} must be an absolute path or URI"
    return uri_problem(location.rstrip("/"))


def allowed_problem(uri: str, root: str | None, allowed: tuple[str, ...]) -> str | None:
    """Why the absolute ``uri`` may not be a segment of a table at ``root``, or None."""
    if problem := uri_problem(uri):
        return f"segment path {problem}"
    places = ([root] if root else []) + list(allowed)
    if any(is_under(uri, place) for place in places):
        return None
    return (
        f"segment path {uri!r} is outside the table's location {root!r}"
        + (f" and its allowed locations {list(allowed)!r}" if allowed else "")
        + " (an operator can allow more with the table property segcat.locations.allowed)"
    )
