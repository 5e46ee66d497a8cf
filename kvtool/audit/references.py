"""Public references behind the audit rules: one place, so every view of a rule
(``kvtool rule``, docs/rules.md, JSON, SARIF) shows the same links and each opens.

A reference is a URL a user can open (a vLLM or LMCache pull request, issue, advisory,
or a source file at a release tag) with a note saying what it shows. Source files are
cited at the first release that shows the fact, or at the release the tables were read
from when the fact holds throughout.
"""

from __future__ import annotations

import msgspec

VLLM = "https://github.com/vllm-project/vllm"
LMCACHE = "https://github.com/LMCache/LMCache"
# The LMCache release whose lazy-offload keys, defaults and ranges the LZ rules encode.
LMCACHE_LAZY_RELEASE = "0.5.6"


class Reference(msgspec.Struct, frozen=True):
    """A public URL and what it shows."""

    url: str
    note: str

    def __post_init__(self) -> None:
        if not self.url.startswith("https://"):
            raise ValueError(f"reference {self.url!r} is not a public https URL")
        if not self.note.strip():
            raise ValueError(f"reference {self.url}: the note is empty")

    def markdown(self) -> str:
        return f"[{self.note}]({self.url})"

    def text(self) -> str:
        return f"{self.note}: {self.url}"


def vllm_source(version: str, path: str, note: str) -> Reference:
    return Reference(f"{VLLM}/blob/v{version}/{path}", note)


def vllm_pr(number: int, note: str) -> Reference:
    return Reference(f"{VLLM}/pull/{number}", note)


def vllm_issue(number: int, note: str) -> Reference:
    return Reference(f"{VLLM}/issues/{number}", note)


def vllm_advisory(ghsa: str, note: str) -> Reference:
    return Reference(f"{VLLM}/security/advisories/{ghsa}", note)


def lmcache_source(path: str, note: str, version: str = LMCACHE_LAZY_RELEASE) -> Reference:
    return Reference(f"{LMCACHE}/blob/v{version}/{path}", note)


def lmcache_pr(number: int, note: str) -> Reference:
    return Reference(f"{LMCACHE}/pull/{number}", note)


def lmcache_issue(number: int, note: str) -> Reference:
    return Reference(f"{LMCACHE}/issues/{number}", note)


# vLLM source files the rules cite most (at the release the fact was read from).
VLLM_CONFIG_032 = vllm_source(
    "0.32.0", "vllm/config/vllm.py",
    "VllmConfig at 0.32.0: --kv-offloading-* become a KV connector, HMA is decided",
)
CACHE_CONFIG_032 = vllm_source(
    "0.32.0", "vllm/config/cache.py", "CacheConfig at 0.32.0: the KV cache and offload fields"
)
KV_TRANSFER_CONFIG_032 = vllm_source(
    "0.32.0", "vllm/config/kv_transfer.py", "KVTransferConfig at 0.32.0: its fields and types"
)
CONNECTOR_FACTORY_032 = vllm_source(
    "0.32.0", "vllm/distributed/kv_transfer/kv_connector/factory.py",
    "KVConnectorFactory at 0.32.0: registered connectors and their HMA support",
)
ARG_UTILS_032 = vllm_source(
    "0.32.0", "vllm/engine/arg_utils.py", "EngineArgs at 0.32.0: how serve flags are parsed"
)
ENVS_032 = vllm_source("0.32.0", "vllm/envs.py", "vllm/envs.py at 0.32.0: the env vars vLLM reads")
OFFLOADING_SCHEDULER_032 = vllm_source(
    "0.32.0", "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py",
    "the native offload scheduler at 0.32.0",
)
HMA_DEFAULT_PR = vllm_pr(41847, "HMA kept on for connectors that support it")
LMCACHE_MP_BACKEND_PR = vllm_pr(
    42865, "--kv-offloading-backend lmcache selects LMCacheMPConnector (0.23.0)"
)
LMCACHE_MP_CONNECTOR = lmcache_source(
    "lmcache/integration/vllm/lmcache_mp_connector.py",
    f"LMCacheMPConnector in LMCache {LMCACHE_LAZY_RELEASE}: the lmcache.mp.* keys it reads",
)
LAZY_POLICIES = lmcache_source(
    "lmcache/integration/vllm/lazy_offload_policy/__init__.py",
    f"lazy offload policy registry in LMCache {LMCACHE_LAZY_RELEASE}",
)
LAZY_FIFO = lmcache_source(
    "lmcache/integration/vllm/lazy_offload_policy/fifo.py",
    f"the FIFO lazy offload policy in LMCache {LMCACHE_LAZY_RELEASE}",
)
LAZY_EVICTION_AWARE = lmcache_source(
    "lmcache/integration/vllm/lazy_offload_policy/eviction_aware.py",
    f"the eviction-aware lazy offload policy in LMCache {LMCACHE_LAZY_RELEASE}",
)
LAZY_MANAGER = lmcache_source(
    "lmcache/integration/vllm/lazy_offload_manager.py",
    f"the lazy offload manager in LMCache {LMCACHE_LAZY_RELEASE}",
)
EVICTION_AWARE_PR = lmcache_pr(4847, "eviction-aware lazy offload policy for the MP connector")
RUFF_SUPPRESSION = Reference(
    "https://docs.astral.sh/ruff/linter/#error-suppression",
    "ruff's inline suppressions, which kvtool's follow",
)
