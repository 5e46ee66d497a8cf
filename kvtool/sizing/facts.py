"""Engine and tool constants for sizing, read from ``rules/models/sizing_facts.toml``.

Each constant there cites the vLLM, LMCache or KAITO file it comes from; code reads
the numbers through :func:`sizing_facts` and never types them itself.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec
from packaging.version import Version

from kvtool.errors import KvtoolError
from kvtool.resources import read_table, rules_dir

FACTS_FILE = "models/sizing_facts.toml"


class GdnCheckpointFact(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """From ``since``, GDN layers on the listed GPU capability majors hold a checkpoint block."""

    since: str
    capabilities: tuple[int, ...]


class SizingFacts(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The constants, flattened; every field is required so a missing row fails loudly."""

    default_block_size: int
    native_offload_alignment_bytes: int
    native_offload_blocks_per_chunk: int
    nemotron_h_default_ssm_dtype: str
    gib_bytes: int
    lmcache_chunk_size: int
    lmcache_object_alignment_bytes: int
    lmcache_eviction_watermark: float
    lmcache_l1_init_size_gb: int
    kaito_default_utilization: float
    kaito_offload_disabled_architectures: tuple[str, ...]
    pcie_gts: float
    pcie_lanes: int
    pcie_encoding: float
    pcie_efficiency: float
    nvme_read_gbps: float
    cpu_tier_min_ratio_to_gpu: float
    serve_batch_defaults: dict[str, tuple[int, int]]
    async_scheduling_default: bool
    chunked_local_hma_env: str
    state_prefill_checkpoint_blocks: dict[str, int]
    gdn_flashinfer_checkpoint: GdnCheckpointFact

    @property
    def pcie_effective_gbps(self) -> float:
        """Usable host-to-GPU GB/s per link: GT/s x lanes x line code / 8 bits x efficiency."""
        return self.pcie_gts * self.pcie_lanes * self.pcie_encoding / 8 * self.pcie_efficiency


_PREFIXES = {"vllm": "", "lmcache": "lmcache_", "kaito": "kaito_", "hardware": "", "advice": ""}


@cache
def sizing_facts() -> SizingFacts:
    """Load the facts table once; rows are ``section: {name: {value, source}}``."""
    raw: dict[str, dict[str, dict[str, Any]]] = read_table(rules_dir() / FACTS_FILE)
    flat: dict[str, Any] = {}
    for section, rows in raw.items():
        for name, row in rows.items():
            flat[_PREFIXES[section] + name] = row["value"]
    try:
        return msgspec.convert(flat, type=SizingFacts)
    except msgspec.ValidationError as exc:
        raise KvtoolError(f"sizing facts {rules_dir() / FACTS_FILE} are corrupt: {exc}") from exc


def prefill_checkpoint_blocks(facts: SizingFacts, release: str, capability: int) -> dict[str, int]:
    """Checkpoint blocks per state layer kind for ``release`` on a GPU of ``capability``.

    The per-kind table, with Gated DeltaNet's FlashInfer checkpoint block from the
    release that added it on the GPUs whose backend choice gives FlashInfer's kernel.
    """
    blocks = dict(facts.state_prefill_checkpoint_blocks)
    gdn = facts.gdn_flashinfer_checkpoint
    if capability in gdn.capabilities and Version(release) >= Version(gdn.since):
        blocks["gdn"] = 1
    return blocks
