"""EAGER: release every block on the step that buffers it (the baseline lazy offload avoids).

Useful as the reference point for benchmarks and for operators who need every
block on the host as soon as it is computed. The step cap still applies; what
it holds back goes first on the next step.
"""

from __future__ import annotations

from kvtool.connector.policies.base import (
    DrainPolicy,
    EvictionOrder,
    PendingView,
    Release,
    ReleaseReason,
    StepSignals,
    release_oldest,
)


class EagerPolicy(DrainPolicy):
    name = "eager"

    def _decide(
        self, signals: StepSignals, pending: PendingView, pool: EvictionOrder
    ) -> list[Release]:
        # Under EAGER the buffer holds at most one step's blocks plus what the
        # cap held back, so walking it oldest-first is proportional to releases.
        return release_oldest(pending, self.config.max_release_blocks_per_step,
                              ReleaseReason.EAGER)


POLICY = EagerPolicy  # what the registry (policies/__init__.py) registers from this module
