"""ConnectorStats.change_key: the adapter reports metrics only when it changes, so it
must change whenever any counter does."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import given
from hypothesis import strategies as st

from kvtool.connector.policies import ReleaseReason
from kvtool.connector.stats import ConnectorStats, DropReason

INT_FIELDS = [f.name for f in fields(ConnectorStats) if f.name not in ("dropped", "released_by")]

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
    for kind, what, n in steps:
        before_key, before = stats.change_key(), stats.as_dict()
        if kind == "int":
            assert isinstance(what, str)
            setattr(stats, what, getattr(stats, what) + n)
        elif kind == "drop":
            assert isinstance(what, DropReason)
            stats.drop(what, n)
        else:
            assert isinstance(what, ReleaseReason)
            stats.released_by[what.value] += n
        assert (stats.change_key() != before_key) == (stats.as_dict() != before)
