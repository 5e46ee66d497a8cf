"""Transfer engine round trips on CPU tensors, and on CUDA when a GPU is present; the
order of per-layer loads on a stream stand-in (lazy_streams.py).

Imports only torch, kvtool.connector.transfer and tests/connector/lazy_streams.py,
so scripts/gpu_check.sh can run it on a GPU machine that has torch but not
kvtool's other dependencies.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kvtool.connector.transfer import (  # noqa: E402
    MAX_SLICE_COPIES,
    LoadWait,
    TransferEngine,
    block_segments,
    joint_runs,
    stacked_view,
    widest_view,
)
from tests.connector.lazy_streams import LazyQueue  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@dataclass(frozen=True)
class Job:
    job_id: int
    block_ids: tuple[int, ...]
    slots: tuple[int, ...]
    keys: tuple[Hashable, ...]


def _kv_cpu_layout(device: str, num_blocks: int = 32) -> dict[str, torch.Tensor]:
    # vLLM CPU backend layout per layer: [num_blocks, kv_heads, block_size, 2*head]
    # (vllm-on-cpu.md §3.4), bf16.
    gen = torch.Generator().manual_seed(0)
    return {
        f"layer{i}": torch.randn(num_blocks, 2, 16, 64, generator=gen).to(torch.bfloat16).to(device)
        for i in range(3)
    }


def _run(engine: TransferEngine, job: Job, store: bool) -> bool:
    (engine.submit_store if store else engine.submit_load)(job)
    (result,) = engine.wait_all()
    assert result.job_id == job.job_id
    return result.ok


@pytest.mark.parametrize("device", DEVICES)
def test_store_then_load_restores_scattered_blocks_byte_for_byte(device: str) -> None:
    kv = _kv_cpu_layout(device)
    original = {name: t.clone() for name, t in kv.items()}
    engine = TransferEngine.from_kv_caches(kv, num_slots=16)
    blocks = (3, 17, 4, 30, 9)
    slots = (0, 1, 2, 7, 8)  # two runs
    keys = tuple(("h", b) for b in blocks)
    assert _run(engine, Job(1, blocks, slots, keys), store=True)
    for t in kv.values():
        t.zero_()
    targets = (20, 21, 5, 6, 0)  # load into other blocks than they came from
    assert _run(engine, Job(2, targets, slots, keys), store=False)
    for name, t in kv.items():
        for src, dst in zip(blocks, targets, strict=True):
            assert torch.equal(t[dst], original[name][src]), (name, src, dst)
        assert torch.count_nonzero(t[1].float()) == 0  # untouched blocks stay untouched


@pytest.mark.parametrize("device", DEVICES)
def test_flash_attention_layout_with_kv_leading_dimension(device: str) -> None:
    # CUDA flash-attention layout [2, num_blocks, block_size, heads, head]: block_dim=1.
    kv = {"l0": torch.arange(2 * 8 * 4 * 2 * 3, dtype=torch.float16).reshape(2, 8, 4, 2, 3)}
    kv = {k: v.to(device) for k, v in kv.items()}
    original = kv["l0"].clone()
    engine = TransferEngine.from_kv_caches(kv, num_slots=4, block_dim=1)
    assert len(engine.segments) == 2 and engine.block_bytes == 2 * 4 * 2 * 3 * 2
    assert _run(engine, Job(1, (6, 1), (2, 3), ("a", "b")), store=True)
    kv["l0"].zero_()
    assert _run(engine, Job(2, (0, 7), (2, 3), ("a", "b")), store=False)
    assert torch.equal(kv["l0"][:, 0], original[:, 6])
    assert torch.equal(kv["l0"][:, 7], original[:, 1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("blocks", "slots", "targets"), [
    ((4, 5, 6), (1, 2, 3), (10, 11, 12)),  # blocks and slots consecutive: slice copies
    ((9, 2, 7), (1, 2, 3), (0, 13, 5)),    # one slot run, scattered blocks: index copies
])
def test_round_trip_of_one_slot_run(
    device: str, blocks: tuple[int, ...], slots: tuple[int, ...], targets: tuple[int, ...]
) -> None:
    kv = _kv_cpu_layout(device, num_blocks=16)
    original = {name: t.clone() for name, t in kv.items()}
    engine = TransferEngine.from_kv_caches(kv, num_slots=4)
    keys = tuple(("h", b) for b in blocks)
    assert _run(engine, Job(1, blocks, slots, keys), store=True)
    for t in kv.values():
        t.zero_()
    assert _run(engine, Job(2, targets, slots, keys), store=False)
    for name, t in kv.items():
        for src, dst in zip(blocks, targets, strict=True):
            assert torch.equal(t[dst], original[name][src]), (name, src, dst)
        untouched = [b for b in range(16) if b not in targets]
        assert torch.count_nonzero(t[untouched].float()) == 0


def test_load_with_a_wrong_key_fails_and_copies_nothing() -> None:
    kv = _kv_cpu_layout("cpu", num_blocks=8)
    engine = TransferEngine.from_kv_caches(kv, num_slots=4)
    assert _run(engine, Job(1, (1,), (0,), (("fp-model-a", "h1"),)), store=True)
    before = kv["layer0"][5].clone()
    engine.submit_load(Job(2, (5,), (0,), (("fp-model-b", "h1"),)))
    (result,) = engine.poll()
    assert not result.ok and "do not hold" in result.error
    assert torch.equal(kv["layer0"][5], before)


def test_bad_block_id_reports_a_failed_job() -> None:
    engine = TransferEngine.from_kv_caches(_kv_cpu_layout("cpu", num_blocks=8), num_slots=4)
    engine.submit_store(Job(1, (99,), (0,), ("k",)))
    (result,) = engine.poll()
    assert not result.ok
    engine.submit_load(Job(2, (0,), (0,), ("k",)))  # the failed store left no key behind
    assert not engine.poll()[0].ok


def test_a_run_reaching_past_the_last_block_fails_and_copies_nothing() -> None:
    kv = _kv_cpu_layout("cpu", num_blocks=8)
    engine = TransferEngine.from_kv_caches(kv, num_slots=4)
    assert _run(engine, Job(1, (0, 1), (0, 1), ("a", "b")), store=True)
    before = kv["layer0"].clone()
    engine.submit_load(Job(2, (7, 8), (0, 1), ("a", "b")))  # consecutive, one block too far
    (result,) = engine.poll()
    assert not result.ok and "outside the engine's 8 blocks" in result.error
    assert torch.equal(kv["layer0"], before)


def test_segments_keep_the_engine_block_stride_without_copying() -> None:
    # Two layers interleaved in one storage, as vLLM's cross-layer KV tensors can be.
    storage = torch.arange(8 * 2 * 6, dtype=torch.int16).reshape(8, 2, 6)
    layer = storage[:, 0]  # [8, 6], block stride 12 elements
    (segment,) = block_segments(layer)
    assert segment.data_ptr() == layer.data_ptr() and segment.shape == (8, 12)
    assert torch.equal(segment[3].view(torch.int16), layer[3])


@pytest.mark.parametrize("device", DEVICES)
def test_round_trip_through_layers_interleaved_in_one_storage(device: str) -> None:
    storage = torch.randn(16, 2, 8, 4).to(device)  # [blocks, layer, ...]: strided layers
    kv = {"a": storage[:, 0], "b": storage[:, 1]}
    original = storage.clone()
    engine = TransferEngine.from_kv_caches(kv, num_slots=4)
    assert _run(engine, Job(1, (9, 3, 12), (2, 3, 0), ("x", "y", "z")), store=True)
    storage.zero_()
    assert _run(engine, Job(2, (9, 3, 12), (2, 3, 0), ("x", "y", "z")), store=False)
    for block in (9, 3, 12):
        assert torch.equal(storage[block], original[block])
    assert torch.count_nonzero(storage[0]) == 0


def test_layers_back_to_back_in_one_storage_copy_as_one_stacked_view() -> None:
    # vLLM's CPU backend: every layer's [blocks, ...] tensor in one allocation, in turn.
    storage = torch.randn(3, 16, 2, 8, 4).to(torch.bfloat16)
    kv = {f"layer{i}": storage[i] for i in range(3)}
    original = storage.clone()
    engine = TransferEngine.from_kv_caches(kv, num_slots=4)
    stacked = stacked_view(engine.segments)
    assert stacked is not None and stacked.shape == (3, 16, engine.segments[0].shape[1])
    assert [stacked[i].data_ptr() for i in range(3)] == [s.data_ptr() for s in engine.segments]
    assert _run(engine, Job(1, (9, 3, 12), (2, 3, 0), ("x", "y", "z")), store=True)
    storage.zero_()
    assert _run(engine, Job(2, (1, 2, 3), (2, 3, 0), ("x", "y", "z")), store=False)
    for src, dst in ((9, 1), (3, 2), (12, 3)):
        assert torch.equal(storage[:, dst], original[:, src])
    assert torch.count_nonzero(storage[:, 4:].float()) == 0


def test_tensors_in_separate_allocations_do_not_stack() -> None:
    segments = [block_segments(t)[0] for t in _kv_cpu_layout("cpu", num_blocks=4).values()]
    assert stacked_view(segments) is None


def test_joint_runs_need_blocks_and_slots_both_consecutive() -> None:
    assert joint_runs([4, 5, 6, 9, 10, 2], [0, 1, 2, 3, 4, 7]) == [
        (4, 0, 3), (9, 3, 2), (2, 7, 1)]
    assert joint_runs([4, 5], [1, 0]) == [(4, 1, 1), (5, 0, 1)]
    assert joint_runs([], []) == []


def test_a_job_of_many_runs_round_trips_through_one_indexed_copy() -> None:
    kv = _kv_cpu_layout("cpu", num_blocks=32)
    original = {name: t.clone() for name, t in kv.items()}
    engine = TransferEngine.from_kv_caches(kv, num_slots=16)
    blocks = tuple(range(30, 30 - 2 * (MAX_SLICE_COPIES + 2), -2))  # every run one block long
    slots = tuple(range(len(blocks)))
    assert len(joint_runs(blocks, slots)) > MAX_SLICE_COPIES
    keys = tuple(("h", b) for b in blocks)
    assert _run(engine, Job(1, blocks, slots, keys), store=True)
    for t in kv.values():
        t.zero_()
    targets = tuple(b + 1 for b in blocks)
    assert _run(engine, Job(2, targets, slots, keys), store=False)
    for name, t in kv.items():
        for src, dst in zip(blocks, targets, strict=True):
            assert torch.equal(t[dst], original[name][src]), (name, src, dst)
        assert torch.count_nonzero(t[list(blocks)].float()) == 0


def test_joint_runs_group_blocks_and_slots_that_both_count_up() -> None:
    assert joint_runs([7, 8, 9, 3, 4], [4, 5, 6, 9, 11]) == [(7, 4, 3), (3, 9, 1), (4, 11, 1)]
    assert joint_runs([], []) == []


@pytest.mark.parametrize(("row_elems", "dtype", "wide"), [
    (12, torch.float16, torch.int64),  # 24 bytes per block
    (3, torch.float16, torch.int16),   # 6 bytes
    (3, torch.uint8, torch.uint8),     # 3 bytes: no wider element tiles the row
])
def test_odd_block_sizes_round_trip_through_the_widest_view(
    row_elems: int, dtype: torch.dtype, wide: torch.dtype
) -> None:
    kv = {"l0": torch.arange(8 * row_elems).to(dtype).reshape(8, row_elems)}
    original = kv["l0"].clone()
    engine = TransferEngine.from_kv_caches(kv, num_slots=2)
    assert widest_view(engine.segments[0]).dtype == wide
    assert _run(engine, Job(1, (5, 2), (1, 0), ("a", "b")), store=True)
    kv["l0"].zero_()
    assert _run(engine, Job(2, (5, 2), (1, 0), ("a", "b")), store=False)
    assert torch.equal(kv["l0"], torch.where(
        torch.isin(torch.arange(8), torch.tensor([2, 5]))[:, None], original, 0
    ).to(dtype))


def test_gpu_check_refuses_clearly_without_cuda() -> None:
    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.sh"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert "no CUDA device visible to torch" in done.stderr


@pytest.mark.parametrize("device", DEVICES)
def test_a_block_permuted_inside_but_dense_round_trips(device: str) -> None:
    # vLLM's LBNHC: memory [B, N, H, C], viewed [B, H, N, C] (a permutation, not contiguous).
    physical = torch.arange(10 * 4 * 3 * 8, dtype=torch.float16, device=device).view(10, 4, 3, 8)
    layer = physical.permute(0, 2, 1, 3)
    assert not layer[0].is_contiguous()
    original = layer.clone()
    engine = TransferEngine.from_kv_caches({"l0": layer}, num_slots=4)
    assert engine.block_bytes == 4 * 3 * 8 * 2
    keys = (("h", 1), ("h", 6))
    assert _run(engine, Job(1, (1, 6), (0, 1), keys), store=True)
    layer.zero_()
    assert _run(engine, Job(2, (2, 7), (0, 1), keys), store=False)
    assert torch.equal(layer[2], original[1]) and torch.equal(layer[7], original[6])


def test_a_block_split_per_head_is_refused_with_the_layouts_to_use() -> None:
    # vLLM's LHBNC: memory [H, B, N, C] per layer, viewed [B, H, N, C].
    layer = torch.zeros(3, 10, 4, 8).permute(1, 0, 2, 3)
    with pytest.raises(ValueError, match=r"not one dense run of bytes.*LBHNC"):
        block_segments(layer)


# ---------------------------------------------------------------------- loads per layer
#
# CUDA streams cannot run here, so these tests queue the engine's copies on
# LazyQueue (tests/connector/lazy_streams.py): a stand-in that runs queued work
# only when a wait forces it, the least favourable schedule CUDA may pick.
# Every byte read is real; only the stream scheduling is simulated.

NUM_LAYERS = 12  # more than 10: sorted names ("...10" < "...2") differ from model order


def _lazy_engine(
    num_blocks: int = 16, num_slots: int = 8, layers: int = NUM_LAYERS
) -> tuple[TransferEngine, dict[str, torch.Tensor], LazyQueue]:
    queue = LazyQueue()
    gen = torch.Generator().manual_seed(1)
    # Registered in model order, as vLLM does.
    kv = {f"model.layers.{i}.self_attn.attn": torch.randn(num_blocks, 2, 4, 8, generator=gen)
          for i in range(layers)}
    engine = TransferEngine.from_kv_caches(kv, num_slots=num_slots, queue=queue)
    return engine, kv, queue


def _store_then_clear(engine: TransferEngine, kv: dict[str, torch.Tensor], queue: LazyQueue,
                      *jobs: Job) -> dict[str, torch.Tensor]:
    original = {name: t.clone() for name, t in kv.items()}
    for job in jobs:
        engine.submit_store(job)
    queue.run_everything()
    assert [r.ok for r in engine.poll()] == [True] * len(jobs)
    for t in kv.values():
        t.zero_()
    return original


def _loaded(kv: dict[str, torch.Tensor], original: dict[str, torch.Tensor], name: str,
            sources: tuple[int, ...], targets: tuple[int, ...]) -> bool:
    return all(torch.equal(kv[name][dst], original[name][src])
               for src, dst in zip(sources, targets, strict=True))


def _zero(kv: dict[str, torch.Tensor], name: str, targets: tuple[int, ...]) -> bool:
    return torch.count_nonzero(kv[name][list(targets)]).item() == 0


def test_each_layer_read_waits_for_its_own_copies_and_no_later_layer() -> None:
    engine, kv, queue = _lazy_engine()
    sources, slots, targets = (3, 4, 9), (0, 1, 2), (10, 11, 5)
    keys = tuple(("h", b) for b in sources)
    original = _store_then_clear(engine, kv, queue, Job(1, sources, slots, keys))
    engine.submit_load(Job(2, targets, slots, keys), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    names = list(kv)  # model order
    for i, name in enumerate(names):
        engine.wait_for_layer(name)  # what vLLM calls before the layer's attention
        loaded, later_untouched = queue.read(lambda name=name, later=names[i + 1:]: (
            _loaded(kv, original, name, sources, targets),
            all(_zero(kv, other, targets) for other in later),
        ))
        assert loaded, f"{name} read before its copies ran"
        # The pipelining: the read of layer i started before layer i+1's copies ran
        # (a wait for the whole load, or for a later layer, would have run them).
        assert later_untouched, f"{name}'s wait also waited for later layers"
    engine.join_loads()
    assert [(r.job_id, r.ok) for r in engine.wait_all()] == [(2, True)]


def test_a_batch_of_loads_copies_every_job_of_a_layer_before_the_next_layer() -> None:
    engine, kv, queue = _lazy_engine()
    original = _store_then_clear(engine, kv, queue, Job(1, (1, 2), (0, 1), ("a", "b")),
                                 Job(2, (6,), (5,), ("c",)))
    engine.submit_load(Job(3, (8, 9), (0, 1), ("a", "b")), wait=LoadWait.PER_LAYER)
    engine.submit_load(Job(4, (12,), (5,), ("c",)), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    layer0, layer1 = list(kv)[:2]
    engine.wait_for_layer(layer0)
    both, next_layer_untouched = queue.read(lambda: (
        _loaded(kv, original, layer0, (1, 2, 6), (8, 9, 12)),
        _zero(kv, layer1, (8, 9, 12)),
    ))
    assert both and next_layer_untouched
    engine.join_loads()
    assert sorted(r.job_id for r in engine.wait_all() if r.ok) == [3, 4]


def test_layers_the_forward_never_asks_about_are_covered_by_the_join() -> None:
    engine, kv, queue = _lazy_engine()
    sources, slots, targets = (0, 7), (3, 4), (14, 15)
    original = _store_then_clear(engine, kv, queue, Job(1, sources, slots, ("x", "y")))
    engine.submit_load(Job(2, targets, slots, ("x", "y")), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    engine.wait_for_layer(next(iter(kv)))  # only the first layer asks
    engine.join_loads()  # finish_forward / get_finished / wait_for_save
    assert queue.read(lambda: all(_loaded(kv, original, n, sources, targets) for n in kv))


def test_without_a_join_the_next_step_fence_still_waits_for_the_load() -> None:
    engine, kv, queue = _lazy_engine()
    sources, slots, targets = (2,), (6,), (13,)
    original = _store_then_clear(engine, kv, queue, Job(1, sources, slots, ("x",)))
    engine.submit_load(Job(2, targets, slots, ("x",)), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    assert not queue.read(lambda: _loaded(kv, original, next(iter(kv)), sources, targets))
    engine.fence()  # bind_connector_metadata of the next step
    assert queue.read(lambda: all(_loaded(kv, original, n, sources, targets) for n in kv))


def test_a_layer_name_the_engine_does_not_know_waits_for_the_whole_load() -> None:
    engine, kv, queue = _lazy_engine()
    sources, slots, targets = (5,), (0,), (6,)
    original = _store_then_clear(engine, kv, queue, Job(1, sources, slots, ("x",)))
    engine.submit_load(Job(2, targets, slots, ("x",)), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    engine.wait_for_layer("model.layers.99.self_attn.attn")
    assert queue.read(lambda: all(_loaded(kv, original, n, sources, targets) for n in kv))


def test_a_layer_sharing_another_layers_kv_waits_for_the_copies_into_it() -> None:
    # vLLM registers a layer that reuses an earlier layer's KV cache under its own
    # name, with the very same tensor (gpu_model_runner.initialize_kv_cache_tensors).
    queue = LazyQueue()
    gen = torch.Generator().manual_seed(2)
    own = [torch.randn(8, 2, 4, 8, generator=gen) for _ in range(3)]
    kv = {"layers.0": own[0], "layers.1": own[1], "layers.2": own[2], "layers.3": own[0]}
    engine = TransferEngine.from_kv_caches(kv, num_slots=4, queue=queue)
    original = _store_then_clear(engine, kv, queue, Job(1, (1,), (2,), ("x",)))
    engine.submit_load(Job(2, (5,), (2,), ("x",)), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    engine.wait_for_layer("layers.3")
    shared, others_untouched = queue.read(lambda: (
        torch.equal(own[0][5], original["layers.0"][1]),
        _zero(kv, "layers.1", (5,)) and _zero(kv, "layers.2", (5,)),
    ))
    assert shared and others_untouched


def test_a_whole_load_is_waited_for_before_the_next_kernel() -> None:
    engine, kv, queue = _lazy_engine()
    sources, slots, targets = (1, 2), (0, 1), (3, 4)
    original = _store_then_clear(engine, kv, queue, Job(1, sources, slots, ("x", "y")))
    engine.submit_load(Job(2, targets, slots, ("x", "y")))  # LoadWait.WHOLE
    assert queue.read(lambda: all(_loaded(kv, original, n, sources, targets) for n in kv))


def test_an_asynchronous_load_is_waited_for_by_nothing_and_reported_once_done() -> None:
    engine, kv, queue = _lazy_engine()
    sources, slots, targets = (1,), (0,), (3,)
    original = _store_then_clear(engine, kv, queue, Job(1, sources, slots, ("x",)))
    engine.submit_load(Job(2, targets, slots, ("x",)), wait=LoadWait.NONE)
    assert not queue.read(lambda: any(_loaded(kv, original, n, sources, targets) for n in kv))
    assert engine.poll() == []
    queue.run_everything()  # the device got to it
    assert [(r.job_id, r.ok) for r in engine.poll()] == [(2, True)]
    assert all(_loaded(kv, original, n, sources, targets) for n in kv)


def test_a_per_layer_load_with_a_wrong_key_fails_at_submit_and_leaves_nothing_to_wait_for(
) -> None:
    engine, kv, queue = _lazy_engine()
    _store_then_clear(engine, kv, queue, Job(1, (1,), (0,), ("x",)))
    engine.submit_load(Job(2, (3,), (0,), ("other",)), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    (result,) = engine.poll()
    assert not result.ok and "do not hold" in result.error
    queued = len(queue.compute.work)
    engine.wait_for_layer(next(iter(kv)))
    assert len(queue.compute.work) == queued  # no wait queued
    load_stream = queue.streams[1]  # the engine makes its store stream, then its load stream
    assert "copy" not in load_stream.labels()


def test_on_cpu_per_layer_loads_are_done_at_submit() -> None:
    kv = _kv_cpu_layout("cpu", num_blocks=8)
    engine = TransferEngine.from_kv_caches(kv, num_slots=4)
    assert _run(engine, Job(1, (1, 2), (0, 1), ("a", "b")), store=True)
    original = {name: t.clone() for name, t in kv.items()}
    engine.submit_load(Job(2, (5, 6), (0, 1), ("a", "b")), wait=LoadWait.PER_LAYER)
    for name, t in kv.items():  # before any flush, wait or join
        assert torch.equal(t[5], original[name][1]) and torch.equal(t[6], original[name][2])
    assert [(r.job_id, r.ok) for r in engine.poll()] == [(2, True)]
    engine.flush_loads()
    engine.wait_for_layer("layer0")
    engine.join_loads()


def test_every_segment_must_belong_to_a_layer() -> None:
    segments = [block_segments(t)[0] for t in _kv_cpu_layout("cpu", num_blocks=4).values()]
    with pytest.raises(ValueError, match="exactly one layer"):
        TransferEngine(segments, num_slots=2, layers={"l0": [0], "l1": [1]})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (scripts/gpu_check.sh)")
def test_a_per_layer_load_read_layer_by_layer_on_cuda_sees_every_byte() -> None:
    kv = {name: t.to("cuda") for name, t in _kv_cpu_layout("cpu", num_blocks=16).items()}
    original = {name: t.clone() for name, t in kv.items()}
    engine = TransferEngine.from_kv_caches(kv, num_slots=4)
    sources, slots, targets = (1, 2, 9), (0, 1, 3), (12, 13, 4)
    keys = tuple(("h", b) for b in sources)
    assert _run(engine, Job(1, sources, slots, keys), store=True)
    for t in kv.values():
        t.zero_()
    engine.submit_load(Job(2, targets, slots, keys), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    seen = {}
    for name in kv:  # a forward on the compute stream, each read right after its wait
        engine.wait_for_layer(name)
        seen[name] = kv[name][list(targets)].clone()
    engine.join_loads()
    assert [(r.job_id, r.ok) for r in engine.wait_all()] == [(2, True)]
    torch.cuda.synchronize()
    for name in kv:
        assert torch.equal(seen[name], original[name][list(sources)]), name


def test_reordered_layers_copy_first_the_layer_the_forward_reads_first() -> None:
    engine, kv, queue = _lazy_engine()
    sources, slots, targets = (3, 4), (0, 1), (10, 11)
    keys = tuple(("h", b) for b in sources)
    original = _store_then_clear(engine, kv, queue, Job(1, sources, slots, keys))
    names = list(kv)
    engine.order_layers(names[::-1])  # the forward reads the last registered layer first
    engine.submit_load(Job(2, targets, slots, keys), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    engine.wait_for_layer(names[-1])
    loaded, others_untouched = queue.read(lambda: (
        _loaded(kv, original, names[-1], sources, targets),
        all(_zero(kv, other, targets) for other in names[:-1]),
    ))
    assert loaded and others_untouched
    engine.join_loads()
    assert [(r.job_id, r.ok) for r in engine.wait_all()] == [(2, True)]


def test_layers_cannot_be_reordered_while_a_per_layer_load_awaits_its_join() -> None:
    engine, kv, queue = _lazy_engine()
    _store_then_clear(engine, kv, queue, Job(1, (3,), (0,), ("h",)))
    engine.submit_load(Job(2, (10,), (0,), ("h",)), wait=LoadWait.PER_LAYER)
    engine.flush_loads()
    with pytest.raises(RuntimeError, match="reordered"):
        engine.order_layers(list(kv)[::-1])
