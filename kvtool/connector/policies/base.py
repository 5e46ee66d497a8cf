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
    PREEMPTION_RISK = "preemption_risk"
    DEADLINE = "deadline"
    IDLE = "idle"
    SHUTDOWN = "shutdown"


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
    num_free: int = 0
    """Blocks in the engine's free queue now."""
    pass_bound: int = 0
    """Most blocks the next scheduling pass may take from the free queue's head before
    the next decision (0 = unknown): its token budget in blocks, a partly filled block
    per request, host loads (which use no token budget), and the most any pass took so
    far. A block nearer the head than this may be recycled before the next step."""
    running_demand: int | None = None
    """Most blocks the running requests themselves may need in the next pass (one per
    request, plus the token budget in blocks while one is still prefilling): vLLM
    preempts only when those do not fit in the free queue (a waiting request that does
    not fit just waits). None: unknown, ``pass_bound`` is used."""


class PendingView(Protocol):
    """Read-only view of the manager's buffer, with costs the policies rely on."""

    @property
    def pending_blocks(self) -> int:
        """Blocks buffered in all requests."""

    def finished_ready(self) -> Mapping[RequestKey, int]:
        """Finished requests that still buffer blocks -> admission order number. O(1)."""

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

    def running_newest_first(self) -> list[RequestKey]:
        """Running (not finished, not preempted) requests that buffer blocks, newest
        admission first. O(running requests): vLLM runs at most ``max_num_seqs``."""

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

    def release_at_finish(
        self, request: RequestKey, pending: PendingView, free_blocks: int, max_step_blocks: int
    ) -> Release | None:
        """``request`` finished and still buffers blocks; the engine is about to append
        its blocks to the free queue behind ``free_blocks`` others, and its next
        scheduling pass allocates (up to ``max_step_blocks``, 0 = unknown) before
        the next :meth:`decide` runs. A Release protects the request's front now;
        None leaves it to :meth:`decide`. O(1).

        The default releases the whole buffer when that pass could reach it: no
        decision at a step can, as the blocks were not in the queue then. The
        engine frees a request's blocks last-first, so its last buffered block
        lands nearest the head, at ``free_blocks``; once that one is due, its
        front (everything buffered) is.
        """
        if free_blocks >= max_step_blocks:
            return None
        return Release(request, pending.span(request)[1], ReleaseReason.EVICTION_WINDOW)

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


def release_at_risk(
    signals: StepSignals, pending: PendingView, pool: EvictionOrder, depth: int, budget: int
) -> tuple[list[Release], set[RequestKey], int]:
    """What the next scheduling pass may recycle before the next decision, released:

    - when the free queue holds fewer blocks than the running requests may need
      (``signals.running_demand``), the pass may preempt running requests and hand
      their blocks out again at once, to them and to the requests it admits
      (``signals.pass_bound`` in all): vLLM preempts the newest running request
      first, so the buffers of the newest running requests are released until
      they cover what the pass may take beyond the free queue;
    - the due front of each finished request with a buffered block among the
      first ``depth`` free-queue positions (see :func:`due_in_window`).

    Returns the releases, the requests they name, and the budget left. Costs
    O(depth + running requests + released).
    """
    out: list[Release] = []
    named: set[RequestKey] = set()
    if budget <= 0:
        return out, named, budget
    ready = pending.finished_ready()
    demand = signals.pass_bound if signals.running_demand is None else signals.running_demand
    shortfall = signals.pass_bound - signals.num_free
    if signals.pass_bound and signals.num_free < demand and shortfall > 0:
        at_risk: list[tuple[RequestKey, int | None]] = []
        for request in pending.running_newest_first():
            at_risk.append((request, None))
            first, last = pending.span(request)
            shortfall -= last - first + 1
            if shortfall <= 0:
                break
        taken, budget = take_fronts(pending, at_risk, budget, ReleaseReason.PREEMPTION_RISK)
        out += taken
        named.update(r.request for r in taken)
    due = due_in_window(pending, pool, depth, budget) if ready and budget > 0 else {}
    if due:
        # Nearest the eviction head first; the sort only orders two or more.
        order = (sorted(due, key=lambda r: (due[r][0], pending.admission_order(r)))
                 if len(due) > 1 else list(due))
        taken, budget = take_fronts(pending, ((r, due[r][1]) for r in order), budget,
                                    ReleaseReason.EVICTION_WINDOW)
        out += taken
        named.update(r.request for r in taken)
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
    index = pending.block_index()
    others = found = 0
    for rank, block_id in enumerate(pool.iter_eviction_order()):
        hit = index.get(block_id)
        if hit is None:
            others += 1
            if others >= depth:
                break
            continue
        request, ordinal = hit
        seen = due.get(request)
        if seen is None:
            due[request] = [rank, ordinal]
        elif ordinal > seen[1]:
            seen[1] = ordinal
        found += 1
        if found >= budget:
            break
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
