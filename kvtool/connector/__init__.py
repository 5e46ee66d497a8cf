"""kvtool's reference lazy-offload KV connector.

Engine-agnostic core (config, policies, manager, transfer, store); only
``kvtool.connector.vllm`` imports vLLM. This package imports nothing itself,
so the transfer engine loads with torch alone and the rest without torch.

Scheduler process (adapter's SCHEDULER role):

- ``config.ConnectorConfig.from_extra_config(kv_connector_extra_config)``;
  ``config.log_startup(logger)``.
- ``manager.LazyOffloadManager(config, pool_view, store.StoreIndex(...),
  world_size=..., group_tokens_per_block=[...], null_block_id=...)`` where
  ``pool_view`` implements ``blockpool.BlockPoolView`` over vLLM's ``BlockPool``.
- Per request: ``on_request_arrived(id)``, ``buffer_blocks(id, newly_full_block_ids)``,
  ``on_request_finished(id)`` (finish and abort; call it before the engine frees
  the blocks, as vLLM's ``request_finished`` is), ``on_request_preempted(id)``.
- Per step: ``step(StepInput(scheduled_tokens, allocated_block_ids))`` (every block
  the pass handed out, load targets included) -> ``StepResult.store_jobs`` to ship
  to workers (``before_forward`` ones, rescues, before the step's loads and forward);
  ``on_prefix_cache_reset()`` when the engine cleared its hashes; ``on_job_reports(reports)``
  with every worker's ``JobReport``; ``has_pending_work()`` for
  ``has_pending_push_work``.
- Hits: ``lookup(block_hashes)`` (no side effects), then
  ``plan_load(block_ids, block_hashes)`` -> ``LoadJob``.
- ``stats`` (``stats.ConnectorStats``), ``shutdown()``; with
  ``store.StoreIndex(..., record_events=True)``, ``store.take_events()`` lists
  the hashes that became or stopped being servable (KV events).

Worker processes (WORKER role): ``host_arena.allocate(bytes, rendezvous, ...)``
(one memfd per host, shared through a ``host_arena.Rendezvous`` among the engine's
ranks; ``None`` for a private arena), then
``transfer.TransferEngine.from_kv_caches(kv_caches, num_slots=store.num_slots,
block_dim=..., arena=arena.tensor)``; ``submit_store(job)`` in ``wait_for_save``
(a rescue's before the step's loads), ``submit_load(job)`` in ``start_load_kv``, ``poll()`` ->
``TransferResult(job_id, ok)`` to report back.
"""
