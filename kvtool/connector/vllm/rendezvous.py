"""The ranks of one vLLM engine, as a :class:`~kvtool.connector.host_arena.Rendezvous`.

The workers gather over the engine's tensor-, prefill-context- and
pipeline-parallel CPU (gloo) groups in turn, the groups vLLM itself uses to
agree on the connector's engine id just before it builds the connector
(``_sync_engine_id_across_tp``, TP then PP,
https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/distributed/kv_transfer/kv_transfer_state.py).
Their product is one engine's ranks. The world group would also span the other
data-parallel replicas (vLLM adds their ranks to it), each a separate engine with
its own engine core and its own arenas: a collective there would couple engines
that vLLM starts independently.

Every worker of an engine calls ``register_kv_caches`` once, from
``Worker.initialize_from_config``, which the engine core runs on every worker
(``collective_rpc``), after ``init_device`` initialised the distributed groups;
vLLM skips it only for the profiling pass, on every rank alike
(``initialize_kv_cache`` in
https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/worker/gpu_model_runner.py),
so a collective there is joined by all of them.
"""

from __future__ import annotations

from kvtool.connector.host_arena import ProcessGroupRendezvous


def engine_rendezvous() -> tuple[ProcessGroupRendezvous | None, str]:
    """This engine's ranks, or None and why there are none to gather (ranks that share
    one process, as the tests drive them, have no ``torch.distributed``)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None, "torch.distributed is not initialised (ranks in one process)"
    # Names, not the module, so tests/releases/test_adapter_api.py checks each one
    # exists in every supported release.
    from vllm.distributed.parallel_state import (
        get_pcp_group,
        get_pp_group,
        get_tp_group,
        get_world_group,
        model_parallel_is_initialized,
    )

    if not model_parallel_is_initialized():
        return None, "vLLM's model-parallel groups are not initialised"
    try:
        groups = [get_tp_group(), get_pcp_group(), get_pp_group()]
        rank = int(get_world_group().rank)
    except AssertionError as exc:  # a group vLLM did not build
        return None, f"vLLM's parallel groups are incomplete: {exc}"
    return ProcessGroupRendezvous([group.cpu_group for group in groups], rank), ""
