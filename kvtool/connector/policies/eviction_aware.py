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

The window is a prediction, not a worst-case bound: a block the next
scheduling pass takes before the window reached it (a request's blocks join
the free queue between two steps, a burst of admissions with host loads takes
more than the rate predicts) is rescued by the manager, copied ahead of that
step's forward (``rescued``), not lost. So a wider window only moves copies
off the forward's path, at the price of storing blocks the prefix cache would
have hit again; the horizon trades the two.
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
    StepSignals,
    release_due,
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
        """Free-queue positions (from the head) whose blocks count as about to be
        recycled: the predicted consumption over ``horizon_steps`` (the EWMA or this
        step's feed-forward estimate, whichever is larger). Never divides, so no
        estimate can be zero-divided."""
        blocks_per_step = max(self._blocks_per_step or 0.0, float(signals.est_next_step_blocks))
        window = blocks_per_step * self.config.horizon_steps
        return 0 if window < MIN_WINDOW_BLOCKS else math.ceil(window)

    def _decide(
        self, signals: StepSignals, pending: PendingView, pool: EvictionOrder
    ) -> list[Release]:
        self.observe(signals)
        depth = self.danger_depth(signals) if pending.finished_ready() else 0
        out, named, budget = release_due(pending, pool, depth,
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
