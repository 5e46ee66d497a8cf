"""SZ: sizing units (per rank versus total) and host memory.

The arithmetic is ``kvtool.sizing.arithmetic`` (the same code ``kvtool size`` uses);
these rules only decide when a config's numbers contradict it.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import KV_OFFLOADING_SIZE, RuleContext
from kvtool.audit.model import Finding, Fix, Severity
from kvtool.audit.references import (
    CACHE_CONFIG_032,
    LMCACHE_MP_BACKEND_PR,
    lmcache_issue,
    lmcache_source,
    vllm_issue,
    vllm_pr,
    vllm_source,
)
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._common import conditional_note, replacement_fix
from kvtool.audit.rules.podmem import HostTier, host_tiers
from kvtool.sizing.arithmetic import per_rank_gib, total_from_per_rank_gib

LMCACHE_CPU_SIZE = "LMCACHE_MAX_LOCAL_CPU_SIZE"

# The largest HBM of one GPU this tool targets: H200, 141 GB (NVIDIA H200 datasheet).
# A TP-wide host tier no larger than one GPU's memory almost always means a per-GPU number.
LARGEST_GPU_HBM_GB = 141


def _fmt(value: float) -> str:
    return f"{value:g}"


def _lmcache_cpu_size(ctx: RuleContext) -> float | None:
    value = ctx.env_value(LMCACHE_CPU_SIZE)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _in_process_lmcache(ctx: RuleContext) -> bool:
    return "LMCacheConnectorV1" in ctx.connector_names


def _mp_lmcache(ctx: RuleContext) -> bool:
    return "LMCacheMPConnector" in ctx.connector_names


@register
class KvOffloadingSizePerRank(ConfigRule):
    """Reports a `--kv-offloading-size` that looks like a per-GPU number.

    What
    ----
    With TP x PP > 1, a native `--kv-offloading-size` no larger than one GPU's HBM (141 GB on
    H200) is almost certainly sized per GPU, the SGLang habit.

    Why
    ---
    The flag is the total across all TP x PP ranks, in GiB (the opposite of SGLang's
    per-rank `--hicache-size`): each rank gets size / (TP x PP), a factor of TP less than meant.

    Example
    -------
    `-tp 8 --kv-offloading-size 100` (each rank gets 12.5 GiB).

    Fix
    ---
    Multiply by TP x PP (an unsafe fix: check host RAM first).

    Releases
    --------
    Every release with `--kv-offloading-size` (native backend sizes are totals on all of them).
    """

    code = "SZ001"
    name = "kv-offloading-size-per-rank"
    default_severity = Severity.warning
    summary = "--kv-offloading-size looks sized per GPU, but it is the TP-wide total"
    fix_applicability = "unsafe"
    references = (
        vllm_pr(24498, "--kv-offloading-size is one instance-wide budget, no per-rank split"),
        CACHE_CONFIG_032,
    )
    since = "0.1.0"
    other_fix_applicabilities = ("display",)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option(KV_OFFLOADING_SIZE)
        mapping = ctx.backend_mapping
        size = ctx.float_option(KV_OFFLOADING_SIZE)
        if (
            opt is None
            or size is None
            or mapping is None
            or mapping.size_scope != "total"
            or ctx.world == 1
        ):
            return
        if size > LARGEST_GPU_HBM_GB:
            return
        total = total_from_per_rank_gib(size, ctx.world)
        yield self.finding(
            f"`{KV_OFFLOADING_SIZE} {_fmt(size)}` is the total over TP x PP = {ctx.world} "
            "ranks: each gets "
            f"{_fmt(per_rank_gib(size, ctx.world))} GiB. If {_fmt(size)} GiB was meant per "
            f"GPU, use {_fmt(total)}." + conditional_note(opt),
            flag=KV_OFFLOADING_SIZE,
            location=opt.location,
            fix=replacement_fix(
                ctx,
                opt,
                (KV_OFFLOADING_SIZE, _fmt(total)),
                f"{KV_OFFLOADING_SIZE} {_fmt(size)} -> {_fmt(total)} (x TP x PP)",
                safe=False,
            ),
            per_rank_gib=per_rank_gib(size, ctx.world),
            world=ctx.world,
        )


@register
class LmcacheCpuSizeTimesTpExceedsHostRam(ConfigRule):
    """Reports a per-rank host budget that, times the ranks, is more than the host has.

    What
    ----
    A host tier set per worker - in-process LMCache's `max_local_cpu_size`
    (`LMCACHE_MAX_LOCAL_CPU_SIZE` or the `lmcache.max_local_cpu_size` key), an LMCache
    `local_disk` under /dev/shm with `max_local_disk_size`, SimpleCPUOffload's
    `cpu_bytes_to_use_per_rank` - is allocated again by every TP x PP worker; times the
    world size it exceeds the host's RAM (`--host-ram-gib`).

    Why
    ---
    The host runs out of memory: TP=2 x 50 GB used 100 GB RSS (LMCache #2901); TP=8 x 512 GB
    asked for 4 TB and was OOM-killed with no log line.

    Example
    -------
    `LMCACHE_MAX_LOCAL_CPU_SIZE=200` with `-tp 8` on a 1 TiB host (`--host-ram-gib 1024`).

    Fix
    ---
    Set it to the intended total divided by TP x PP.

    Releases
    --------
    Every release. Needs `--host-ram-gib` (or `host-ram-gib` in settings); a container's
    memory limit is SZ012's.
    """

    code = "SZ002"
    name = "lmcache-cpu-size-times-tp-exceeds-host-ram"
    default_severity = Severity.error
    summary = "a per-rank host budget (LMCache CPU size, ...) x TP x PP exceeds host RAM"
    fix_applicability = "display"
    references = (
        lmcache_issue(2901, "LMCACHE_MAX_LOCAL_CPU_SIZE is allocated by every rank"),
        lmcache_source("lmcache/v1/config.py", "LMCache's max_local_cpu_size setting"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        host = ctx.host_ram_gib
        if host is None:
            return
        for tier in over_host_per_rank(ctx, host):
            yield self.finding(
                f"{tier.what} is a budget every rank allocates again: the {ctx.world} ranks "
                f"take {_fmt(tier.gib)} GiB, more than the host's {_fmt(host)} GiB.",
                flag=tier.flag,
                location=tier.location,
                fix=Fix(
                    applicability="display",
                    description=f"at most {_fmt(per_rank_gib(host, ctx.world))} GiB per rank",
                ),
                total_gib=tier.gib,
            )


def over_host_per_rank(ctx: RuleContext, host_gib: float) -> list[HostTier]:
    """The per-rank tiers that alone, times the ranks, exceed ``host_gib``."""
    return [t for t in host_tiers(ctx) if t.per_rank and t.gib > host_gib]


@register
class LmcacheSizeDisagreesWithKvOffloadingSize(ConfigRule):
    """Reports `LMCACHE_MAX_LOCAL_CPU_SIZE` that disagrees with `--kv-offloading-size` (in-process).

    What
    ----
    `--kv-offloading-backend lmcache` on a release that maps it to `LMCacheConnectorV1`
    (0.11.1-0.22.x), where vLLM passes `lmcache.max_local_cpu_size = size / (TP x PP)` per
    rank, and the env var says something else.

    Why
    ---
    `lmcache.*` keys in `kv_connector_extra_config` override LMCache env vars (lmcache 0.5.6),
    so the env var is silently ignored; the field guide's "LMCache env vars win" is wrong.

    Example
    -------
    `-tp 4 --kv-offloading-backend lmcache --kv-offloading-size 400` with
    `LMCACHE_MAX_LOCAL_CPU_SIZE=400` on 0.22.0 (each rank gets 100, not 400).

    Fix
    ---
    Drop the env var, or set it to size / (TP x PP).

    Releases
    --------
    `rules/curated/backend_connector.toml` rows with `replaces_extra_config: true`.
    """

    code = "SZ003"
    name = "lmcache-size-disagrees-with-kv-offloading-size"
    default_severity = Severity.warning
    summary = "LMCACHE_MAX_LOCAL_CPU_SIZE disagrees with the per-rank share of --kv-offloading-size"
    references = (
        vllm_source(
            "0.22.0", "vllm/config/vllm.py",
            "VllmConfig at 0.22.0: lmcache.max_local_cpu_size = size / (TP x PP) per rank",
        ),
        LMCACHE_MP_BACKEND_PR,
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        mapping = ctx.backend_mapping
        per_rank_env = _lmcache_cpu_size(ctx)
        size = ctx.float_option(KV_OFFLOADING_SIZE)
        if mapping is None or not mapping.replaces_extra_config:
            return
        if per_rank_env is None or size is None:
            return
        passed = per_rank_gib(size, ctx.world)
        if abs(passed - per_rank_env) < 1e-9:
            return
        env = ctx.env(LMCACHE_CPU_SIZE)
        yield self.finding(
            f"vLLM {ctx.version} passes `lmcache.max_local_cpu_size={_fmt(passed)}` per rank "
            f"({_fmt(size)} / {ctx.world}), which overrides "
            f"`{LMCACHE_CPU_SIZE}={_fmt(per_rank_env)}`.",
            flag=LMCACHE_CPU_SIZE,
            location=env.location if env else None,
            per_rank_gib=passed,
        )


@register
class OffloadPoolExceedsHostRam(ConfigRule):
    """Reports host KV tiers that together are larger than the host's RAM.

    What
    ----
    Every host tier the engine allocates - native or SimpleCPUOffload
    `--kv-offloading-size` / `cpu_bytes_to_use` (a total over the ranks, in
    `kv_connector_extra_config` or a MultiConnector child's), in-process LMCache's
    `max_local_cpu_size` x TP x PP, the L1 of an LMCache server the MP connector
    auto-starts, kvtool's own connector's capacity - added up, as written, is larger than
    `--host-ram-gib`.

    Why
    ---
    The tiers are pinned or shared host memory; the host or the pod is OOM-killed. vLLM
    #53042 (open at 0.26) also reports 1.92 x N of unreclaimable shared memory for
    `--kv-offloading-size N`.

    Example
    -------
    `--kv-offloading-size 1600` with `--host-ram-gib 1024`.

    Fix
    ---
    Lower the tiers below the host (or pod) memory, leaving room for weights and the
    runtime.

    Releases
    --------
    Every release. Needs `--host-ram-gib`. A per-rank setting that alone exceeds the host
    is SZ002's; the pinned tier's power-of-two rounding is SZ011's.
    """

    code = "SZ004"
    name = "offload-pool-exceeds-host-ram"
    default_severity = Severity.error
    summary = "host KV tiers (--kv-offloading-size, cpu_bytes_to_use, ...) exceed host RAM"
    fix_applicability = "display"
    references = (
        vllm_issue(53042, "--kv-offloading-size N maps about 1.92 x N of shared memory"),
        vllm_source(
            "0.32.0", "vllm/v1/kv_offload/cpu/spec.py",
            "cpu_bytes_to_use: the CPU tier's bytes over all ranks",
        ),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        host = ctx.host_ram_gib
        if host is None or over_host_per_rank(ctx, host):
            return
        tiers = host_tiers(ctx)
        total = sum(t.nominal_gib if t.nominal_gib is not None else t.gib for t in tiers)
        if not tiers or total <= host:
            return
        parts = "; ".join(t.what for t in tiers)
        first = tiers[0]
        yield self.finding(
            f"host KV tiers take {_fmt(total)} GiB ({parts}), more than the host's "
            f"{_fmt(host)} GiB of RAM: the tiers are pinned or shared memory, so the host "
            "or the pod is OOM-killed.",
            flag=first.flag,
            location=first.location,
            total_gib=total,
        )


@register
class LmcacheCpuSizeIgnoredByMpServer(ConfigRule):
    """Reports `LMCACHE_MAX_LOCAL_CPU_SIZE` with `LMCacheMPConnector`, which never reads it.

    What
    ----
    The connector is LMCache's multiprocess (MP) connector (explicitly, or through
    `--kv-offloading-backend lmcache` from 0.23.0) and the env var is set.

    Why
    ---
    The MP server reads no such env var; its capacity is `lmcache server --l1-size-gb`.
    The field guide's "keep them consistent" advice only applies to the in-process path.

    Example
    -------
    `LMCACHE_MAX_LOCAL_CPU_SIZE=100` with `--kv-offloading-backend lmcache` on 0.32.0.

    Fix
    ---
    Remove the env var and size the server with `--l1-size-gb`.

    Releases
    --------
    Every release with LMCacheMPConnector.
    """

    code = "SZ005"
    name = "lmcache-cpu-size-ignored-by-mp-server"
    default_severity = Severity.warning
    summary = "LMCACHE_MAX_LOCAL_CPU_SIZE does nothing with LMCacheMPConnector"
    references = (
        lmcache_source(
            "lmcache/cli/commands/server.py", "the LMCache MP server's --l1-size-gb option"
        ),
        LMCACHE_MP_BACKEND_PR,
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        env = ctx.env(LMCACHE_CPU_SIZE)
        if env is None or not _mp_lmcache(ctx):
            return
        yield self.finding(
            f"`{LMCACHE_CPU_SIZE}` is ignored: `LMCacheMPConnector` stores KV in the LMCache "
            "server, "
            "whose capacity is `--l1-size-gb`.",
            flag=LMCACHE_CPU_SIZE,
            location=env.location,
        )


@register
class CpuOffloadGbIsWeightOffload(ConfigRule):
    """Reports `--cpu-offload-gb`, which offloads model weights, not the KV cache.

    What
    ----
    `--cpu-offload-gb` moves model weights (per GPU) to host memory. It is often suggested
    in answers to "how do I offload only the KV cache".

    Why
    ---
    Weight offload slows every forward pass and does not extend the KV cache; the KV flag is
    `--kv-offloading-size` (a TP-wide total).

    Example
    -------
    `--cpu-offload-gb 64` on a deployment that wanted KV offload.

    Fix
    ---
    If KV offload was meant, use `--kv-offloading-size` with a TP-wide total (display-only: the
    number must be chosen by a human).

    Releases
    --------
    Every release.
    """

    code = "SZ010"
    name = "cpu-offload-gb-is-weight-offload"
    default_severity = Severity.warning
    summary = "--cpu-offload-gb offloads weights, not KV cache"
    fix_applicability = "display"
    references = (
        vllm_issue(23087, "--cpu-offload-gb offloads weights, not the KV cache"),
        vllm_source("0.32.0", "vllm/config/offload.py", "OffloadConfig at 0.32.0 (weights)"),
    )
    since = "0.1.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        opt = ctx.option("--cpu-offload-gb")
        size = ctx.float_option("--cpu-offload-gb")
        if opt is None or size is None or size <= 0:
            return
        yield self.finding(
            f"`--cpu-offload-gb {_fmt(size)}` offloads model weights ({_fmt(size)} GiB per "
            "GPU), not KV cache; "
            f"KV offload is `{KV_OFFLOADING_SIZE}` (total over all ranks).",
            flag="--cpu-offload-gb",
            location=opt.location,
            fix=Fix(
                applicability="display",
                description=f"for KV offload use {KV_OFFLOADING_SIZE} <total GiB>",
            ),
        )
