"""The sizes a launch fills in, all computed by :mod:`kvtool.sizing` (never here).

Each recipe names its sizing kind: ``native`` (the TP-wide CPU tier for
``--kv-offloading-size`` / ``cpu_bytes_to_use``), ``lmcache-mp`` (the server's
``--l1-size-gb``: the whole budget, since one server holds every rank's shard),
``kaito`` (the L1 KAITO itself will compute, shown for information) or ``none``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvtool.errors import KvtoolError
from kvtool.launch.recipe import Recipe

# Sizing warnings that concern only one backend's arithmetic.
_WARNING_SCOPE = {"kaito-": "kaito", "lmcache-": "lmcache-mp"}


def _relevant(code: str, sizing: str) -> bool:
    for prefix, kind in _WARNING_SCOPE.items():
        if code.startswith(prefix):
            return sizing == kind
    return True


@dataclass(frozen=True)
class LaunchSizes:
    """What kvtool.sizing decided for a launch: template parameters, and its warnings.

    ``values`` always holds ``utilization``; the sizes (``cpu_tier_gib``, ``l1_size_gb``,
    ...) only when the recipe sizes a tier and the inputs allow it.
    """

    values: dict[str, Any]
    warnings: tuple[str, ...] = ()


# Decimals a GiB size keeps in a launch config: 1e-6 GiB is about 1 KiB, so rounding up
# only strips float noise (77.7 x 0.333 = 25.874100000000002) and an exact size the
# operator gave (--cpu-tier-gib 0.0625) stays exact.
LAUNCH_GIB_DECIMALS = 6


def _rounded(gib: float | None) -> float | None:
    from kvtool.sizing.arithmetic import round_up_gib

    return None if gib is None else round_up_gib(gib, LAUNCH_GIB_DECIMALS)


def launch_sizes(
    recipe: Recipe,
    *,
    model: str,
    release: str,
    tp: int,
    host_ram_gib: float | None,
    cpu_tier_gib: float | None,
    utilization: float | None,
) -> LaunchSizes:
    """Template parameters for ``recipe``'s sizes, and the warnings kvtool.sizing gave.

    The model is found and checked against ``release``'s model registry exactly as
    ``kvtool size --vllm-version`` does (:func:`kvtool.sizing.model_spec.load_model_spec`).
    """
    from kvtool.sizing.deployment import make_deployment
    from kvtool.sizing.facts import sizing_facts
    from kvtool.sizing.model_spec import load_model_spec
    from kvtool.sizing.report import compute

    facts = sizing_facts()
    util = utilization if utilization is not None else facts.kaito_default_utilization
    # Validated before any early return: a recipe that sizes nothing still emits the
    # utilization (KAITO's ConfigMap), so a bad value must not pass unchecked.
    deployment = make_deployment(
        tp=tp, host_ram_gib=host_ram_gib, cpu_tier_gib=cpu_tier_gib, utilization=util
    )
    if recipe.sizing == "none" or (recipe.sizing == "kaito" and host_ram_gib is None):
        return LaunchSizes({"utilization": util})
    if recipe.sizing != "kaito" and host_ram_gib is None and cpu_tier_gib is None:
        raise KvtoolError(
            f"recipe {recipe.name} sizes a host-memory tier: pass --host-ram-gib "
            "(RAM available to the engine's host) or --cpu-tier-gib"
        )
    try:
        spec = load_model_spec(model, release=release)
    except KvtoolError as exc:
        raise KvtoolError(
            f"{exc} (kvtool launch sizes the tier from the model's KV geometry: "
            "pass --sizing-model NAME|PATH when --model is a name kvtool does not know)"
        ) from None
    report = compute(spec, deployment, facts)
    tier = _rounded(report.kv_offloading_size_gib)
    l1 = _rounded(report.l1_whole_budget_gib)
    values: dict[str, Any] = {
        "utilization": util,
        "sizing_model": report.model,
        "cpu_tier_gib": tier,
        "cpu_tier_tokens": report.cpu_tier_tokens,
        "l1_size_gb": l1,
        "lmcache_tokens": report.lmcache_tokens_at_whole_budget,
        "kaito_l1_gib": report.l1_capacity_gib,
        "kaito_lmcache_tokens": report.lmcache_tokens_at_l1_capacity,
    }
    if tier is not None:
        # vLLM turns the GiB figure into bytes as size x 2^30 (sizing_facts.toml gib_bytes).
        values["cpu_tier_bytes"] = round(tier * facts.gib_bytes)
    warnings = tuple(w.message for w in report.warnings if _relevant(w.code, recipe.sizing))
    return LaunchSizes(values, warnings)
