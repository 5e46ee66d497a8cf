"""CN050: the engines of a prefill/decode pair defined in one input file must agree."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import Reference, vllm_source
from kvtool.audit.registry import ConfigRule, register

PD_ROLES = ("kv_producer", "kv_consumer")
_OPPOSITE = {"kv_producer": "kv_consumer", "kv_consumer": "kv_producer"}


def _role(ctx: RuleContext) -> str | None:
    if ctx.connector is None or ctx.connector.via != "kv-transfer-config":
        return None
    role = ctx.kv_transfer_config.get("kv_role")
    return role if isinstance(role, str) else None


@register
class DisaggregatedPairInconsistent(ConfigRule):
    """Reports an engine that cannot take part in the prefill/decode pair it is defined with.

    What
    ----
    Other engines in the same input file (a manifest or compose file) are a disaggregated
    pair (`kv_role` `kv_producer` / `kv_consumer`), and this engine either has no KV
    connector at all, or has the opposite role with a connector none of theirs can talk to.

    Why
    ---
    KV moves between prefill and decode only through a connector both sides load: a decode
    engine without one recomputes every prompt (or the router's P/D hand-off fails), and a
    producer and a consumer with different connectors never exchange a block.

    Example
    -------
    A prefill Deployment with `{"kv_connector":"NixlConnector","kv_role":"kv_producer"}` and a
    decode Deployment in the same file with no `--kv-transfer-config`.

    Fix
    ---
    Give every engine of the pair the same connector with consistent roles.

    Releases
    --------
    Every release.
    """

    code = "CN050"
    name = "disaggregated-pair-inconsistent"
    default_severity = Severity.error
    summary = "an engine of a prefill/decode pair without a connector both sides load"
    references = (
        vllm_source(
            "0.32.0",
            "vllm/config/kv_transfer.py",
            "KVTransferConfig at 0.32.0: kv_role and the connector a P/D pair names",
        ),
        Reference(
            "https://docs.vllm.ai/en/latest/features/disagg_prefill.html",
            "vLLM docs: disaggregated prefilling, both engines carry a KV connector",
        ),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        partners = [s for s in ctx.siblings if _role(s) in PD_ROLES]
        if not partners:
            return
        labels = ", ".join(s.config.invocation.label for s in partners)
        if ctx.connector is None:
            yield self.finding(
                f"This engine has no KV connector, but {labels} in the same file "
                f"{'is' if len(partners) == 1 else 'are'} a prefill/decode pair: no KV "
                "reaches or leaves this engine.",
                flag=KV_TRANSFER_CONFIG,
                partners=[s.config.invocation.label for s in partners],
            )
            return
        role = _role(ctx)
        if role not in PD_ROLES:
            return
        opposite = [s for s in partners if _role(s) == _OPPOSITE[role]]
        mine = set(ctx.connector_names)
        strangers = [s for s in opposite if not mine & set(s.connector_names)]
        if opposite and len(strangers) == len(opposite):
            theirs = sorted({n for s in strangers for n in s.connector_names})
            yield self.finding(
                f"This {role} loads `{', '.join(sorted(mine))}` but its "
                f"{_OPPOSITE[role]} partner(s) ({labels}) load `{', '.join(theirs)}`: the "
                "pair shares no connector, so no KV is exchanged.",
                flag=KV_TRANSFER_CONFIG,
                location=ctx.connector_location,
            )
