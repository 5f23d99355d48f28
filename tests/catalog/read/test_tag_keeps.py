"""Pure properties of tags: what a name resolves to, and what vacuum may never plan to delete."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from segcat.catalog.errors import InvalidArgument, VersionNotFound
from segcat.catalog.protocol.tags import TAG_PREFIX, oldest_tag, tags_of
from segcat.catalog.read.tag_lookup import version_or_tag
from segcat.catalog.read.vacuum import SegmentLife, dropped_files


def resolve_tag(properties: dict[str, str], name: str) -> object:
    return version_or_tag(name, lambda: properties, "t")


NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
VALUES = st.one_of(
    st.integers(0, 2**63 - 1).map(str),
    st.sampled_from(["", "-1", "01", "1.5", " 3", "x", "9" * 25]),
)


@given(st.dictionaries(NAMES, VALUES, max_size=8), st.dictionaries(st.text(max_size=12), st.text(max_size=6)))
def test_a_name_resolves_to_the_decimal_its_property_holds_or_to_a_typed_error(
    tags: dict[str, str], others: dict[str, str]
) -> None:
    properties = {**others, **{TAG_PREFIX + name: value for name, value in tags.items()}}
    found = tags_of(properties)
    for name, value in tags.items():
        valid = value.isdigit() and (value == "0" or not value.startswith("0")) and len(value) <= 19
        if valid:
            assert resolve_tag(properties, name) == int(value) == found[name]
        else:
            assert name not in found
            with pytest.raises(VersionNotFound, match=repr(name).replace(".", r"\.")):
                resolve_tag(properties, name)
    assert oldest_tag(properties) == min(found.values(), default=None)


@pytest.mark.parametrize("text", ["12", "+3", "-1", " 7", "a b", "", "x" * 200, "ü"])
def test_text_that_cannot_name_a_tag_is_invalid_argument(text: str) -> None:
    with pytest.raises(InvalidArgument):
        resolve_tag({TAG_PREFIX + "ok": "1"}, text)


LIFE = st.tuples(st.sampled_from("pqrs"), st.integers(0, 12), st.one_of(st.none(), st.integers(0, 12)))


@given(
    st.lists(LIFE, max_size=12),
    st.integers(0, 12),
    st.integers(0, 12),
    st.lists(st.integers(0, 12), max_size=3),
)
def test_vacuum_never_plans_a_file_a_tagged_version_lists(
    raw: list[tuple[str, int, int | None]], horizon: int, cutoff: int, tagged: list[int]
) -> None:
    """A file goes iff no life reaches a version ≥ H, no life spans a tagged version
    (added ≤ T < dropped) and its newest drop is older than the cut-off."""
    lives = []
    for path, added, length in raw:
        dropped = None if length is None else added + 1 + length
        lives.append(SegmentLife(path, 1, added, dropped, -1 if dropped is None else dropped))
    doomed, kept = dropped_files(lives, lambda p: p, horizon, -1, cutoff, tagged)
    planned = {life.path for life in doomed + kept}
    for path in "pqrs":
        group = [life for life in lives if life.path == path]
        needed = any(
            life.dropped is None
            or life.dropped > horizon
            or any(life.added <= t < life.dropped for t in tagged)
            for life in group
        )
        assert (path in planned) == (bool(group) and not needed)
    for life in doomed + kept:
        assert sorted(life.spans) == sorted((g.added, g.dropped) for g in lives if g.path == life.path)
