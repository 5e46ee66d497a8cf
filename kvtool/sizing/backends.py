"""The attention backend vLLM picks on a CUDA GPU, and the KV block sizes its kernels accept.

Data: ``rules/models/attention_backends.toml`` (each row cites the vLLM 0.32 file). The
block size rules follow vLLM's ``AttentionBackend.get_preferred_block_size`` and
``supports_block_size``: a backend that accepts the default (16) keeps it, else the
smallest size it lists; a size is accepted when it is a multiple of one listed size.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

import msgspec

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir

BACKENDS_FILE = "models/attention_backends.toml"

AttentionFamily = Literal["attention", "mla"]


class Backend(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One attention backend: the KV dtypes it takes and its kernel block constraint.

    ``sizes`` lists exact kernel block sizes; ``multiple_of`` says any multiple of it.
    """

    name: str = ""
    kv_dtypes: tuple[str, ...]
    sizes: tuple[int, ...] = ()
    multiple_of: int | None = None
    capabilities: tuple[int, ...] = ()  # compute capability majors; empty = any
    source: str

    @property
    def smallest_kernel_block(self) -> int:
        """The smallest block the kernel takes (vLLM's alignment unit for hybrids)."""
        return min(self._bases)

    @property
    def _bases(self) -> tuple[int, ...]:
        return (*self.sizes, *((self.multiple_of,) if self.multiple_of else ()))

    def accepts_block(self, block_size: int) -> bool:
        """vLLM's ``supports_block_size``: a multiple of some supported kernel block."""
        return any(block_size % base == 0 for base in self._bases)

    def preferred_block(self, default_block_size: int) -> int:
        """The block vLLM uses with this backend alone when --block-size is not given."""
        if self.accepts_block(default_block_size):
            return default_block_size
        return self.smallest_kernel_block


class BackendTable(msgspec.Struct, frozen=True, kw_only=True):
    gpus: dict[str, int]
    priorities: dict[str, dict[str, tuple[str, ...]]]
    backends: dict[str, Backend]


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
    order = table.priorities.get(major, table.priorities["default"])[family]
    for name in order:
        backend = table.backends[name]
        runs_here = not backend.capabilities or int(major) in backend.capabilities
        if runs_here and kv_cache_dtype in backend.kv_dtypes:
            return backend
    raise KvtoolError(
        f"no {family} attention backend on {gpu} takes --kv-cache-dtype {kv_cache_dtype} "
        f"(vLLM 0.32 tries {', '.join(order)})"
    )
