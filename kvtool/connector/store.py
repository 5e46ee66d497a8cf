"""The host store's index: which block hashes are on the host, and in which slot.

The scheduler process owns this index; worker processes own the bytes (the
transfer engine's host arena, one row per slot). Because only the scheduler
picks slots and evicts, every worker's arena agrees with the index without any
traffic back: a store job names the slot to write, a load job the slot to read.

- Capacity is in bytes: ``capacity_bytes // block_bytes`` slots.
- Eviction is LRU over entries that are complete and not in use: a slot being
  written by an in-flight store or read by an in-flight load is never reused.
- :meth:`StoreIndex.reset` (vLLM's ``reset_cache``) forgets every entry and
  moves the index to a new *epoch*, which is part of every key's fingerprint:
  nothing stored before is found again, and a worker's slot still tagged with
  an old key never matches a new job. Slots that an in-flight transfer still
  uses are *retired*, not freed, until that transfer ends, so a new store never
  writes a slot an old transfer is reading or writing. A failed load retires
  the entries it read the same way (:meth:`StoreIndex.evict`).
- Lookup walks a request's block-hash chain and returns the longest prefix
  present; a block hash chains its parents, so a hit on block i implies the
  content of blocks 0..i.
- Keys carry a fingerprint of model, KV layout and dtype (:func:`fingerprint`)
  so a block is never served to a different model or layout.
- With ``record_events`` the index notes, in order, the hashes that become
  servable (a store committed) and those that stop being servable (LRU
  eviction, a failed load, a reset); :meth:`StoreIndex.take_events` hands them
  over (the adapter turns them into the engine's KV events).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from kvtool.connector.blockpool import BlockHash


def fingerprint(model: str, layout: str, dtype: str, block_size: int, *extra: str) -> str:
    """A short stable id of everything that must match for stored bytes to be reusable."""
    text = "\x1f".join([model, layout, dtype, str(block_size), *extra])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class BlockKey(NamedTuple):
    """What a host slot holds: a block hash under one model/layout fingerprint.

    A NamedTuple: one is built per block moved, and workers compare them per
    slot before every load, where a tuple compares in C and a dataclass in Python.
    """

    fingerprint: str
    block_hash: BlockHash


@dataclass(slots=True)
class _Entry:
    slot: int
    ready: bool
    """False while the store that fills the slot is in flight."""
    users: int
    """In-flight transfers using the slot (1 writer while not ready, else readers)."""


class StoreEvent(NamedTuple):
    """Hashes that entered (``stored``) or left the set of servable entries, in order."""

    stored: bool
    block_hashes: tuple[BlockHash, ...]


class StoreFullError(RuntimeError):
    """Every slot is being written or read: nothing can be evicted right now."""


class StoreIndex:
    """Scheduler-side index of the host store (see module docstring).

    Invariant: each slot belongs to at most one entry or is retired; an entry
    with ``users`` > 0 is never evicted; entries + retired + freed + never-used
    slots == num_slots.
    """

    def __init__(
        self,
        capacity_bytes: int,
        block_bytes: int,
        model_fingerprint: str,
        *,
        record_events: bool = False,
    ) -> None:
        if block_bytes <= 0:
            raise ValueError(f"block_bytes must be > 0, got {block_bytes}")
        self.num_slots = capacity_bytes // block_bytes
        if self.num_slots < 1:
            raise ValueError(
                f"host capacity {capacity_bytes} B holds no block of {block_bytes} B"
            )
        self.block_bytes = block_bytes
        self._model_fingerprint = model_fingerprint
        self.epoch = 0
        self.fingerprint = self._epoch_fingerprint()
        self._entries: OrderedDict[BlockHash, _Entry] = OrderedDict()  # first = LRU
        # Never-used slots are handed out in order 0, 1, 2, ... (consecutive slots
        # let the transfer engine copy runs instead of single blocks); freed ones
        # are reused first.
        self._next_fresh = 0
        self._free_slots: list[int] = []
        # Slots no entry owns any more whose in-flight transfers have not ended:
        # slot -> transfers still using it. Freed when the count reaches 0.
        self._retired: dict[int, int] = {}
        self.evictions = 0
        # (stored, hashes) runs, merged while the kind repeats; None: not recorded.
        self._events: list[tuple[bool, list[BlockHash]]] | None = [] if record_events else None

    def _epoch_fingerprint(self) -> str:
        return f"{self._model_fingerprint}.e{self.epoch}"

    def _note(self, stored: bool, block_hash: BlockHash) -> None:
        events = self._events
        if events is None:
            return
        if events and events[-1][0] is stored:
            events[-1][1].append(block_hash)
        else:
            events.append((stored, [block_hash]))

    def take_events(self) -> list[StoreEvent]:
        """What was recorded since the last call (nothing unless ``record_events``)."""
        events = self._events
        if not events:
            return []
        self._events = []
        return [StoreEvent(stored, tuple(hashes)) for stored, hashes in events]

    def reset(self) -> None:
        """Forget every entry and start a new epoch (see the module docstring)."""
        for block_hash, entry in self._entries.items():
            if entry.ready:
                self._note(False, block_hash)
            self._retire(entry)
        self._entries.clear()
        self.epoch += 1
        self.fingerprint = self._epoch_fingerprint()

    def evict(self, block_hashes: Sequence[BlockHash]) -> int:
        """Forget these entries (their bytes are not trusted any more); returns how many
        were present. Slots in use by transfers are retired until those end."""
        evicted = 0
        for block_hash in block_hashes:
            entry = self._entries.pop(block_hash, None)
            if entry is not None:
                if entry.ready:
                    self._note(False, block_hash)
                self._retire(entry)
                evicted += 1
        return evicted

    def _retire(self, entry: _Entry) -> None:
        if entry.users:
            self._retired[entry.slot] = entry.users
        else:
            self._free_slots.append(entry.slot)

    def _end_transfer(self, block_hash: BlockHash, slot: int) -> _Entry | None:
        """One transfer using ``slot`` for ``block_hash`` ended: the live entry, or None
        when the entry was reset or evicted since (its retired slot is then released)."""
        entry = self._entries.get(block_hash)
        if entry is not None and entry.slot == slot:
            entry.users -= 1
            return entry
        left = self._retired[slot] - 1
        if left:
            self._retired[slot] = left
        else:
            del self._retired[slot]
            self._free_slots.append(slot)
        return None

    def key(self, block_hash: BlockHash) -> BlockKey:
        return BlockKey(self.fingerprint, block_hash)

    def keys(self, block_hashes: Iterable[BlockHash]) -> tuple[BlockKey, ...]:
        """:meth:`key` of each hash (built without a Python call per key: one per block
        of every transfer)."""
        fingerprint, make = self.fingerprint, tuple.__new__
        return tuple([make(BlockKey, (fingerprint, h)) for h in block_hashes])

    def __len__(self) -> int:
        return len(self._entries)

    def contains(self, block_hash: BlockHash) -> bool:
        """True when the hash is stored completely (not merely being written)."""
        entry = self._entries.get(block_hash)
        return entry is not None and entry.ready

    def known(self, block_hash: BlockHash) -> bool:
        """True when the hash is stored or being stored."""
        return block_hash in self._entries

    def longest_prefix(self, block_hashes: Sequence[BlockHash]) -> int:
        """How many leading hashes of the chain are stored. No side effects."""
        entries, n = self._entries, 0
        for block_hash in block_hashes:  # contains(), inlined: a lookup per request
            entry = entries.get(block_hash)
            if entry is None or not entry.ready:
                break
            n += 1
        return n

    def reserve(self, block_hash: BlockHash) -> int:
        """A slot for a new entry being written; evicts the LRU idle entry if needed.

        Raises StoreFullError when every slot is in use by an in-flight transfer
        and KeyError if the hash is already known.
        """
        slots = self.reserve_run((block_hash,))
        if not slots:
            raise StoreFullError(f"all {self.num_slots} host slots are in use by transfers")
        return slots[0]

    def reserve_run(self, block_hashes: Iterable[BlockHash]) -> list[int]:
        """:meth:`reserve` each hash in order, up to the first for which every slot is
        in use by an in-flight transfer: the slots of those reserved (KeyError if a hash
        is already known)."""
        entries, free_slots = self._entries, self._free_slots
        slots = []
        for block_hash in block_hashes:
            if block_hash in entries:
                raise KeyError(f"{block_hash!r} is already stored or being stored")
            if free_slots:
                slot = free_slots.pop()
            elif self._next_fresh < self.num_slots:
                slot = self._next_fresh
                self._next_fresh += 1
            elif self._evict_one():
                slot = free_slots.pop()
            else:
                break
            entries[block_hash] = _Entry(slot, False, 1)
            slots.append(slot)
        return slots

    def commit(self, block_hash: BlockHash, slot: int) -> bool:
        """The store into ``slot`` completed on every worker; False when the entry was
        reset or evicted meanwhile (then nothing becomes servable)."""
        return self.commit_run((block_hash,), (slot,)) == 1

    def commit_run(self, block_hashes: Sequence[BlockHash], slots: Sequence[int]) -> int:
        """:meth:`commit` each pair in order; returns how many became servable."""
        entries, committed = self._entries, 0
        for block_hash, slot in zip(block_hashes, slots, strict=True):
            entry = entries.get(block_hash)
            if entry is None or entry.slot != slot:
                self._end_transfer(block_hash, slot)  # reset or evicted since: a retired slot
                continue
            entry.users -= 1
            entry.ready = True
            self._note(True, block_hash)
            committed += 1
        return committed

    def abort(self, block_hash: BlockHash, slot: int) -> None:
        """The store into ``slot`` failed (or never reached a worker): forget the entry."""
        entry = self._end_transfer(block_hash, slot)
        if entry is not None:
            del self._entries[block_hash]
            self._free_slots.append(entry.slot)

    def acquire(self, block_hashes: Sequence[BlockHash]) -> list[int]:
        """Slots of stored hashes about to be read; marks them most recently used."""
        slots = []
        for block_hash in block_hashes:
            entry = self._entries[block_hash]
            if not entry.ready:
                raise KeyError(f"{block_hash!r} is not stored yet")
            entry.users += 1
            self._entries.move_to_end(block_hash)
            slots.append(entry.slot)
        return slots

    def release(self, block_hashes: Sequence[BlockHash], slots: Sequence[int]) -> None:
        """The reads started by :meth:`acquire` of these slots finished."""
        for block_hash, slot in zip(block_hashes, slots, strict=True):
            self._end_transfer(block_hash, slot)

    def _evict_one(self) -> bool:
        """Evict the least recently used idle entry; False when every one is in use."""
        for block_hash, entry in self._entries.items():
            if entry.users == 0:  # so it is ready: a store in flight is its user
                del self._entries[block_hash]
                self._free_slots.append(entry.slot)
                self.evictions += 1
                self._note(False, block_hash)
                return True
        return False
