"""The drain-policy contract: a policy decides which buffered blocks to release; the manager acts.

A policy never protects, submits or drops anything. Each scheduler step the
manager calls :meth:`DrainPolicy.decide` with the step's signals, a read-only
view of what is buffered and the engine's eviction order, and gets back a list
of :class:`Release` decisions that it then carries out (protect, re-check the
hashes, submit). LMCache's policies:
https://github.com/LMCache/LMCache/tree/v0.5.6/lmcache/integration/vllm/lazy_offload_policy
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Generator, Iterable, Iterator, Mapping
from enum import Enum
from itertools import compress, count, islice
from typing import TYPE_CHECKING, ClassVar, NamedTuple, Protocol

if TYPE_CHECKING:  # the config module reads the policy registry: no import at run time
    from kvtool.connector.config import ConnectorConfig


class RequestKey(NamedTuple):
    """One generation of one request: preemption and id reuse start a new serial."""

    request_id: str
    serial: int


class ReleaseReason(str, Enum):
    EAGER = "eager"
    THRESHOLD = "threshold"
    EVICTION_WINDOW = "eviction_window"
    DEADLINE = "deadline"
    IDLE = "idle"
    SHUTDOWN = "shutdown"
    RECYCLED = "recycled"
    """The manager's own release (no policy decides it): the engine recycled the block
    before the policy released it, so it is copied before anything overwrites it."""


class Release(NamedTuple):
    """Release ``request``'s buffered blocks from its front through ordinal ``through``.

    Ordinals number a request's admitted blocks 0, 1, 2, ... in token order;
    releasing always takes a front segment, so what is stored is a prefix.
    """

    request: RequestKey
    through: int
    reason: ReleaseReason


class StepSignals(NamedTuple):
    """What the manager knows about the step being scheduled (a NamedTuple: one is
    built every engine step, far cheaper than a frozen dataclass)."""

    now: float
    scheduled_tokens: int
    blocks_allocated: int
    """Blocks the engine handed out this step (gross, prefix-cache hits included)."""
    est_next_step_blocks: int
    """Sum over KV groups with tokens_per_block > 0 of ceil(scheduled_tokens / tokens_per_block)."""
    idle_steps: int
    """Consecutive steps, this one included, that scheduled no token (0 on a token step)."""
    idle_seconds: float
    """Seconds since the last step that scheduled a token (0 on a token step)."""


class PendingView(Protocol):
    """Read-only view of the manager's buffer, with costs the policies rely on."""

    @property
    def pending_blocks(self) -> int:
        """Blocks buffered in all requests."""

    def finished_ready(self) -> Mapping[RequestKey, int]:
        """Finished requests that still buffer blocks -> admission order number. O(1)."""

    def oldest_ready(self, count: int) -> list[RequestKey]:
        """The ``count`` finished requests that still buffer blocks and were admitted
        first, oldest first (fewer if fewer are ready). O(count log ready), amortised."""

    def block_index(self) -> Mapping[int, tuple[RequestKey, int]]:
        """Buffered block id -> (request, ordinal) holding it, O(1) per lookup: the
        manager's own index, valid until the manager next changes; read it, never
        write it."""

    def span(self, request: RequestKey) -> tuple[int, int]:
        """(first, last) buffered ordinal of a request that buffers blocks. O(1)."""

    def admission_order(self, request: RequestKey) -> int:
        """Order in which requests first buffered a block; smaller is older. O(1)."""

    def iter_requests(self) -> Iterator[RequestKey]:
        """Requests that buffer blocks, oldest admission first; lazy, O(1) per item."""

    def iter_fronts_older_than(self, cutoff: float) -> Generator[RequestKey, None, None]:
        """Requests whose oldest buffered block was admitted at or before ``cutoff``,
        oldest first; O(log n) per item. Produced on demand: close() it when done."""


class EvictionOrder(Protocol):
    def iter_eviction_order(self) -> Iterator[int]:
        """Free block ids from the eviction head onwards (lazy)."""


