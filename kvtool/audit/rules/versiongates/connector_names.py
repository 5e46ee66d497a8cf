"""VG020, VG021: `kv_connector` names against the target release's connector factory."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import CONNECTOR_FACTORY_032, Reference, vllm_pr
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import did_you_mean_connector
from kvtool.audit.rules._plugins import (
    PluginImage,
    image_is_unplaced,
    image_may_bundle,
    image_plugin,
    registering,
)
from kvtool.audit.rules.versiongates._gates import first_seen_later, removed_at_target


def _configured_connectors(ctx: RuleContext) -> list[str]:
    """Registered connector names written in ``--kv-transfer-config`` (MultiConnector
    children included; a child loaded by its own ``kv_connector_module_path`` is not)."""
    name = ctx.kv_transfer_config.get("kv_connector")
    names = [name] if isinstance(name, str) and name else []
    conn = ctx.connector
    if conn is not None and conn.via == "kv-transfer-config":
        external = set(ctx.external_connectors)
        names.extend(child for child in conn.children if child not in external)
    return names


def _transfer_config_is_used(ctx: RuleContext) -> bool:
    """False when an offload flag overwrites ``kv_connector``
    (kv-offloading-size-overwrites... reports it)."""
    return ctx.backend_mapping is None and "kv_connector_module_path" not in ctx.kv_transfer_config


@register
class UnknownConnector(ConfigRule):
    """Reports a `kv_connector` the target release's connector factory does not register.

    What
    ----
    `--kv-transfer-config` names a connector (also inside MultiConnector's `connectors`
    list) that is not registered in `KVConnectorFactory` at the target release.

    Why
    ---
    The factory raises at startup; a misspelt connector name fails only after the
    engine begins to initialise.

    Example
    -------
    `{"kv_connector": "LMCacheConectorV1"}` (registered name: `LMCacheConnectorV1`);
    `HiSparseConnector` before 0.30.0.

    Fix
    ---
    Use the suggested name, or a release that has the connector. Connectors (or
    MultiConnector children) loaded with `kv_connector_module_path` are not checked.

    Images that patch connectors into the factory are read from the curated
    `rules/curated/plugin_images.toml`: AIBrix's images register
    `AIBrixOffloadingConnectorV1Type1/2/3` and `AIBrixPDReuseConnector`, so those are not
    reported there; on a known image without them (`vllm/vllm-openai`) they stay errors.
    Where the image cannot be placed (none named, or one kvtool does not know) a
    connector that only a plugin registers, or an unknown name with no close registered
    spelling, is info: a plugin may register it, and kvtool could not check.

    Releases
    --------
    Data-driven: `connectors` per release and `first_seen` in the index.
    """

    code = "VG020"
    name = "unknown-connector"
    default_severity = Severity.error
    summary = "KV connector not registered at the target vLLM release"
    fix_applicability = "display"
    references = (
        CONNECTOR_FACTORY_032,
        Reference(
            url="https://github.com/vllm-project/aibrix/blob/main/python/aibrix_kvcache/integration/vllm/patches/vllm_v0.10.2-aibrix-kvcache.patch",
            note="AIBrix patches AIBrixOffloadingConnectorV1Type1/2/3 into the connector factory",
        ),
    )
    since = "0.1.0"
    other_severities = (Severity.info,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not _transfer_config_is_used(ctx):
            return
        registered = [c.name for c in ctx.facts.connectors]
        bundled = image_plugin(ctx)
        for name in _configured_connectors(ctx):
            if name in registered or (bundled is not None and name in bundled.connectors):
                continue  # the release registers it, or the image patches it in
            gate = ctx.gate("connector", name)
            if removed_at_target(gate, ctx):
                continue  # removed-connector reports it
            severity: Severity | None = None
            if (later := first_seen_later(gate, ctx)) is not None:
                message = (
                    f"Connector `{name}` is not registered in vLLM {ctx.version}: "
                    f"it first appears in {later}."
                )
            elif plugins := registering(name):
                message, severity = _plugin_connector(ctx, name, plugins)
            else:
                suggestion = did_you_mean_connector(name, registered)
                message = f"Connector `{name}` is not registered in vLLM {ctx.version}." + (
                    suggestion
                )
                if not suggestion and image_is_unplaced(ctx):
                    severity = Severity.info
                    message += (
                        f" kvtool does not know the image `{ctx.config.invocation.image}`: a "
                        "plugin package in it may register the connector (vLLM's "
                        "`vllm.general_plugins` entry points run before the factory is "
                        "asked), so whether it is missing was not checked."
                    )
            yield self.finding(
                message,
                flag=f"{KV_TRANSFER_CONFIG}.kv_connector",
                location=ctx.location_of(KV_TRANSFER_CONFIG),
                severity=severity,
            )


def _plugin_connector(
    ctx: RuleContext, name: str, plugins: tuple[PluginImage, ...]
) -> tuple[str, Severity | None]:
    """The message for a connector that only a distribution's images register: an error on
    an image kvtool knows to be without it, info where the image cannot be placed."""
    images = ", ".join(
        f"`{p.repository}`" + (f" (tags with `{p.tag_contains}`)" if p.tag_contains else "")
        for p in plugins
    )
    base = (
        f"Connector `{name}` is not registered by vLLM {ctx.version} itself; "
        f"{plugins[0].plugin} patches it into vLLM's connector factory in its images "
        f"({images}; {plugins[0].source.split(' ', 1)[0]})."
    )
    image = ctx.config.invocation.image
    if image is None or image_is_unplaced(ctx) or image_may_bundle(ctx):
        where = f"the image `{image}`" if image else "the installation this command runs in"
        return (
            base + f" kvtool cannot tell whether {where} carries that patch, so this was "
            "not checked.",
            Severity.info,
        )
    return (
        base + f" The image `{image}` is not one of them: the factory raises "
        f"`Unsupported connector type` at startup.",
        None,
    )


@register
class RemovedConnector(ConfigRule):
    """Reports a `kv_connector` removed from the factory at or before the target release.

    What
    ----
    A connector that earlier releases registered and the target release does not.

    Why
    ---
    The factory raises at startup.

    Example
    -------
    `P2pNcclConnector` on 0.24.0 or later. Migrate to `NixlConnector`, or to the native `p2p`
    tier, which only exists from 0.25.0.

    Fix
    ---
    Switch to the replacement named in the message.

    Releases
    --------
    Data-driven: `gone_at` and `replacement` for connectors in `rules/releases/index.json`.
    """

    code = "VG021"
    name = "removed-connector"
    default_severity = Severity.error
    summary = "KV connector removed at or before the target vLLM release"
    references = (vllm_pr(44854, "P2pNcclConnector removed (0.24.0)"), CONNECTOR_FACTORY_032)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not _transfer_config_is_used(ctx):
            return
        registered = {c.name for c in ctx.facts.connectors}
        for name in _configured_connectors(ctx):
            gate = ctx.gate("connector", name)
            if name in registered or not removed_at_target(gate, ctx):
                continue
            message = f"Connector `{name}` was removed in vLLM {gate.gone_at}."
            if gate.replacement:
                message += f" Use {gate.replacement}."
            yield self.finding(
                message,
                flag=f"{KV_TRANSFER_CONFIG}.kv_connector",
                location=ctx.location_of(KV_TRANSFER_CONFIG),
                gone_at=gate.gone_at,
            )
