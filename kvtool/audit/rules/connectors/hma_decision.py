"""Whether vLLM keeps the hybrid KV cache manager (HMA) on for a config, and why.

Shared by the HMA rules (CN010-CN014): one imitation of vLLM's decision per release,
so the rules only compare its outcome with the model and the flags.
"""

from __future__ import annotations

import msgspec

from kvtool.audit.context import KV_TRANSFER_CONFIG, RuleContext

DISABLE_HMA = "--disable-hybrid-kv-cache-manager"
HMA_FACTORY_ERROR = (
    "ValueError: Connector {name} does not support HMA but HMA is enabled. "
    "Please set `--disable-hybrid-kv-cache-manager`."
)


class HmaOutcome(msgspec.Struct, frozen=True):
    """Whether HMA ends up on, and why, for the effective connector at the target release."""

    on: bool
    # "flag", "forced-on", "transfer-config", "non-hma-connector", "no-connector",
    # "supported", or "unresolved-class": the decision rests on a class loaded by
    # kv_connector_module_path, which the audit cannot see (``on`` is then a guess: True,
    # so no rule reports HMA off).
    reason: str
    non_hma: tuple[str, ...]
    unresolved: tuple[str, ...] = ()  # the external classes the decision rests on

    @property
    def decided(self) -> bool:
        return self.reason != "unresolved-class"


MULTI_CONNECTOR = "MultiConnector"


def _unresolved(ctx: RuleContext, non_hma: tuple[str, ...]) -> tuple[str, ...]:
    """External classes vLLM's per-connector HMA check would ask about, when their answer
    decides it (vllm v0.32.0 KVConnectorFactory.supports_hma_config: a connector named
    ``MultiConnector`` is judged by its children, all of which must support HMA; any other
    name by its own class)."""
    external = ctx.external_connectors
    conn = ctx.connector
    if not external or conn is None:
        return ()
    if conn.name != MULTI_CONNECTOR:
        return (conn.name,) if conn.name in external else ()
    # A registered child without SupportsHMA already turns HMA off, whatever the others say.
    return () if non_hma else external


def _user_transfer_config(ctx: RuleContext) -> bool:
    """The command passes ``--kv-transfer-config`` itself (vLLM then holds a config object,
    whatever the offload flags later write into it)."""
    return ctx.option(KV_TRANSFER_CONFIG) is not None or bool(ctx.kv_transfer_config)


def hma_outcome(ctx: RuleContext, *, ignore_flag: bool = False) -> HmaOutcome:
    """Imitate vLLM's HMA decision on a GPU platform (CPU platforms always turn HMA off).

    ``ignore_flag``: the decision vLLM would take without ``--disable-hybrid-kv-cache-manager``.
    The release's decision mode (``hma`` in the release table, read from VllmConfig) says
    whether a ``--kv-transfer-config`` overrides the flag (up to 0.12), turns HMA off only
    when the flag is unset (0.13-0.21), or SupportsHMA decides (0.22 on).
    """
    non_hma = tuple(ctx.non_hma_connectors())
    flag = None if ignore_flag else ctx.bool_option(DISABLE_HMA)
    conn = ctx.connector
    mode = ctx.hma_mode
    converted_first = ctx.facts.hma is not None and ctx.facts.hma.offload_converted_first
    # Up to 0.21 VllmConfig decides HMA from the user's --kv-transfer-config before it
    # converts --kv-offloading-* into a connector: a config the user passed turns HMA off
    # even when the offload flags then replace its connector (vllm v0.11.2
    # vllm/config/vllm.py: the HMA check at line 705, the conversion at line 776).
    from_transfer_config = _user_transfer_config(ctx) or (
        converted_first and conn is not None and conn.via == "kv-transfer-config"
    )
    if mode == "transfer-config-forces-off" and from_transfer_config:
        # The plain-bool flag is overwritten with True whatever the user passed.
        return HmaOutcome(False, "transfer-config", non_hma)
    if flag is True:
        return HmaOutcome(False, "flag", non_hma)
    unresolved = _unresolved(ctx, non_hma)
    if flag is False:
        if unresolved:  # whether the factory refuses the class is the class's business
            return HmaOutcome(True, "unresolved-class", non_hma, unresolved)
        return HmaOutcome(True, "forced-on", non_hma)
    if conn is None:
        return HmaOutcome(True, "no-connector", non_hma)
    if mode in ("transfer-config-forces-off", "transfer-config-disables"):
        if from_transfer_config or converted_first:
            return HmaOutcome(False, "transfer-config", non_hma)
        # --kv-offloading-* became a connector after the HMA decision: HMA stayed on.
        return HmaOutcome(True, "forced-on", non_hma)
    if unresolved:
        return HmaOutcome(True, "unresolved-class", non_hma, unresolved)
    if non_hma:
        return HmaOutcome(False, "non-hma-connector", non_hma)
    return HmaOutcome(True, "supported", non_hma)