class DrainPolicy(ABC):
    """Decides, once per scheduler step, which buffered blocks to release.

    Invariants every policy keeps:

    - :meth:`decide` returns at most one :class:`Release` per request, each for
      a request that buffers blocks, with ``first <= through <= last`` of its
      span, and the released blocks add up to at most
      ``config.max_release_blocks_per_step``;
    - no side effects outside the policy's own counters and estimators: the
      same inputs in the same state give the same decisions;
    - the cost of one call is proportional to the blocks it inspects near the
      eviction head or releases, never to everything that is buffered;
    - the tail drains when the engine goes idle: once ``idle_drain_steps``
      consecutive steps (or ``idle_drain_seconds``) pass without a scheduled
      token, everything buffered is released, oldest first, at the step cap.
    """

    name: ClassVar[str]
    """The ``kvtool.policy`` value; its own knobs are the ``kvtool.<name>.*`` keys."""

    def __init__(self, config: ConnectorConfig) -> None:
        self.config = config

    @classmethod
    def describe_knobs(cls, config: ConnectorConfig) -> list[str]:
        """``key=value`` of the policy's own settings, for the start-up log line."""
        return []

    def decide(
        self, signals: StepSignals, pending: PendingView, pool: EvictionOrder
    ) -> list[Release]:
        """Decisions for this step; see the class invariants."""
        if pending.pending_blocks == 0:
            self.observe(signals)
            return []
        if signals.scheduled_tokens == 0 and self._engine_idle(signals):
            self.observe(signals)
            return release_oldest(pending, self.config.max_release_blocks_per_step,
                                  ReleaseReason.IDLE)
        return self._decide(signals, pending, pool)

    def observe(self, signals: StepSignals) -> None:  # noqa: B027 - optional hook
        """Update estimators on a step whose decision does not come from :meth:`_decide`."""

    @abstractmethod
    def _decide(
        self, signals: StepSignals, pending: PendingView, pool: EvictionOrder
    ) -> list[Release]:
        """The policy's own rule; called only when something is buffered and not idle."""

    def _engine_idle(self, signals: StepSignals) -> bool:
        if signals.scheduled_tokens > 0:
            return False
        by_steps = signals.idle_steps >= self.config.idle_drain_steps
        seconds = self.config.idle_drain_seconds
        return by_steps or (seconds > 0 and signals.idle_seconds >= seconds)


def release_due(
    pending: PendingView, pool: EvictionOrder, depth: int, budget: int
) -> tuple[list[Release], set[RequestKey], int]:
    """The due front of each finished request with a buffered block among the first
    ``depth`` free-queue positions (see :func:`due_in_window`), nearest the eviction
    head first, until ``budget`` blocks.

    Returns the releases, the requests they name, and the budget left. Costs
    O(depth + released). A block the next pass recycles before any release
    reached it is not lost: the manager rescues it (``ReleaseReason.RECYCLED``).
    """
    out: list[Release] = []
    named: set[RequestKey] = set()
    if budget <= 0 or depth <= 0 or not pending.finished_ready():
        return out, named, budget
    due = due_in_window(pending, pool, depth, budget)
    if due:
        # Nearest the eviction head first; the sort only orders two or more.
        order = (sorted(due, key=lambda r: (due[r][0], pending.admission_order(r)))
                 if len(due) > 1 else list(due))
        out, budget = take_fronts(pending, ((r, due[r][1]) for r in order), budget,
                                  ReleaseReason.EVICTION_WINDOW)
        named.update(r.request for r in out)
    return out, named, budget


def due_in_window(
    pending: PendingView, pool: EvictionOrder, depth: int, budget: int
) -> dict[RequestKey, list[int]]:
    """Requests with a buffered block within ``depth`` free-queue positions of the
    eviction head -> [rank of their first such block, last such ordinal].

    Positions are counted after the blocks released now leave the queue:
    protecting them moves every block behind them towards the head, so a block
    just outside a plain window would be recycled before the next step (the pin
    cascade). The walk stops after ``depth`` other blocks or once the blocks found
    fill ``budget``. Only a finished (or preempted) request's buffered blocks can
    be in the free queue: a running request holds its own.
    """
    due: dict[RequestKey, list[int]] = {}
    if depth <= 0 or budget <= 0:
        return due
    lookup = pending.block_index().get
    order = pool.iter_eviction_order()
    others = found = start = 0
    # Read in chunks of the ``depth - others`` blocks the walk must read before it
    # can stop on them (looked up by map, in C), then visit only the hits: most
    # blocks near the head are not buffered, and a Python loop over each of them
    # cost a dict lookup per block per step.
    while others < depth:
        chunk = list(map(lookup, islice(order, depth - others)))
        if not chunk:
            break
        hits = 0
        for offset in compress(count(start), chunk):  # a hit is a tuple, a miss None
            hit = chunk[offset - start]
            assert hit is not None  # compress() kept only the hits
            request, ordinal = hit
            seen = due.get(request)
            if seen is None:
                due[request] = [offset, ordinal]
            elif ordinal > seen[1]:
                seen[1] = ordinal
            hits += 1
            found += 1
            if found >= budget:
                return due
        others += len(chunk) - hits
        start += len(chunk)
    return due


def release_oldest(pending: PendingView, budget: int, reason: ReleaseReason) -> list[Release]:
    """Whole requests in admission order until ``budget`` blocks; the last may be cut."""
    return take_fronts(pending, ((r, None) for r in pending.iter_requests()), budget, reason)[0]


def take_fronts(
    pending: PendingView,
    wanted: Iterable[tuple[RequestKey, int | None]],
    budget: int,
    reason: ReleaseReason,
) -> tuple[list[Release], int]:
    """Release each wanted request's front through the given ordinal (None: all it
    buffers), in the given order, until ``budget`` blocks; the last may be cut.

    Returns the releases and the budget left. ``wanted`` is read lazily and not
    past the item on which the budget runs out.
    """
    out: list[Release] = []
    if budget <= 0:
        return out, budget
    for request, through in wanted:
        first, last = pending.span(request)
        cut = min(last if through is None else through, first + budget - 1)
        out.append(Release(request, cut, reason))
        budget -= cut - first + 1
        if budget <= 0:
            break
    return out, budget
