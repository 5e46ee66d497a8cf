"""Host store index: capacity in bytes, LRU, longest prefix, fingerprinted keys."""

from __future__ import annotations

import pytest

from kvtool.connector.store import StoreEvent, StoreFullError, StoreIndex, fingerprint


def _stored(index: StoreIndex, *hashes: str) -> list[int]:
    slots = []
    for block_hash in hashes:
        slots.append(index.reserve(block_hash))
        index.commit(block_hash, slots[-1])
    return slots


def test_capacity_in_bytes_sets_the_slot_count() -> None:
    assert StoreIndex(10_000, 3_000, "fp").num_slots == 3
    with pytest.raises(ValueError, match="holds no block"):
        StoreIndex(100, 3_000, "fp")


def test_longest_prefix_stops_at_the_first_missing_or_unfinished_block() -> None:
    index = StoreIndex(10, 1, "fp")
    _stored(index, "a", "b", "d")
    slot = index.reserve("c")  # being written: not servable yet
    assert index.longest_prefix(["a", "b", "c", "d"]) == 2
    assert index.longest_prefix(["x", "a"]) == 0
    index.commit("c", slot)
    assert index.longest_prefix(["a", "b", "c", "d"]) == 4


def test_lru_evicts_the_least_recently_used_idle_entry() -> None:
    index = StoreIndex(3, 1, "fp")
    slots = _stored(index, "a", "b", "c")
    assert slots == [0, 1, 2]  # a fresh store hands out consecutive slots
    index.acquire(["a"])  # read "a": now most recently used
    index.release(["a"], slots[:1])
    assert index.reserve("d") == slots[1]  # "b" was least recently used
    assert not index.known("b") and index.evictions == 1


def test_entries_in_use_are_never_evicted() -> None:
    index = StoreIndex(2, 1, "fp")
    slots = _stored(index, "a")
    index.acquire(["a"])  # an in-flight load reads it
    index.reserve("b")  # an in-flight store writes it
    with pytest.raises(StoreFullError):
        index.reserve("c")
    index.release(["a"], slots)
    assert index.reserve("c") == 0


def test_failed_store_frees_its_slot() -> None:
    index = StoreIndex(1, 1, "fp")
    index.abort("a", index.reserve("a"))
    assert not index.known("a") and index.reserve("b") == 0


def test_keys_carry_the_model_layout_dtype_fingerprint() -> None:
    base = fingerprint("llama", "segments[8192,8192]", "bfloat16", 16)
    assert base == fingerprint("llama", "segments[8192,8192]", "bfloat16", 16)
    others = {
        fingerprint("qwen", "segments[8192,8192]", "bfloat16", 16),
        fingerprint("llama", "segments[4096]", "bfloat16", 16),
        fingerprint("llama", "segments[8192,8192]", "float16", 16),
        fingerprint("llama", "segments[8192,8192]", "bfloat16", 32),
    }
    assert base not in others and len(others) == 4
    other = fingerprint("qwen", "x", "y", 1)
    assert StoreIndex(1, 1, base).key("h") != StoreIndex(1, 1, other).key("h")


def test_reset_starts_a_new_epoch_and_retires_slots_until_their_transfers_end() -> None:
    index = StoreIndex(2, 1, "fp")
    (read,) = _stored(index, "a")
    index.acquire(["a"])  # a load is reading slot 0
    writing = index.reserve("b")  # a store is writing slot 1
    old_key = index.key("a")
    index.reset()
    assert index.key("a") != old_key and index.longest_prefix(["a"]) == 0
    with pytest.raises(StoreFullError):
        index.reserve("c")  # both slots still in use by transfers of the old epoch
    assert index.commit("b", writing) is False  # lands in nothing
    index.release(["a"], [read])
    assert sorted([index.reserve("c"), index.reserve("d")]) == [0, 1]


def test_evict_forgets_entries_but_keeps_a_slot_being_read_until_released() -> None:
    index = StoreIndex(1, 1, "fp")
    slots = _stored(index, "a")
    index.acquire(["a"])
    assert index.evict(["a", "never-stored"]) == 1
    assert index.longest_prefix(["a"]) == 0
    with pytest.raises(StoreFullError):
        index.reserve("b")
    index.release(["a"], slots)
    assert index.reserve("b") == slots[0]


def test_events_follow_what_is_servable_in_order() -> None:
    index = StoreIndex(2, 1, "fp", record_events=True)
    _stored(index, "a", "b")
    failed = index.reserve("x")  # evicts "a", the least recently used
    index.abort("x", failed)  # "x" was never servable: no event
    index.reserve("c")  # in flight: not servable yet, no event
    index.evict(["b"])  # a failed load read it
    assert index.take_events() == [StoreEvent(True, ("a", "b")), StoreEvent(False, ("a", "b"))]
    assert index.take_events() == []
    index.commit("c", 0)
    index.reset()
    assert index.take_events() == [StoreEvent(True, ("c",)), StoreEvent(False, ("c",))]


def test_events_are_not_recorded_unless_asked() -> None:
    index = StoreIndex(2, 1, "fp")
    _stored(index, "a", "b", "c")
    index.reset()
    assert index.take_events() == []
