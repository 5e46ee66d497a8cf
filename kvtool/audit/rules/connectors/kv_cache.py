"""CN030, CN031, CN033, CN034: KV cache settings next to offload (prefix caching, KV dtype
scales, the retention interval, the Mamba cache mode).
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity
from kvtool.audit.references import CACHE_CONFIG_032, OFFLOADING_SCHEDULER_032, vllm_pr, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note, removal_fix, replacement_fix
from kvtool.audit.rules._premises import capped, premise
from kvtool.bugdb.model import Impact
from kvtool.errors import KvtoolError
from kvtool.models import find_model_config
from kvtool.sizing.checkpoint_kv import declared_kv_cache_dtype


@register
class OffloadWithoutPrefixCaching(ConfigRule):
    """Reports native KV offload with prefix caching turned off.

    What
    ----
    `OffloadingConnector` or `SimpleCPUOffloadConnector` (alone or as a MultiConnector child)
    is configured and `--no-enable-prefix-caching` is passed.

    Why
    ---
    vLLM's native offload finds offloaded KV again through the prefix cache's block hashes;
    with prefix caching off it has nothing to hit against and only costs transfer bandwidth.
    LMCache's connectors are not affected: they hash token chunks themselves and the
    scheduler asks every connector for external hits whether prefix caching is on or off
    (LMCache's own examples run `--no-enable-prefix-caching`), so they are not reported.

    Example
    -------
    `--kv-offloading-size 100 --no-enable-prefix-caching`.

    Fix
    ---
    Remove `--no-enable-prefix-caching` (prefix caching is on by default).

    Releases
    --------
    Every release with native KV offload; which connectors need prefix caching is
    `offload.prefix_cache_connectors` in `rules/audit/semantics.toml`.
    """

    code = "CN030"
    name = "offload-without-prefix-caching"
    default_severity = Severity.warning
    summary = "native KV offload configured with prefix caching off"
    fix_applicability = "unsafe"
    references = (CACHE_CONFIG_032, OFFLOADING_SCHEDULER_032)
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        if not ctx.prefix_caching_off:
            return
        needs = ctx.semantics.prefix_cache_connectors
        connector = next((n for n in ctx.connector_names if n in needs), None)
        if connector is None:
            return
        opt = ctx.option("--enable-prefix-caching")
        assert opt is not None  # prefix_caching_off implies the option is present
        yield self.finding(
            f"`{connector}` finds offloaded KV through prefix-cache block hashes, but prefix "
            "caching is off: offloaded blocks can never be hit.",
            flag="--enable-prefix-caching",
            location=opt.location,
            fix=removal_fix(ctx, opt, f"remove {opt.written}", safe=False),
        )


def checkpoint_declares_kv_scales(ctx: RuleContext) -> bool | None:
    """Whether the served checkpoint, when it is a local directory, declares a quantized KV
    cache (ModelOpt ``kv_cache_quant_algo``, a compressed-tensors ``kv_cache_scheme``): such
    checkpoints ship calibrated k/v scales. None when kvtool cannot read the checkpoint."""
    name = ctx.config.model
    if not name:
        return None
    try:
        found = find_model_config(name, catalog=False)
        if found is None:
            return None
        quant = found.raw.get("quantization_config")
        declared = declared_kv_cache_dtype(quant if quant is not None else found.quant, found.where)
    except KvtoolError:
        return None
    return declared is not None


@register
class Fp8KvCacheWithoutScales(ConfigRule):
    """Reports that an FP8 KV cache uses scale 1.0 unless the checkpoint ships k/v scales.

    What
    ----
    `--kv-cache-dtype fp8*` is set and the checkpoint does not declare a quantized KV
    cache (no `kv_cache_scheme` / `kv_cache_quant_algo` in its quantization config), or
    kvtool cannot read the checkpoint to tell.

    Why
    ---
    Without shipped scales vLLM uses 1.0: keys and values above FP8's range are clipped
    and the model's outputs degrade or break (often only past 128k context, so short
    smoke tests pass). The impact is wrong output served without an error, so the
    severity follows it: an error when the checkpoint is a local directory whose
    config declares no KV scales (scale 1.0 is certain), a warning when kvtool cannot
    see the checkpoint (a hub name: it may ship scales). `--calculate-kv-scales`
    (removed in 0.28.0) still computed dynamic scales through 0.27.1; the field guide's
    "it had no effect" is wrong.

    Example
    -------
    `--kv-cache-dtype fp8` on a checkpoint without `k_scale`.

    Fix
    ---
    Serve a checkpoint calibrated with KV scales (e.g. an `-FP8-KV` export), or stay on
    BF16 KV and use offload to regain memory.

    Releases
    --------
    Every release (the premise `fp8_kv.default_scale`, proven from the wheels:
    `rules/audit/premises.json`); `--calculate-kv-scales` presence from the release tables.
    """

    code = "CN031"
    name = "fp8-kv-cache-without-scales"
    default_severity = Severity.warning
    summary = "FP8 KV cache: scale 1.0 unless the checkpoint ships k/v scales"
    references = (
        vllm_source(
            "0.27.1", "vllm/config/cache.py",
            "calculate_kv_scales at 0.27.1: without checkpoint scales they default to 1.0",
        ),
        vllm_pr(49389, "--calculate-kv-scales removed (0.28.0)"),
    )
    since = "0.1.0"
    other_severities = (Severity.error,)  # a local checkpoint that declares no KV scales

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--kv-cache-dtype")
        if opt is None or not str(opt.value).startswith("fp8"):
            return
        calc = ctx.option("--calculate-kv-scales")
        if calc is not None and calc.known and calc.value is True:
            return  # dynamic scales are computed on releases that still have the flag
        verdict = premise("fp8_kv.default_scale", ctx.version)
        if not verdict.holds:
            return
        declares = checkpoint_declares_kv_scales(ctx)
        if declares:
            return
        if declares is False:
            message = (
                f"`--kv-cache-dtype {opt.value}`: the checkpoint `{ctx.config.model}` declares "
                "no quantized KV cache, so it ships no `k_scale`/`v_scale` and vLLM uses scale "
                "1.0: large keys and values are clipped and outputs break, without an error."
            )
            severity = capped(Impact.silent_corruption.severity, verdict)
        else:
            message = (
                f"`--kv-cache-dtype {opt.value}`: unless the checkpoint ships "
                "`k_scale`/`v_scale`, vLLM uses scale 1.0, which clips large keys and values "
                "on long contexts and breaks outputs without an error."
            )
            severity = Severity.warning
        yield self.finding(
            message + verdict.note,
            flag="--kv-cache-dtype",
            location=opt.location,
            severity=severity,
        )


@register
class RetentionIntervalNotBlockMultiple(ConfigRule):
    """Reports a `--prefix-cache-retention-interval` that is not a multiple of `--block-size`.

    What
    ----
    A positive retention interval must be a multiple of the scheduler block size.

    Why
    ---
    vLLM rejects the value at startup. From 0.30.0 the interval also gates which SWA/SSM
    chunks OffloadingConnector offloads and must be a multiple of the SWA group's
    `tokens_per_chunk` (checked by vLLM; not visible to kvtool).

    Example
    -------
    `--prefix-cache-retention-interval 100 --block-size 32`.

    Fix
    ---
    Round the interval to a multiple of the block size.

    Releases
    --------
    `retention_interval_block_multiple` in `rules/audit/semantics.toml`, a premise proven
    from the wheels (`rules/audit/premises.json`: the coordinator's check from 0.23.0; the
    flag exists from 0.29.0).
    """

    code = "CN033"
    name = "retention-interval-not-block-multiple"
    default_severity = Severity.error
    summary = "--prefix-cache-retention-interval is not a multiple of --block-size"
    fix_applicability = "display"
    references = (
        vllm_source(
            "0.30.0", "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py",
            "the offload scheduler at 0.30.0: the retention interval must be a chunk multiple",
        ),
        CACHE_CONFIG_032,
    )
    since = "0.1.0"
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        interval_opt = ctx.option("--prefix-cache-retention-interval")
        if interval_opt is None or ctx.option("--block-size") is None:
            return
        verdict = premise("retention_interval_block_multiple", ctx.version)
        if not verdict.holds:
            return
        interval = ctx.int_option("--prefix-cache-retention-interval", 0)
        block = ctx.int_option("--block-size", 0)
        if interval <= 0 or block <= 0 or interval % block == 0:
            return
        lower = interval - interval % block
        yield self.finding(
            f"`--prefix-cache-retention-interval {interval}` is not a multiple of "
            f"`--block-size {block}`; "
            f"use {lower or block} or {lower + block}." + verdict.note,
            flag="--prefix-cache-retention-interval",
            location=interval_opt.location,
            severity=capped(self.default_severity, verdict),
        )


@register
class MambaCacheModeAllForcesMrv1(ConfigRule):
    """Reports `--mamba-cache-mode all` on releases where it forces Model Runner V1.

    What
    ----
    `--mamba-cache-mode all` on a release that deprecated the value: vLLM warns and falls
    back to Model Runner V1 ("mamba cache mode 'all'" is on the MRV2-unsupported list).

    Why
    ---
    The deployment silently loses Model Runner V2, and the next release rejects the value
    outright (`invalid choice`), so the flag blocks the upgrade too.

    Example
    -------
    `--mamba-cache-mode all` on 0.30.0 or 0.31.0.

    Fix
    ---
    Use `align` (a safe fix; vLLM sets it itself when prefix caching is on).

    Releases
    --------
    `mamba_cache_mode.all_forces_mrv1` in `rules/curated/semantics.toml` (0.30.0-0.31.x), a
    premise proven from the wheels (`rules/audit/premises.json`); the rejection on later
    releases is `invalid-choice` (VG005).
    """

    code = "CN034"
    name = "mamba-cache-mode-all-forces-mrv1"
    default_severity = Severity.warning
    summary = "--mamba-cache-mode all warns and forces Model Runner V1"
    fix_applicability = "safe"
    references = (
        vllm_pr(55041, "--mamba-cache-mode all deprecated; it forces the V1 model runner"),
        vllm_pr(58997, "--mamba-cache-mode all removed (0.32.0)"),
    )
    since = "0.1.0"
    other_fix_applicabilities = ("display",)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--mamba-cache-mode")
        if opt is None or opt.value != "all":
            return
        verdict = premise("mamba_cache_mode.all_forces_mrv1", ctx.version)
        if not verdict.holds:
            return
        migration = ctx.semantics.choice_migration("--mamba-cache-mode", "all")
        fix = None
        if migration is not None:
            fix = replacement_fix(
                ctx,
                opt,
                ("--mamba-cache-mode", migration.replacement),
                f"--mamba-cache-mode all -> {migration.replacement}",
                safe=True,
            )
        yield self.finding(
            f"`--mamba-cache-mode all` is deprecated in vLLM {ctx.version}: it warns and forces "
            "Model Runner V1." + conditional_note(opt) + verdict.note,
            flag="--mamba-cache-mode",
            location=opt.location,
            fix=fix,
        )
