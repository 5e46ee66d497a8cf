"""EVICTION_AWARE: release a request's blocks just before the engine would recycle them.

Pure policy: it decides, the manager acts (LMCache's: https://github.com/LMCache/LMCache/blob/v0.5.6/lmcache/integration/vllm/lazy_offload_policy/eviction_aware.py).
Each step it reads the head of the engine's free queue (the danger window)
up to ``depth`` blocks that it will not release, where ``depth`` is the
predicted block consumption over ``horizon_steps`` steps, and looks each one
up in the manager's block index; while no finished request buffers
anything, nothing there can be buffered and it reads nothing. Per-step cost
is therefore O(depth + released), not O(everything buffered);
blocks recycled before reaching the window are found by the manager from the
step's allocations, not by re-validating the buffer.

A request with a block in the window releases its *due front*: every buffered
block up to the last one in the window, so what is stored is always a prefix.
Requests nearest the eviction head go first; a per-step block cap bounds the
burst; an optional deadline releases requests whose oldest buffered block is
older than ``max_deferral_seconds``, after the window candidates.

A request's blocks join the free queue when it finishes, between two steps,
and the engine's next scheduling pass may recycle them before any step sees
them; so at the finish (:meth:`EvictionAwarePolicy.release_at_finish`) the
whole buffer is released when the queue ahead is shorter than that pass can
allocate. O(1) per finish.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtool.connector.config import ConnectorConfig
from kvtool.connector.policies.base import (
    DrainPolicy,
    EvictionOrder,
    PendingView,
    Release,
    ReleaseReason,
    RequestKey,
    StepSignals,
    take_fronts,
)

EWMA_ALPHA = 0.3
"""Weight of the newest step in the consumption estimate (LMCache's calibrated value)."""

MIN_WINDOW_BLOCKS = 0.5
"""A predicted window under half a block means nothing is at risk: depth 0, so a
decayed estimate does not keep reading the queue head forever."""


class EvictionAwarePolicy(DrainPolicy):
    name = "eviction_aware"

    @classmethod
    def describe_knobs(cls, config: ConnectorConfig) -> list[str]:
        return [f"horizon_steps={config.horizon_steps:g}",
                f"max_deferral_seconds={config.max_deferral_seconds:g}"]

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self._blocks_per_step: float | None = None
        """EWMA of blocks allocated per step; None until the first step seeds it."""

    def observe(self, signals: StepSignals) -> None:
        allocated = float(signals.blocks_allocated)
        if self._blocks_per_step is None:
            self._blocks_per_step = allocated
        else:
            self._blocks_per_step = (
                EWMA_ALPHA * allocated + (1.0 - EWMA_ALPHA) * self._blocks_per_step
            )

    def danger_depth(self, signals: StepSignals) -> int:
        """Free-queue positions (from the head) whose blocks count as about to be recycled.

        Uses the larger of the recent consumption (EWMA) and this step's
        feed-forward estimate; never divides, so no estimate can be zero-divided.
        """
        return self._window(max(self._blocks_per_step or 0.0, float(signals.est_next_step_blocks)))

    def _window(self, blocks_per_step: float) -> int:
        window = blocks_per_step * self.config.horizon_steps
        return 0 if window < MIN_WINDOW_BLOCKS else math.ceil(window)

    def release_at_finish(
        self, request: RequestKey, pending: PendingView, free_blocks: int, max_step_blocks: int
    ) -> Release | None:
        """Release the whole buffer when the queue ahead is shorter than what the
        next scheduling pass may allocate.

        No window size read at a step covers this: the blocks were not in the
        queue at the last step, and the next pass allocates before the next one
        (in the e2e 24-block pool this recycled 9 of 32 blocks). The engine
        frees a request's blocks last-first, so its last buffered block lands
        nearest the head, at ``free_blocks`` or later; once that one is due, its
        front (everything buffered) is. The pass bound is used beside the
        smoothed rate because admissions after a decode phase come in bursts
        the rate does not predict.
        """
        if free_blocks >= max(self._window(self._blocks_per_step or 0.0), max_step_blocks):
            return None
        return Release(request, pending.span(request)[1], ReleaseReason.EVICTION_WINDOW)

    def _decide(
        self, signals: StepSignals, pending: PendingView, pool: EvictionOrder
    ) -> list[Release]:
        self.observe(signals)
        budget = self.config.max_release_blocks_per_step

        # request -> [first rank seen, last due ordinal]
        due: dict[RequestKey, list[int]] = {}
        # Only a finished (or preempted) request's buffered blocks can be in the free
        # queue: a running request holds its own. With none of those, the walk could
        # find nothing, so it reads nothing.
        depth = self.danger_depth(signals) if pending.finished_ready() else 0
        # Positions are counted after the blocks released now leave the queue:
        # protecting them moves every block behind them towards the head, so a
        # block just outside a plain window would be recycled before the next
        # step (the pin cascade). The walk stops after
        # ``depth`` other blocks or once the released blocks fill the budget.
        if depth > 0 and budget > 0:
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
        out: list[Release] = []
        if due:
            # Nearest the eviction head first; the sort only orders two or more.
            order = (sorted(due, key=lambda r: (due[r][0], pending.admission_order(r)))
                     if len(due) > 1 else list(due))
            out, budget = take_fronts(pending, ((r, due[r][1]) for r in order), budget,
                                      ReleaseReason.EVICTION_WINDOW)

        deferral = self.config.max_deferral_seconds
        if deferral > 0 and budget > 0:
            overdue = pending.iter_fronts_older_than(signals.now - deferral)
            try:
                late, _ = take_fronts(pending, ((r, None) for r in overdue if r not in due),
                                      budget, ReleaseReason.DEADLINE)
            finally:
                overdue.close()
            out += late
        return out
