"""kvtool.versions orders, prints and ranges versions exactly as ``packaging`` does.

``packaging`` is the reference implementation of PEP 440 that pip uses; kvtool keeps its
own small module only so that an audit's cold start does not import it (issue 26). The
versions are generated in every spelling the PEP's grammar allows, around the shapes
vLLM and LMCache releases take (``0.32.0``, ``0.9.2.post1``, ``0.11.0rc2``,
``0.10.1.dev3+g1234abc``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion as PackagingInvalidVersion
from packaging.version import Version as PackagingVersion

from kvtool.versions import InvalidSpecifier, InvalidVersion, Version, VersionRange

_small = st.integers(min_value=0, max_value=12)
_separator = st.sampled_from(["", ".", "-", "_"])
_pre_letter = st.sampled_from(["a", "alpha", "b", "beta", "c", "rc", "pre", "preview", "RC"])
_post_word = st.sampled_from(["post", "rev", "r", "POST"])


@st.composite
def version_texts(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(["", "v", "V", " "]))
    if draw(st.booleans()) and draw(st.booleans()):
        text += f"{draw(_small)}!"
    text += ".".join(str(draw(_small)) for _ in range(draw(st.integers(1, 4))))
    if draw(st.booleans()):
        number = draw(st.sampled_from(["", *map(str, range(4))]))
        text += f"{draw(_separator)}{draw(_pre_letter)}{draw(_separator) if number else ''}{number}"
    if draw(st.booleans()):
        if draw(st.booleans()):
            text += f"-{draw(_small)}"
        else:
            number = draw(st.sampled_from(["", *map(str, range(4))]))
            text += (
                f"{draw(_separator)}{draw(_post_word)}{draw(_separator) if number else ''}{number}"
            )
    if draw(st.booleans()):
        number = draw(st.sampled_from(["", *map(str, range(4))]))
        text += f"{draw(_separator)}dev{draw(_separator) if number else ''}{number}"
    if draw(st.booleans()) and draw(st.booleans()):
        parts = draw(
            st.lists(
                st.sampled_from(["g1a2b", "7", "ubuntu", "cu121", "0", "Abc"]),
                min_size=1,
                max_size=3,
            )
        )
        text += "+" + draw(_separator.filter(bool)).join(parts)
    return text


_near_misses = st.sampled_from(
    ["", "1.", ".1", "1..0", "1.0+", "1.0++a", "1.0-", "1.0a-", "x1.0", "1.0 2", "1!", "1.0.dev-"]
)


def _packaging(text: str) -> PackagingVersion | None:
    try:
        return PackagingVersion(text)
    except PackagingInvalidVersion:
        return None


def _ours(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


@settings(max_examples=400, deadline=None)
@given(st.one_of(version_texts(), _near_misses, st.text(max_size=12)))
def test_accepts_and_prints_what_packaging_does(text: str) -> None:
    reference, ours = _packaging(text), _ours(text)
    assert (ours is None) == (reference is None)
    if ours is not None and reference is not None:
        assert str(ours) == str(reference)
        assert ours.public == reference.public
        assert ours.base_version == reference.base_version
        assert (ours.release, ours.major, ours.minor, ours.micro) == (
            reference.release,
            reference.major,
            reference.minor,
            reference.micro,
        )
        assert ours.is_prerelease == reference.is_prerelease
        assert ours.is_postrelease == reference.is_postrelease


@settings(max_examples=400, deadline=None)
@given(version_texts(), version_texts())
def test_orders_as_packaging_does(left: str, right: str) -> None:
    a, b = Version(left), Version(right)
    pa, pb = PackagingVersion(left), PackagingVersion(right)
    assert (a < b, a == b, a > b) == (pa < pb, pa == pb, pa > pb)
    assert (hash(a) == hash(b)) or a != b


_operator = st.sampled_from(["<", "<=", ">", ">=", "==", "!=", "~="])


@st.composite
def range_texts(draw: st.DrawFn) -> str:
    clauses = draw(st.lists(st.tuples(_operator, version_texts()), min_size=0, max_size=3))
    return ",".join(
        f"{operator}{draw(st.sampled_from(['', ' ']))}{version.strip()}"
        for operator, version in clauses
    )


@settings(max_examples=600, deadline=None)
@given(range_texts(), version_texts())
def test_ranges_hold_as_packaging_sets_do(text: str, version: str) -> None:
    try:
        reference = SpecifierSet(text)
    except Exception:
        with pytest.raises(InvalidSpecifier):
            VersionRange(text)
        return
    assert VersionRange(text).contains(version) == reference.contains(version)


@pytest.mark.parametrize("text", ["===1.0", "==1.0.*", ">=1.0+local", "~=1", ">=", "1.0"])
def test_rejects_ranges_it_does_not_support(text: str) -> None:
    with pytest.raises(InvalidSpecifier):
        VersionRange(text)
