"""VG031: offload specs and secondary tier types against the target release's factories."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import vllm_pr
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import did_you_mean
from kvtool.audit.rules._premises import premise
from kvtool.audit.rules.versiongates._gates import first_seen_later


@register
class UnknownOffloadTier(ConfigRule):
    """Reports an offload spec or secondary tier type the target release does not register.

    What
    ----
    `kv_connector_extra_config.spec_name` not registered in `v1/kv_offload/factory.py` and
    no `spec_module_path` to load it from, or a `secondary_tiers[].type` not registered in
    the tiering factory at the target release.

    Why
    ---
    OffloadingConnector fails to build its spec at startup. Tier names changed: the
    filesystem tier is `fs_python` on 0.22.x and `fs` from 0.23.0; `obj` needs 0.23.0,
    `p2p` 0.25.0, `kvcr` 0.30.0.

    Example
    -------
    `"secondary_tiers": [{"type": "fs", ...}]` on 0.22.0.

    Fix
    ---
    Use a tier type the release registers (the message lists them).

    Releases
    --------
    Data-driven: `offload_specs` and `offload_tiers` per release. That a `spec_module_path`
    loads an unregistered spec (0.11.0 on) is the premise
    `offload_spec.unregistered_needs_module_path`, proven from the wheels
    (`rules/audit/premises.json`).
    """

    code = "VG031"
    name = "unknown-offload-tier"
    default_severity = Severity.error
    summary = "offload spec or tier type not registered at the target vLLM release"
    references = (
        vllm_pr(40020, "the multi-tier offloading framework (0.22.0)"),
        vllm_pr(41735, "the Python filesystem tier (fs_python on 0.22.x)"),
        vllm_pr(41968, "the object-store tier (0.23.0)"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        extra = ctx.extra_config
        location = ctx.location_of(KV_TRANSFER_CONFIG)
        spec = extra.get("spec_name")
        if (
            isinstance(spec, str)
            and ctx.facts.offload_specs
            and spec not in ctx.facts.offload_specs
            and not _loaded_from_module(ctx, extra)
        ):
            yield self.finding(
                f"Offload spec `{spec}` is not registered in vLLM {ctx.version} and no "
                "`spec_module_path` names the module to load it from."
                + did_you_mean(spec, ctx.facts.offload_specs),
                flag="kv_connector_extra_config.spec_name",
                location=location,
            )
        tiers = extra.get("secondary_tiers")
        if not isinstance(tiers, list) or not ctx.facts.offload_tiers:
            return
        registered = ", ".join(f"`{t}`" for t in ctx.facts.offload_tiers)
        for tier in tiers:
            kind = tier.get("type") if isinstance(tier, dict) else None
            if not isinstance(kind, str) or kind in ctx.facts.offload_tiers:
                continue
            gate = ctx.gate("tier", kind)
            when = ""
            if (later := first_seen_later(gate, ctx)) is not None:
                when = f" (it first appears in {later})"
            yield self.finding(
                f"Offload tier type `{kind}` is not registered in vLLM {ctx.version}{when}; "
                "registered: "
                f"{registered}." + did_you_mean(kind, ctx.facts.offload_tiers),
                flag="kv_connector_extra_config.secondary_tiers.type",
                location=location,
            )


def _loaded_from_module(ctx: RuleContext, extra: dict[str, Any]) -> bool:
    """``spec_module_path`` is set and the release imports an unregistered spec from it."""
    module = extra.get("spec_module_path")
    if not isinstance(module, str) or not module:
        return False
    return premise("offload_spec.unregistered_needs_module_path", ctx.version).holds
