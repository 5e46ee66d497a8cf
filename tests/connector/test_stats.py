"""ConnectorStats.change_key and ChangeReader: the adapter reports metrics each step
from what moved since the last report, so nothing may be missed or counted twice."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from kvtool.connector.policies import ReleaseReason
from kvtool.connector.stats import INT_COUNTERS, ChangeReader, ConnectorStats, DropReason

GAUGES = ("pending", "in_flight")
INT_FIELDS = list(INT_COUNTERS)

# One update the manager makes: add to a plain counter (gauges may go down), count a
# drop, or count a release by reason.
updates = st.one_of(
    st.tuples(st.just("int"), st.sampled_from(INT_FIELDS), st.integers(-3, 3)),
    st.tuples(st.just("drop"), st.sampled_from(list(DropReason)), st.integers(0, 3)),
    st.tuples(st.just("release"), st.sampled_from(list(ReleaseReason)), st.integers(1, 3)),
)


@given(st.lists(updates, max_size=30))
def test_change_key_changes_exactly_when_the_counters_do(
    steps: list[tuple[str, object, int]],
) -> None:
    stats = ConnectorStats()
    for step in steps:
        before_key, before = stats.change_key(), stats.as_dict()
        _apply(stats, step)
        assert (stats.change_key() != before_key) == (stats.as_dict() != before)


def _apply(stats: ConnectorStats, step: tuple[str, object, int]) -> None:
    """One update, made as the manager makes it: a change bumps the revision
    (``drop`` bumps it itself)."""
    kind, what, n = step
    if kind == "int":
        assert isinstance(what, str)
        setattr(stats, what, getattr(stats, what) + n)
        stats.revision += 1
    elif kind == "drop":
        assert isinstance(what, DropReason)
        stats.drop(what, n)
    else:
        assert isinstance(what, ReleaseReason)
        stats.released_by[what.value] += n
        stats.revision += 1


@given(st.lists(st.lists(updates, max_size=4), max_size=12))
def test_change_reader_reports_what_moved_between_reads(
    reads: list[list[tuple[str, object, int]]],
) -> None:
    """Summed over reads, the increments are the counters' totals; gauges are levels."""
    stats = ConnectorStats()
    reader = ChangeReader(stats, GAUGES)
    summed: Counter[str] = Counter()
    for steps in reads:
        before = stats.as_dict()
        for step in steps:
            _apply(stats, step)
        moved = reader.read()
        if stats.as_dict() == before:
            assert moved is None
            continue
        assert moved is not None
        increments, gauges = moved
        assert gauges == {name: getattr(stats, name) for name in GAUGES}
        assert 0 not in increments.values() and not set(increments) & set(GAUGES)
        summed.update(increments)
    totals = {k: v for k, v in stats.as_dict().items() if k not in GAUGES and v}
    assert {k: v for k, v in summed.items() if v} == totals


def test_the_revision_is_not_reported_as_a_counter() -> None:
    stats = ConnectorStats()
    stats.admitted += 1
    stats.revision += 1
    assert "revision" not in stats.as_dict() and "revision" not in stats.summary()
    reader = ChangeReader(stats, GAUGES)
    assert reader.read() == ({"admitted": 1}, {"pending": 0, "in_flight": 0})
    stats.revision += 1  # bumped, but no counter moved
    assert reader.read() is None
