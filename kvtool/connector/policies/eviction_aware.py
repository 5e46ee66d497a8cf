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
allocate. O(1) per finish. And when the free queue is shorter than what the
next pass may take, that pass preempts running requests and may recycle their
blocks at once: their buffers are released too (:func:`release_at_risk`, shared
with FIFO).
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
    release_at_risk,
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

        The larger of the predicted consumption over ``horizon_steps`` (the EWMA or
        this step's feed-forward estimate, whichever is larger) and the most the
        next scheduling pass may allocate (``signals.pass_bound``): one pass with
        host loads, which use no token budget, took 41 blocks where the token
        budget predicted 20, and recycled what a smaller window left buffered.
        Never divides, so no estimate can be zero-divided.
        """
        predicted = self._window(max(self._blocks_per_step or 0.0,
                                     float(signals.est_next_step_blocks)))
        return max(predicted, signals.pass_bound)

    def _window(self, blocks_per_step: float) -> int:
        window = blocks_per_step * self.config.horizon_steps
        return 0 if window < MIN_WINDOW_BLOCKS else math.ceil(window)

    def release_at_finish(
        self, request: RequestKey, pending: PendingView, free_blocks: int, max_step_blocks: int
    ) -> Release | None:
        """The base rule, with the window the smoothed rate predicts when that is
        larger: admissions after a decode phase come in bursts the rate does not
        predict, and a long decode phase the pass bound does not (in the e2e
        24-block pool, a plain window recycled 9 of 32 blocks)."""
        bound = max(self._window(self._blocks_per_step or 0.0), max_step_blocks)
        return super().release_at_finish(request, pending, free_blocks, bound)

    def _decide(
        self, signals: StepSignals, pending: PendingView, pool: EvictionOrder
    ) -> list[Release]:
        self.observe(signals)
        depth = self.danger_depth(signals) if pending.finished_ready() else 0
        out, named, budget = release_at_risk(signals, pending, pool, depth,
                                             self.config.max_release_blocks_per_step)
        deferral = self.config.max_deferral_seconds
        if deferral > 0 and budget > 0:
            overdue = pending.iter_fronts_older_than(signals.now - deferral)
            try:
                late, _ = take_fronts(pending, ((r, None) for r in overdue if r not in named),
                                      budget, ReleaseReason.DEADLINE)
            finally:
                overdue.close()
            out += late
        return out


POLICY = EvictionAwarePolicy  # what the registry (policies/__init__.py) registers from this module
