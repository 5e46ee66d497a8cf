"""Counters for every decision the lazy-offload manager makes, as one object.

The unit is a block (one engine KV block, all layers). The ledger invariant,
checked by :meth:`ConnectorStats.ledger_balanced`, is::

    admitted == pending + in_flight + stored + failed + sum(dropped.values())

so every admitted block ends in exactly one outcome and none is lost silently.
Blocks refused at admission (``skipped_duplicate``, ``rejected_*``) were never
admitted and sit outside the ledger.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from enum import Enum
from operator import attrgetter


class DropReason(str, Enum):
    """Why an admitted block was not stored."""

    HASH_CHANGED_AT_RELEASE = "hash_changed_at_release"
    """The re-check after protecting found a changed hash."""
    PREFIX_BROKEN = "prefix_broken"
    """An earlier block of the same request was lost, so this one is unreachable."""
    STORE_FULL = "store_full"
    """The host store had no slot that was not in use by an in-flight transfer."""
    FAILED_STORE = "failed_store"
    """Buffered behind a block whose store failed (the prefix chain broke)."""
    RESET = "reset"
    """Buffered, or in flight, when the host store was reset (``reset_cache``)."""
    SHUTDOWN = "shutdown"
    """Buffered, or released but not yet shipped to a worker, when the connector shut
    down with ``shutdown=drop``."""


@dataclass
class ConnectorStats:
    """Running totals; ``pending`` and ``in_flight`` are gauges, the rest only grow
    (the Counters too: their entries are only ever increased)."""

    admitted: int = 0
    released: int = 0
    stored: int = 0
    stored_bytes: int = 0
    failed: int = 0
    pending: int = 0
    in_flight: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    lost_to_recycling: int = 0
    """Admitted blocks lost because one of them (or an earlier block of the same
    request) was found changed only when released, not among any step's allocations
    (which would have rescued it): ``dropped_hash_changed_at_release`` and the
    ``dropped_prefix_broken`` behind it. Only a deferring policy can lose a block
    this way (EAGER releases in the step that buffers it)."""
    rescued: int = 0
    """Admitted blocks the engine recycled before the policy released them, stored
    anyway by a copy ahead of the next loads and forward (``released_by_recycled``):
    each is a block the policy deferred too long, at the price of a copy on the
    forward's path instead of after it, and no hit lost."""
    skipped_duplicate: int = 0
    rejected_unhashed: int = 0
    skipped_outside_window: int = 0
    """Null blocks of a sliding-window block table (outside the window): neither
    stored nor loaded into, and no break in the request's chain."""
    rejected_prefix_broken: int = 0
    host_lookups: int = 0
    host_hits: int = 0
    loaded: int = 0
    loaded_bytes: int = 0
    load_failed: int = 0
    evicted_after_failed_load: int = 0
    """Host entries forgotten because a load that read them failed."""
    resets: int = 0
    store_evictions: int = 0
    idle_drains: int = 0
    released_by: Counter[str] = field(default_factory=Counter)
    revision: int = field(default=0, compare=False, metadata={"counter": False})
    """Not a counter: whoever changes a counter bumps it in the same call (:meth:`drop`
    does), so a reader can tell "nothing moved" from one int (:class:`ChangeReader`)."""

    def drop(self, reason: DropReason, n: int = 1) -> None:
        if n:
            self.dropped[reason.value] += n
            self.revision += 1

    def change_key(self) -> tuple[int, ...]:
        """A value that differs whenever any counter differs: the plain counters as they
        are, each Counter by its sum (its entries only grow). Cheap enough for every step."""
        return (*_int_counters(self), sum(self.dropped.values()),
                sum(self.released_by.values()))

    def ledger_balanced(self) -> bool:
        outcomes = self.pending + self.in_flight + self.stored + self.failed
        return self.admitted == outcomes + sum(self.dropped.values())

    def as_dict(self) -> dict[str, int]:
        """Flat ``name -> count`` view (``dropped_<reason>``, ``released_by_<policy reason>``)."""
        out = dict(zip(INT_COUNTERS, _int_counters(self), strict=True))
        for drop in DropReason:
            out[f"dropped_{drop.value}"] = self.dropped.get(drop.value, 0)
        for reason, count in sorted(self.released_by.items()):
            out[f"released_by_{reason}"] = count
        return out

    def summary(self) -> str:
        """One ``key=value`` log line with every non-zero counter."""
        return " ".join(f"{k}={v}" for k, v in self.as_dict().items() if v)


INT_COUNTERS: tuple[str, ...] = tuple(
    f.name for f in fields(ConnectorStats)
    if f.type in ("int", int) and f.metadata.get("counter", True)
)
"""The plain counters, in :meth:`ConnectorStats.change_key` order."""
_int_counters = attrgetter(*INT_COUNTERS)


class ChangeReader:
    """What moved in one :class:`ConnectorStats` since the previous :meth:`read`.

    Built for a per-step metrics hook: a read when nothing moved costs one int
    comparison of :attr:`ConnectorStats.revision` (so it is exact only if every
    change bumps it), one after a bump a :meth:`ConnectorStats.change_key`;
    otherwise only the moved counters are visited. The first read reports
    everything since the stats were new.
    """

    def __init__(self, stats: ConnectorStats, gauges: tuple[str, ...]) -> None:
        self._stats = stats
        self._gauges = gauges
        self._revision = -1  # no revision yet: the first read compares keys
        self._key = ConnectorStats().change_key()
        self._dropped: Counter[str] = Counter()
        self._released_by: Counter[str] = Counter()

    def read(self) -> tuple[dict[str, int], dict[str, int]] | None:
        """``(increments by as_dict name, gauge levels)``, or None when nothing moved."""
        stats = self._stats
        if stats.revision == self._revision:
            return None
        self._revision = stats.revision
        key = stats.change_key()
        if key == self._key:
            return None
        before, self._key = self._key, key
        increments = {
            name: now - then
            for name, now, then in zip(INT_COUNTERS, key, before, strict=False)
            if now != then and name not in self._gauges
        }
        n = len(INT_COUNTERS)
        if key[n] != before[n]:
            increments.update(_moved("dropped_", stats.dropped, self._dropped))
        if key[n + 1] != before[n + 1]:
            increments.update(_moved("released_by_", stats.released_by, self._released_by))
        return increments, {name: getattr(stats, name) for name in self._gauges}


def _moved(prefix: str, now: Counter[str], seen: Counter[str]) -> dict[str, int]:
    """Increments of ``now`` over ``seen``, named ``prefix + key``; ``seen`` catches up."""
    moved = {f"{prefix}{k}": v - seen[k] for k, v in now.items() if v != seen[k]}
    seen.clear()
    seen.update(now)
    return moved
