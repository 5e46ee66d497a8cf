"""One bound on a simulation's work: every setting of a sweep, every request, every step.

The unit is one block of one request or one scheduler step, per setting, and a
request costs :data:`REQUEST_WORK` units more than its blocks (admission, host
lookup, finish and the manager's per-request calls weigh about as much as that
many blocks): what the simulator's time grows with. The bound is ``limits.SIMULATE_WORK``
(``KVTOOL_LIMIT_SIMULATE_WORK``). A run is refused before it starts when its
estimate is over the bound, and stopped if it gets there anyway (an estimate
cannot know how many steps the engine will take), so no input runs past it.
"""

from __future__ import annotations

from kvtool import limits

REQUEST_WORK = 16
"""Work units of one request beyond its blocks."""


class WorkMeter:
    """Work charged so far against one limit shared by the runs of a sweep."""

    def __init__(self, limit: float, what: str) -> None:
        self.limit = limit
        self.what = what
        self.used = 0

    @classmethod
    def from_limits(cls, what: str) -> WorkMeter:
        return cls(limits.SIMULATE_WORK.value, what)

    @classmethod
    def unbounded(cls) -> WorkMeter:
        return cls(float("inf"), "")

    def check_estimate(self, amount: int, what: str) -> None:
        """Refuse a run whose estimated work is over the limit, before it starts."""
        if amount > self.limit:
            raise limits.LimitExceeded(
                limits.SIMULATE_WORK.message(f"{what}: about {amount:,} work units"))

    def charge(self, amount: int, where: str) -> None:
        self.used += amount
        if self.used > self.limit:
            raise limits.LimitExceeded(limits.SIMULATE_WORK.message(
                f"{self.what or 'simulate'}: stopped in {where} after {self.used:,} work units"))
