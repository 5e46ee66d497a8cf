"""The scheduler figures vLLM's KV capacity depends on: batch size, sequences, async scheduling.

``vllm serve`` defaults ``--max-num-batched-tokens`` and ``--max-num-seqs`` by the GPU
(``EngineArgs.get_batch_defaults``) and turns async scheduling on unless the V1 model
runner runs pipeline parallelism. Sliding-window and chunked-local groups reserve blocks
for the tokens in flight: ``max_concurrent_batches x max_num_batched_tokens``
(``VllmConfig.max_in_flight_tokens``), two batches under async scheduling, ``pp`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtool.sizing.deployment import Deployment
from kvtool.sizing.facts import SizingFacts


@dataclass(frozen=True)
class Scheduling:
    max_num_batched_tokens: int
    max_num_seqs: int
    async_scheduling: bool

    def concurrent_batches(self, pp: int) -> int:
        if self.async_scheduling and pp <= 1:
            return 2
        return pp

    def in_flight_tokens(self, pp: int) -> int:
        return self.concurrent_batches(pp) * self.max_num_batched_tokens


def resolve_scheduling(dep: Deployment, facts: SizingFacts) -> Scheduling:
    tokens, seqs = facts.serve_batch_defaults[dep.gpu.lower()]
    async_on = dep.async_scheduling
    if async_on is None:
        async_on = facts.async_scheduling_default and dep.pp <= 1
    return Scheduling(
        max_num_batched_tokens=dep.max_num_batched_tokens or tokens,
        max_num_seqs=dep.max_num_seqs or seqs,
        async_scheduling=async_on,
    )
