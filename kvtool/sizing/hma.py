"""Whether vLLM runs the hybrid KV cache manager (HMA) for a deployment, as the release decides.

``VllmConfig.__post_init__`` decides it once, before any layer exists (vLLM v0.32.0
``config/vllm.py``; the release tables record each release's rule, read from its wheel):

- chunked local attention (``attention_chunk_size``, Llama 4) turns it off unless
  ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`` is 1 (its default is 1 from vLLM
  0.14, 0 before: the generated ``rules/models/capacity_formulas.json``);
- with ``--kv-transfer-config`` (or ``--kv-offloading-size``, which becomes one first
  where the release does so), a connector without ``SupportsHMA`` turns it off when
  ``--disable-hybrid-kv-cache-manager`` is not given (``per_connector``); older releases
  turn it off for any connector (``when_unset``, ``forces_off``);
- ``--disable-hybrid-kv-cache-manager`` turns it off; ``--no-disable-...`` where it must be
  off is an error vLLM raises.

With HMA off every attention layer is sized as full attention (one group, all layers per
block: ``unify_hybrid_kv_cache_specs``), and recurrent-state models cannot start.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvtool.errors import KvtoolError
from kvtool.releases.model import ReleaseFacts
from kvtool.sizing.capacity import CapacityFormula
from kvtool.sizing.deployment import Deployment
from kvtool.sizing.facts import SizingFacts
from kvtool.sizing.spec import AttentionKind, ModelSpec


@dataclass(frozen=True)
class HmaChoice:
    enabled: bool
    reason: str


def _connector_supports_hma(release: ReleaseFacts, name: str) -> bool | None:
    for fact in release.connectors:
        if fact.name == name:
            return fact.supports_hma
    return None


def _connector_turns_off(release: ReleaseFacts, connector: str) -> str | None:
    """Why ``connector`` turns HMA off at ``release`` when the flag is unset, else None."""
    decision = release.hma
    if decision is None or decision.mode in ("when_unset", "forces_off"):
        return (
            f"vLLM {release.version} turns the hybrid KV cache manager off for any "
            f"--kv-transfer-config ({connector})"
        )
    support = _connector_supports_hma(release, connector)
    if support:
        return None
    known = "lacks SupportsHMA" if support is False else "is not known to support HMA"
    return (
        f"{connector} {known} at vLLM {release.version}, so vLLM turns the hybrid KV "
        "cache manager off"
    )


def decide_hma(
    spec: ModelSpec, dep: Deployment, release: ReleaseFacts, facts: SizingFacts,
    formula: CapacityFormula,
) -> HmaChoice:
    """vLLM's decision for ``spec`` served as ``dep`` at ``release`` (KvtoolError: it raises)."""
    must_off: str | None = None
    name = facts.chunked_local_hma_env
    allowed = dep.env.get(name, formula.chunked_local_hma_env_default or "0")
    if any(g.kind is AttentionKind.CHUNKED for g in spec.attention) and allowed != "1":
        where = "set" if name in dep.env else f"vLLM {release.version}'s default"
        must_off = (
            f"chunked local attention turns the hybrid KV cache manager off: {name}="
            f"{allowed} ({where})"
        )
    connector = dep.kv_connector
    forced = release.hma is not None and release.hma.mode == "forces_off"
    if connector is not None and (dep.disable_hybrid_kv_cache_manager is None or forced):
        must_off = must_off or _connector_turns_off(release, connector)
    if dep.disable_hybrid_kv_cache_manager is True:
        return HmaChoice(False, "--disable-hybrid-kv-cache-manager")
    if forced and connector is not None and must_off is not None:
        return HmaChoice(False, must_off)  # a plain bool then: the flag cannot force it on
    if dep.disable_hybrid_kv_cache_manager is False and must_off is not None:
        raise KvtoolError(
            f"--no-disable-hybrid-kv-cache-manager: vLLM {release.version} refuses to start "
            f"({must_off}): 'Hybrid KV cache manager was explicitly enabled but is not "
            "supported in this configuration'"
        )
    if must_off is not None:
        return HmaChoice(False, must_off)
    via = f" with {connector} (SupportsHMA)" if connector else ""
    return HmaChoice(True, f"vLLM {release.version} keeps the hybrid KV cache manager on{via}")
