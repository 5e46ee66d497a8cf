"""FIFO: release finished requests in admission order once enough are ready.

Semantics (LMCache's FIFO, https://github.com/LMCache/LMCache/blob/v0.5.6/lmcache/integration/vllm/lazy_offload_policy/fifo.py):

- a request is *ready* while it is finished and still buffers blocks; the
  ready count is recomputed, not a counter, so released requests leave it;
- on a step that schedules at least one token, if ``ready >= threshold``, the
  ``select_count`` ready requests admitted first are released whole;
- with threshold 20 / select 10 and 25 ready, one step releases 10 and then
  nothing more until 5 more finish;
- unlike LMCache, the tail below the threshold is drained when the engine goes
  idle (base-class rule), and both knobs are validated to be >= 1;
- unlike LMCache, a block the engine recycles before FIFO released it is not
  lost: the manager rescues it, copied ahead of the forward that overwrites it
  (``rescued``), so FIFO keeps eager's hits under eviction pressure whatever its
  knobs; the knobs decide how many copies go after a forward (released here)
  and how many ahead of one (rescued).
"""

from __future__ import annotations

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
    take_fronts,
)


class FifoPolicy(DrainPolicy):
    name = "fifo"

    @classmethod
    def describe_knobs(cls, config: ConnectorConfig) -> list[str]:
        return [f"threshold={config.fifo_threshold}", f"select_count={config.fifo_select_count}"]

    def _decide(
        self, signals: StepSignals, pending: PendingView, pool: EvictionOrder
    ) -> list[Release]:
        if signals.scheduled_tokens == 0:
            return []
        if len(pending.finished_ready()) < self.config.fifo_threshold:
            return []
        # The manager keeps the ready set ordered: O(select * log ready) per trigger.
        chosen = pending.oldest_ready(self.config.fifo_select_count)
        return take_fronts(pending, ((r, None) for r in chosen),
                           self.config.max_release_blocks_per_step, ReleaseReason.THRESHOLD)[0]


POLICY = FifoPolicy  # what the registry (policies/__init__.py) registers from this module
