"""SZ011: the host memory a native CPU tier really takes, beyond its nominal size."""

from __future__ import annotations

import math
from collections.abc import Iterable

from kvtool.audit.context import KV_OFFLOADING_SIZE, KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import Finding, Location, Severity
from kvtool.audit.references import vllm_pr
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._premises import premise

GIB = 1 << 30
PINNED = "kv_offloading.pinned_power_of_two"
NATIVE = "OffloadingConnector"


def _nominal_gib(ctx: RuleContext) -> tuple[float, str, Location | None] | None:
    """The TP x PP-wide CPU tier in GiB, what set it, and where."""
    mapping = ctx.backend_mapping
    size = ctx.float_option(KV_OFFLOADING_SIZE)
    if (
        mapping is not None
        and mapping.connector == NATIVE
        and size
        and mapping.size_scope == "total"
    ):
        return size, f"{KV_OFFLOADING_SIZE} {size:g}", ctx.location_of(KV_OFFLOADING_SIZE)
    for name, extra in ctx.connector_extra_configs:
        raw = extra.get("cpu_bytes_to_use")
        if (
            name == NATIVE
            and isinstance(raw, int | float)
            and not isinstance(raw, bool)
            and raw > 0
        ):
            return raw / GIB, f"cpu_bytes_to_use {raw:g}", ctx.location_of(KV_TRANSFER_CONFIG)
    return None


@register
class PinnedTierRoundedUp(ConfigRule):
    """Reports a native CPU tier whose pinned per-rank allocation is rounded up to a power of two.

    What
    ----
    On releases that allocate the CPU tier as pinned tensors, each TP x PP rank's share
    (`--kv-offloading-size` or `cpu_bytes_to_use`, divided by the ranks) is rounded up to
    the next power of two by PyTorch's pinned host allocator.

    Why
    ---
    The host maps up to twice the nominal size: `--kv-offloading-size 80` at TP 2 maps
    2 x 64 GiB, not 80 GiB (vLLM PR #48436). With `--host-ram-gib`, a rounded pool that
    no longer fits the host is an error (the host or pod is OOM-killed).

    Example
    -------
    `--kv-offloading-size 100 -tp 2` on 0.26.0 (50 GiB per rank -> 64 GiB each).

    Fix
    ---
    Choose a size whose per-rank share is a power of two (`-tp 2`: 64 or 128 GiB), or
    upgrade to 0.27.0+, where the tier is one shared mapping of the requested size.

    Releases
    --------
    `kv_offloading.pinned_power_of_two` in `rules/curated/semantics.toml` (0.11.0-0.26.x).
    """

    code = "SZ011"
    name = "pinned-tier-rounded-up"
    default_severity = Severity.warning
    summary = "pinned CPU tier rounded up to a power of two per rank: more host memory"
    references = (
        vllm_pr(48436, "pinned CPU tier rounded up to a power of two per allocation"),
        vllm_pr(50094, "measured pinned sizes: 6 -> 8, 10 -> 16, 12 -> 16 GiB"),
    )
    since = "0.2.0"
    other_severities = (Severity.error,)  # the rounded pool exceeds --host-ram-gib

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not premise(PINNED, ctx.version).holds:
            return
        nominal = _nominal_gib(ctx)
        if nominal is None:
            return
        total, written, location = nominal
        per_rank = total / ctx.world
        rounded = 2.0 ** math.ceil(math.log2(per_rank)) if per_rank > 0 else 0.0
        if rounded <= per_rank:
            return
        effective = rounded * ctx.world
        too_big = ctx.host_ram_gib is not None and effective > ctx.host_ram_gib
        host = f", more than the host's {ctx.host_ram_gib:g} GiB" if too_big else ""
        yield self.finding(
            f"`{written}` over TP x PP = {ctx.world} is {per_rank:g} GiB per rank, which vLLM "
            f"{ctx.version} pins as {rounded:g} GiB (next power of two): {effective:g} GiB "
            f"of host memory, not {total:g}{host}.",
            flag=KV_OFFLOADING_SIZE if written.startswith("--") else "cpu_bytes_to_use",
            location=location,
            severity=Severity.error if too_big else Severity.warning,
            per_rank_gib=per_rank,
            pinned_per_rank_gib=rounded,
            host_gib=effective,
        )
