"""The attention backend vLLM picks on a CUDA GPU, and the KV block sizes its kernels accept.

Data: ``rules/models/attention_backends.toml`` (each row cites the vLLM 0.32 file). The
block size rules follow vLLM's ``AttentionBackend.get_preferred_block_size`` and
``supports_block_size``: a backend that accepts the default (16) keeps it, else the
smallest size it lists; a size is accepted when it is a multiple of one listed size.
"""

from __future__ import annotations

import itertools
import math
from functools import cache
from typing import Any, Literal

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir

BACKENDS_FILE = "models/attention_backends.toml"

AttentionFamily = Literal["attention", "mla", "sparse_mla"]

# KV cache dtypes vLLM treats as quantized when it orders backends (is_quantized_kv_cache).
_QUANTIZED_PREFIX = "fp8"


class KernelOverride(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Kernel block sizes a backend takes instead for one head size and KV dtype on some GPUs."""

    capabilities: tuple[int, ...]
    head_size: int
    kv_dtypes: tuple[str, ...]
    sizes: tuple[int, ...]

    def applies(self, capability: int, head_size: int | None, kv_cache_dtype: str) -> bool:
        return (
            capability in self.capabilities
            and head_size == self.head_size
            and kv_cache_dtype in self.kv_dtypes
        )


class Backend(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One attention backend: the KV dtypes it takes and its kernel block constraint.

    ``sizes`` lists exact kernel block sizes; ``multiple_of`` says any multiple of it.
    """

    name: str = ""
    kv_dtypes: tuple[str, ...]
    sizes: tuple[int, ...] = ()
    multiple_of: int | None = None
    capabilities: tuple[int, ...] = ()  # compute capability majors; empty = any
    # KV cache dtypes this backend stores in the packed fp8_ds_mla layout, and its bytes
    # per token (sparse MLA only; the layout replaces kv_lora_rank + rope elements).
    ds_mla_kv_dtypes: tuple[str, ...] = ()
    ds_mla_token_bytes: int | None = None
    kernel_overrides: tuple[KernelOverride, ...] = ()
    source: str

    def for_layers(self, capability: int, head_size: int | None, kv_cache_dtype: str) -> Backend:
        """This backend as it runs layers of ``head_size`` (its kernel override, if one applies)."""
        for override in self.kernel_overrides:
            if override.applies(capability, head_size, kv_cache_dtype):
                return msgspec.structs.replace(
                    self, sizes=override.sizes, multiple_of=None, kernel_overrides=()
                )
        return self

    def packed_token_bytes(self, kv_cache_dtype: str) -> int | None:
        """Bytes per token of a latent page when this backend packs ``kv_cache_dtype``."""
        return self.ds_mla_token_bytes if kv_cache_dtype in self.ds_mla_kv_dtypes else None

    @property
    def smallest_kernel_block(self) -> int:
        """The smallest block the kernel takes (vLLM's alignment unit for hybrids)."""
        return min(self.kernel_bases)

    @property
    def kernel_bases(self) -> tuple[int, ...]:
        """Each listed kernel block size, and the base of ``multiple_of``."""
        return (*self.sizes, *((self.multiple_of,) if self.multiple_of else ()))

    def describe_blocks(self) -> str:
        """The kernel block constraint in words, e.g. ``multiples of 16`` or ``64``."""
        parts = [str(size) for size in self.sizes]
        if self.multiple_of:
            parts.append(f"multiples of {self.multiple_of}")
        return " or ".join(parts)

    def accepts_block(self, block_size: int) -> bool:
        """vLLM's ``supports_block_size``: a multiple of some supported kernel block."""
        return any(block_size % base == 0 for base in self.kernel_bases)

    def preferred_block(self, default_block_size: int) -> int:
        """The block vLLM uses with this backend alone when --block-size is not given."""
        if self.accepts_block(default_block_size):
            return default_block_size
        return self.smallest_kernel_block


class BackendTable(msgspec.Struct, frozen=True, kw_only=True):
    gpus: dict[str, int]
    priorities: dict[str, dict[str, tuple[str, ...]]]
    backends: dict[str, Backend]
    layer_backends: dict[str, str] = {}


@cache
def backend_table() -> BackendTable:
    raw: dict[str, Any] = read_table(rules_dir() / BACKENDS_FILE)
    for name, row in raw.get("backends", {}).items():
        row["name"] = name
    try:
        return msgspec.convert(raw, type=BackendTable)
    except msgspec.ValidationError as exc:
        raise KvtoolError(
            f"attention backend table {rules_dir() / BACKENDS_FILE} is corrupt: {exc}"
        ) from exc


def gpu_capability(gpu: str) -> int:
    """CUDA compute capability major of ``--gpu``; KvtoolError listing the known names."""
    table = backend_table()
    major = table.gpus.get(gpu.lower())
    if major is None:
        raise KvtoolError(f"--gpu {gpu!r} is not one of {', '.join(table.gpus)}")
    return major


def backend_by_name(name: str) -> Backend:
    backends = backend_table().backends
    backend = backends.get(name.upper())
    if backend is None:
        raise KvtoolError(
            f"--attention-backend {name!r} is not one of {', '.join(sorted(backends))}"
        )
    return backend


def select_backend(gpu: str, family: AttentionFamily, kv_cache_dtype: str) -> Backend:
    """The first backend in vLLM's priority order for ``gpu`` that takes ``kv_cache_dtype``."""
    table = backend_table()
    major = str(gpu_capability(gpu))
    lists = table.priorities.get(major, table.priorities["default"])
    order = lists.get(family)
    if kv_cache_dtype.startswith(_QUANTIZED_PREFIX):
        order = lists.get(f"{family}_quantized", order)
    if order is None:
        raise KvtoolError(f"vLLM 0.32 has no {family} attention backend on {gpu}")
    for name in order:
        backend = table.backends[name]
        runs_here = not backend.capabilities or int(major) in backend.capabilities
        if runs_here and kv_cache_dtype in backend.kv_dtypes:
            return backend
    raise KvtoolError(
        f"no {family} attention backend on {gpu} takes --kv-cache-dtype {kv_cache_dtype} "
        f"(vLLM 0.32 tries {', '.join(order)})"
    )


def layer_backend(kind: str) -> Backend | None:
    """The backend of a cache layer that is not the model's attention (the DSA indexer)."""
    name = backend_table().layer_backends.get(kind)
    return None if name is None else backend_table().backends[name]


def preferred_block_for(backends: list[Backend], default_block_size: int) -> int:
    """The smallest block every backend takes (``_preferred_block_size_for_backends``).

    One backend: its own preference. Several: the default when all take it, else the
    smallest LCM of one kernel size per backend that every backend accepts.
    """
    if len(backends) == 1:
        return backends[0].preferred_block(default_block_size)
    if all(b.accepts_block(default_block_size) for b in backends):
        return default_block_size
    candidates = sorted(
        {math.lcm(*sizes) for sizes in itertools.product(*(b.kernel_bases for b in backends))}
    )
    for candidate in candidates:
        if all(b.accepts_block(candidate) for b in backends):
            return candidate
    raise KvtoolError(
        "the attention backends share no KV block size: "
        + ", ".join(f"{b.name} {list(b.kernel_bases)}" for b in backends)
    )
