"""SZ012-SZ015: the host tier against the pod it runs in (memory limit, /dev/shm, and the
memory request of a pod without a limit).

A container has a memory limit (the cgroup OOM-kills past it) and a ``/dev/shm`` that is
64 MiB unless a ``medium: Memory`` emptyDir, ``shm_size`` or host IPC gives it more. The
CPU tiers vLLM and LMCache allocate live in that memory, some of them in ``/dev/shm``.
These rules read what the Kubernetes, Compose and ``docker run`` readers captured
(``Invocation.resources``); they are quiet for inputs that describe no container.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kvtool.audit.context import KV_OFFLOADING_SIZE, KV_TRANSFER_CONFIG, RuleContext
from kvtool.audit.model import ContainerResources, Finding, Fix, Location, Severity
from kvtool.audit.references import Reference, lmcache_source, vllm_issue, vllm_pr, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._mp_server import SERVER_ARGS, autostarted, server_option
from kvtool.audit.rules._premises import premise
from kvtool.audit.rules.hostmem import GIB, NATIVE, PINNED

DEV_SHM = "/dev/shm"
# containerd's CRI and Docker give a container a 64 MiB /dev/shm unless told otherwise.
RUNTIME_DEFAULT_SHM_BYTES = 64 << 20
# Resident memory of one vLLM worker process beyond its share of the tier: PR #48436 measured
# per-worker RSS of "~35GB (32GB + 3)" and "~43GB ... 40GB + 3" at TP 2, so 3 GiB a worker.
# A floor, not an estimate: vllm#53042 saw 35 GiB of anonymous memory for 4 GB200 workers.
WORKER_OVERHEAD_GIB = 3.0
# vLLM 0.32's shared-memory ring buffers for TP x PP > 1 (tests/audit/test_vllm_shm_facts.py
# reads the defaults from the installed vLLM): the scheduler's broadcast queue,
# VLLM_MQ_MAX_CHUNK_BYTES_MB (16) x 10 chunks, and each worker's response queue,
# MessageQueue's default 24 MiB x 10 chunks. /dev/shm is checked before each is created.
BROADCAST_QUEUE_MIB = 160
WORKER_QUEUE_MIB = 240
SMALLEST_DEV_SHM_MIB = max(BROADCAST_QUEUE_MIB, WORKER_QUEUE_MIB)
SHM_REGION = "kv_offloading.shm_region"
SHM_CHECKED = "shm.free_space_checked"
RING_BUFFER_CHECKED = "shm.ring_buffer_free_space_checked"
LMCACHE_IN_PROCESS = "LMCacheConnectorV1"
SIMPLE = "SimpleCPUOffloadConnector"
TOTAL_BYTES = "cpu_bytes_to_use"
PER_RANK_BYTES = "cpu_bytes_to_use_per_rank"  # SimpleCPUOffload's per-rank override
_FALSE = frozenset({"false", "0", "no", "off"})
L1_SIZE_OPTION = "--l1-size-gb"  # the LMCache server's L1 capacity (GiB)
KVTOOL_CONNECTOR = "KvtoolConnector"
CAPACITY_KEY = "kvtool.host_capacity_bytes"

CONTAINERD_DEFAULT_SHM = Reference(
    "https://github.com/containerd/containerd/blob/v1.6.0/pkg/cri/server/helpers_linux.go",
    "containerd's CRI: defaultShmSize, the sandbox /dev/shm, is 64 MiB",
)
K8S_EMPTYDIR = Reference(
    "https://kubernetes.io/docs/concepts/storage/volumes/#emptydir",
    "Kubernetes emptyDir: medium Memory is a tmpfs counted against the container's memory "
    "limit; sizeLimit caps it",
)
VLLM_DOCKER_SHM = vllm_source(
    "0.32.0", "docs/getting_started/installation/gpu.cuda.inc.md",
    "vLLM's Docker guide: use --ipc=host or --shm-size; PyTorch shares memory between "
    "processes, particularly for tensor parallel inference",
)
VLLM_K8S_GUIDE = vllm_source(
    "0.32.0", "docs/deployment/k8s.md",
    "vLLM's Kubernetes guide: an emptyDir with medium Memory mounted at /dev/shm for tensor "
    "parallel inference",
)
SHM_BROADCAST_032 = vllm_source(
    "0.32.0", "vllm/distributed/device_communicators/shm_broadcast.py",
    "check_shm_free_space at 0.32.0: 'Insufficient space in /dev/shm' before each ring buffer",
)
SHARED_REGION_032 = vllm_source(
    "0.32.0", "vllm/v1/kv_offload/cpu/shared_offload_region.py",
    "SharedOffloadRegion at 0.32.0: the CPU tier is /dev/shm/vllm_offload_{engine_id}.mmap",
)
LMCACHE_CONFIG = lmcache_source(
    "lmcache/v1/config.py", "LMCache config: max_local_cpu_size, local_disk, max_local_disk_size"
)


@dataclass(frozen=True)
class HostTier:
    """One host-memory tier the engine's container allocates, summed over its ranks."""

    what: str  # how the config sets it, e.g. "--kv-offloading-size 100"
    flag: str
    gib: float  # what the host really maps (rounding included)
    location: Location | None
    in_dev_shm: bool
    native: bool = False  # the OffloadingConnector tier (vLLM checks /dev/shm before mapping)
    rounding: str = ""  # how ``gib`` exceeds the nominal size, when it does
    nominal_gib: float | None = None  # the size as written, where rounding makes ``gib`` more
    # Set per rank (a budget every TP x PP worker allocates again), not for the engine.
    per_rank: bool = False


def number_value(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 and math.isfinite(number) else None


def _vllm_cpu_setting(ctx: RuleContext) -> tuple[str, float, str, str, Location | None] | None:
    """vLLM's own CPU tier: (connector, TP x PP-wide GiB, how it was written, flag, where).

    From ``--kv-offloading-size`` where it becomes the native or SimpleCPUOffload
    connector, else from the extra config: ``cpu_bytes_to_use`` (a total) or
    SimpleCPUOffload's ``cpu_bytes_to_use_per_rank`` (which wins over it).
    """
    mapping = ctx.backend_mapping
    size = ctx.float_option(KV_OFFLOADING_SIZE)
    if mapping is not None and mapping.size_scope == "total" and mapping.size_passed_on and size:
        if mapping.connector not in (NATIVE, SIMPLE):
            return None  # in-process LMCache: _lmcache_tiers
        what = f"{KV_OFFLOADING_SIZE} {size:g}"
        location = ctx.location_of(KV_OFFLOADING_SIZE)
        return mapping.connector, size, what, KV_OFFLOADING_SIZE, location
    location = ctx.location_of(KV_TRANSFER_CONFIG)
    for name, extra in ctx.connector_extra_configs:
        per_rank = number_value(extra.get(PER_RANK_BYTES)) if name == SIMPLE else None
        if per_rank is not None:
            what = f"{PER_RANK_BYTES} {per_rank:g} x {ctx.world}"
            return name, per_rank * ctx.world / GIB, what, PER_RANK_BYTES, location
        total = number_value(extra.get(TOTAL_BYTES)) if name in (NATIVE, SIMPLE) else None
        if total is not None:
            return name, total / GIB, f"{TOTAL_BYTES} {total:g}", TOTAL_BYTES, location
    return None


def _vllm_cpu_tier(ctx: RuleContext) -> HostTier | None:
    """vLLM's CPU tier, rounded as SZ011 rounds the native one on releases that pin
    per-rank tensors, and in /dev/shm on releases that map one shared region."""
    setting = _vllm_cpu_setting(ctx)
    if setting is None:
        return None
    connector, total, what, flag, location = setting
    native = connector == NATIVE
    resident, rounding = total, ""
    per_rank_setting = flag == PER_RANK_BYTES
    if native and premise(PINNED, ctx.version).holds:
        per_rank = total / ctx.world
        rounded = 2.0 ** math.ceil(math.log2(per_rank))
        if rounded > per_rank:
            resident = rounded * ctx.world
            rounding = f"pinned as {rounded:g} GiB per rank (next power of two, SZ011)"
    return HostTier(
        what=what,
        flag=flag,
        gib=resident,
        location=location,
        in_dev_shm=native and premise(SHM_REGION, ctx.version).holds,
        native=native,
        rounding=rounding,
        nominal_gib=total if rounding else None,
        per_rank=per_rank_setting,
    )


def lmcache_setting(ctx: RuleContext, key: str) -> tuple[Any, str, Location | None] | None:
    """An in-process LMCache setting: the ``lmcache.<key>`` extra-config key (which wins)
    or the ``LMCACHE_<KEY>`` env var, with how it was written and where."""
    for name, extra in ctx.connector_extra_configs:
        if name == LMCACHE_IN_PROCESS and f"lmcache.{key}" in extra:
            return extra[f"lmcache.{key}"], f"lmcache.{key}", ctx.location_of(KV_TRANSFER_CONFIG)
    env_name = f"LMCACHE_{key.upper()}"
    env = ctx.env(env_name)
    if env is not None and env.value is not None:
        return env.value, env_name, env.location
    return None


def _lmcache_tiers(ctx: RuleContext) -> list[HostTier]:
    """In-process LMCache: every TP x PP worker allocates ``max_local_cpu_size`` and, when
    ``local_disk`` is under /dev/shm, fills ``max_local_disk_size`` of tmpfs."""
    if LMCACHE_IN_PROCESS not in ctx.connector_names:
        return []
    tiers: list[HostTier] = []
    mapping = ctx.backend_mapping
    size = ctx.float_option(KV_OFFLOADING_SIZE)
    if mapping is not None and mapping.replaces_extra_config and size:
        # vLLM passes lmcache.max_local_cpu_size = size / (TP x PP) per rank (SZ003).
        tiers.append(
            HostTier(
                f"{KV_OFFLOADING_SIZE} {size:g}", KV_OFFLOADING_SIZE, size,
                ctx.location_of(KV_OFFLOADING_SIZE), in_dev_shm=False,
            )
        )
    else:
        cpu = lmcache_setting(ctx, "max_local_cpu_size")
        per_rank = number_value(cpu[0]) if cpu is not None else None
        local_cpu = lmcache_setting(ctx, "local_cpu")
        # local_cpu off: no CPU backend; not counted rather than guessed.
        cpu_off = local_cpu is not None and str(local_cpu[0]).strip().lower() in _FALSE
        if cpu is not None and per_rank is not None and not cpu_off:
            tiers.append(
                HostTier(
                    f"{cpu[1]}={per_rank:g} per rank x {ctx.world}", cpu[1],
                    per_rank * ctx.world, cpu[2], in_dev_shm=False, per_rank=True,
                )
            )
    disk = lmcache_setting(ctx, "local_disk")
    disk_size = lmcache_setting(ctx, "max_local_disk_size")
    disk_per_rank = number_value(disk_size[0]) if disk_size is not None else None
    if (
        disk is not None
        and disk_size is not None
        and disk_per_rank is not None
        and DEV_SHM in str(disk[0])
    ):
        tiers.append(
            HostTier(
                f"{disk[1]}={disk[0]} with {disk_size[1]}={disk_per_rank:g} per rank x "
                f"{ctx.world}",
                disk_size[1], disk_per_rank * ctx.world, disk_size[2], in_dev_shm=True,
                per_rank=True,
            )
        )
    return tiers


def _mp_server_tier(ctx: RuleContext) -> HostTier | None:
    """The L1 of an LMCache server the MP connector auto-starts in this container."""
    if not autostarted(ctx):
        return None
    size = number_value(server_option(ctx, L1_SIZE_OPTION))
    if size is None:
        return None
    return HostTier(
        f"{SERVER_ARGS} {L1_SIZE_OPTION} {size:g} (the auto-started server's L1)",
        SERVER_ARGS, size, ctx.connector_location, in_dev_shm=False,
    )


def _kvtool_tier(ctx: RuleContext) -> HostTier | None:
    """kvtool's reference connector: ``kvtool.host_capacity_bytes`` (its default when not
    given) over all of the engine's ranks, in one anonymous memfd per host, never in
    /dev/shm (kvtool/connector/host_arena.py); shmem pages count against the cgroup."""
    for name, extra in ctx.connector_extra_configs:
        if name != KVTOOL_CONNECTOR:
            continue
        # Only for kvtool's own connector: its config parser (and pydantic) stays out of
        # every other audit's start-up.
        from kvtool.connector.config import ConnectorConfig, ConnectorConfigError

        try:
            config = ConnectorConfig.from_extra_config(extra)
        except ConnectorConfigError:
            return None  # LZ009 reports it; the engine would not start
        given = CAPACITY_KEY in extra
        what = (f"{CAPACITY_KEY}={extra[CAPACITY_KEY]}" if given
                else f"{CAPACITY_KEY} (default {config.host_capacity_bytes / GIB:g} GiB)")
        return HostTier(f"{what}, all ranks", CAPACITY_KEY, config.host_capacity_bytes / GIB,
                        ctx.location_of(KV_TRANSFER_CONFIG), in_dev_shm=False)
    return None


def host_tiers(ctx: RuleContext) -> list[HostTier]:
    """Every host tier this engine's container allocates."""
    native = _vllm_cpu_tier(ctx)
    server = _mp_server_tier(ctx)
    kvtool = _kvtool_tier(ctx)
    return (
        ([native] if native is not None else [])
        + _lmcache_tiers(ctx)
        + ([server] if server is not None else [])
        + ([kvtool] if kvtool is not None else [])
    )


def _resources(ctx: RuleContext) -> ContainerResources | None:
    return ctx.config.invocation.resources


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _size(size_bytes: int) -> str:
    """``64 MiB`` below one GiB, else ``32 GiB``."""
    if size_bytes < GIB:
        return f"{_fmt(size_bytes / (1 << 20))} MiB"
    return f"{_fmt(size_bytes / GIB)} GiB"


@register
class HostTierExceedsMemoryLimit(ConfigRule):
    """Reports host KV tiers that do not fit the container's memory limit.

    What
    ----
    The CPU tiers the engine allocates in its own container - native or SimpleCPUOffload
    `--kv-offloading-size` / `cpu_bytes_to_use` / `cpu_bytes_to_use_per_rank` (with the
    native tier's per-rank power-of-two rounding before 0.27.0, SZ011), in-process
    LMCache's `max_local_cpu_size` times TP x PP, an LMCache `local_disk` under /dev/shm,
    the `--l1-size-gb` of an LMCache server the MP connector auto-starts in the
    container, and kvtool's own connector's `kvtool.host_capacity_bytes` (its default
    unless set; an anonymous memfd per host, so memory but never /dev/shm) - added up,
    against the container's memory limit (a pod's `resources.limits.memory`, a Compose
    service's `mem_limit` or `deploy.resources.limits.memory`, `docker run -m`).

    Why
    ---
    Pinned and shared-memory pages cannot be reclaimed: past the limit the cgroup
    OOM-kills the engine (vllm#53042: "turns a nominally-fitting configuration into an
    OOMKill"). The tier alone over the limit is an error. The tier plus 3 GiB per worker
    process is a warning: vLLM PR #48436 measured each TP worker's RSS at its tier share
    "+ 3" GB after loading (CUDA context, PyTorch, what stays of weight loading). It is a
    floor: vllm#53042's 4 GB200 workers held 35 GiB of anonymous memory, and the API
    server and page cache of the weights come on top (page cache is reclaimed before an
    OOM kill, so it is not counted).

    Example
    -------
    `--kv-offloading-size 120 -tp 2` in a container limited to `memory: 120Gi`
    (120 + 2 x 3 = 126 GiB).

    Fix
    ---
    Raise the memory limit or lower the tier, leaving at least 3 GiB per worker plus
    room for loading weights.

    Releases
    --------
    Every release; the rounding follows `kv_offloading.pinned_power_of_two`.
    """

    code = "SZ012"
    name = "host-tier-exceeds-memory-limit"
    default_severity = Severity.error
    summary = "host KV tiers (plus worker overhead) exceed the container's memory limit"
    fix_applicability = "display"
    references = (
        vllm_issue(53042, "shared-memory tier pages are unreclaimable: the cgroup OOM-kills"),
        vllm_pr(48436, "per-worker RSS is the tier share + about 3 GB"),
        K8S_EMPTYDIR,
        LMCACHE_CONFIG,
    )
    since = "0.2.0"
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        resources = _resources(ctx)
        if resources is None or resources.memory_limit is None:
            return
        tiers = host_tiers(ctx)
        if not tiers:
            return
        limit = resources.memory_limit
        limit_gib = limit.bytes / GIB
        tier_gib = sum(t.gib for t in tiers)
        overhead = WORKER_OVERHEAD_GIB * ctx.world
        if tier_gib + overhead <= limit_gib:
            return
        parts = "; ".join(t.what + (f" ({t.rounding})" if t.rounding else "") for t in tiers)
        alone = tier_gib > limit_gib
        tail = (
            "the tier alone does not fit: the cgroup OOM-kills the engine."
            if alone
            else f"with the {WORKER_OVERHEAD_GIB:g} GiB each worker process holds beyond its "
            f"share (vLLM PR #48436's measured RSS) x {ctx.world} workers, "
            f"{_fmt(tier_gib + overhead)} GiB, it does not fit."
        )
        first = tiers[0]
        yield self.finding(
            f"host KV tiers take {_fmt(tier_gib)} GiB ({parts}) in a container limited to "
            f"{limit.text} ({_fmt(limit_gib)} GiB); {tail}",
            flag=first.flag,
            location=first.location or limit.location,
            fix=Fix(
                applicability="display",
                description=f"a memory limit of at least {math.ceil(tier_gib + overhead)} GiB, "
                "or a smaller tier",
            ),
            severity=Severity.error if alone else Severity.warning,
            tier_gib=tier_gib,
            limit_gib=limit_gib,
            overhead_gib=overhead,
        )


K8S_NODE_PRESSURE = Reference(
    "https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/",
    "Kubernetes: under memory pressure the kubelet evicts pods whose usage exceeds their "
    "requests first",
)


@register
class HostTierExceedsMemoryRequest(ConfigRule):
    """Reports host KV tiers larger than the memory a pod without a limit requests.

    What
    ----
    The container sets `resources.requests.memory` but no memory limit, and the host
    tiers SZ012 adds up (plus 3 GiB per worker process) are larger than the request.

    Why
    ---
    The scheduler places the pod where the request fits, not the tiers: on a node packed
    by requests the pinned or shared tier pages push the node into memory pressure, and
    the kubelet evicts first the pods whose usage exceeds their requests - this one (or
    the node's OOM killer picks it). A warning: a node with room to spare runs it.

    Example
    -------
    `--kv-offloading-size 200` in a Deployment whose container requests `memory: 64Gi`
    and sets no limit.

    Fix
    ---
    Request the memory the tiers take (and set the limit to it), or lower the tiers.

    Releases
    --------
    Every release; the tiers as SZ012 counts them.
    """

    code = "SZ015"
    name = "host-tier-exceeds-memory-request"
    default_severity = Severity.warning
    summary = "host KV tiers exceed the memory request of a pod without a memory limit"
    fix_applicability = "display"
    references = (
        K8S_NODE_PRESSURE,
        vllm_pr(48436, "per-worker RSS is the tier share + about 3 GB"),
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        resources = _resources(ctx)
        if resources is None or resources.memory_limit is not None:
            return
        request = resources.memory_request
        tiers = host_tiers(ctx) if request is not None else []
        if request is None or not tiers:
            return
        need = sum(t.gib for t in tiers) + WORKER_OVERHEAD_GIB * ctx.world
        if need * GIB <= request.bytes:
            return
        parts = "; ".join(t.what for t in tiers)
        yield self.finding(
            f"host KV tiers and {ctx.world} worker processes take about {_fmt(need)} GiB "
            f"({parts}), but the pod requests {request.text} and sets no memory limit: the "
            "scheduler places it by the request, and under node memory pressure the kubelet "
            "evicts pods using more than they request first.",
            flag=tiers[0].flag,
            location=tiers[0].location or request.location,
            fix=Fix(
                applicability="display",
                description=f"request (and limit) at least {math.ceil(need)} GiB",
            ),
            need_gib=need,
            request_bytes=request.bytes,
        )


def _shm_fix(ctx: RuleContext) -> str:
    """How this input kind gives the container a larger /dev/shm."""
    kind = ctx.config.invocation.kind
    if kind == "compose":
        return "set the service's `shm_size` or `ipc: host`"
    if kind in ("kubernetes", "kaito", "helm-values"):
        return "mount an emptyDir with `medium: Memory` at /dev/shm or set `hostIPC: true`"
    return "pass `--shm-size` or `--ipc=host` to `docker run`"


def dev_shm_capacity(resources: ContainerResources) -> tuple[int | None, str]:
    """Bytes /dev/shm can hold in this container (None: bounded only by memory or the
    host), and how that was decided."""
    if resources.host_ipc is not None:
        return None, "the host's /dev/shm (host IPC)"
    mount = resources.mount_at(DEV_SHM)
    if mount is None and resources.shm_size is not None:
        return resources.shm_size.bytes, f"a /dev/shm of {resources.shm_size.text}"
    if mount is None:
        return RUNTIME_DEFAULT_SHM_BYTES, "nothing sizes /dev/shm: the runtime's 64 MiB"
    if mount.source == "emptyDir" and mount.medium == "Memory":
        if mount.size_limit is None:
            return None, f"emptyDir {mount.volume} (medium: Memory, no sizeLimit)"
        return mount.size_limit.bytes, (
            f"emptyDir {mount.volume} (medium: Memory, sizeLimit: {mount.size_limit.text})"
        )
    return None, f"volume {mount.volume} ({mount.source or 'not in the pod spec'})"


@register
class TierExceedsDevShm(ConfigRule):
    """Reports a host tier that lives in /dev/shm when the container's /dev/shm cannot hold it.

    What
    ----
    A tier in /dev/shm - the native CPU tier from 0.27.0 (one shared mapping
    `/dev/shm/vllm_offload_{engine_id}.mmap` of the whole `--kv-offloading-size`), or an
    in-process LMCache `local_disk` path under /dev/shm (`max_local_disk_size` per rank) -
    is larger than the container's /dev/shm: 64 MiB when nothing sizes it (containerd's
    and Docker's default), the `sizeLimit` of a `medium: Memory` emptyDir at /dev/shm, or
    a Compose `shm_size` / `docker run --shm-size`.

    Why
    ---
    From 0.28.0 vLLM checks the free space first and refuses to start ("Insufficient
    space in /dev/shm for CPU KV offload shared region"); without the check, or for LMCache's
    files, writes past the tmpfs size fail with SIGBUS/ENOSPC, and a full Memory emptyDir
    gets the pod evicted.

    Example
    -------
    `--kv-offloading-size 64` on 0.32.0 in a Deployment with no /dev/shm volume.

    Fix
    ---
    Mount an emptyDir with `medium: Memory` at /dev/shm whose `sizeLimit` holds the tier
    (and count it in the memory limit), or set `hostIPC: true`; in Compose or `docker run`,
    a `shm_size` / `--shm-size` that holds it, or host IPC.

    Releases
    --------
    Native tier: `kv_offloading.shm_region` in `rules/curated/semantics.toml` (0.27.0+) and
    `shm.free_space_checked` (the tier's own check, 0.28.0+), premises proven from the
    wheels (`rules/audit/premises.json`).
    """

    code = "SZ013"
    name = "tier-exceeds-dev-shm"
    default_severity = Severity.error
    summary = "a host tier in /dev/shm is larger than the container's /dev/shm"
    fix_applicability = "display"
    references = (
        SHARED_REGION_032,
        SHM_BROADCAST_032,
        CONTAINERD_DEFAULT_SHM,
        K8S_EMPTYDIR,
        LMCACHE_CONFIG,
    )
    since = "0.2.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        resources = _resources(ctx)
        if resources is None:
            return
        capacity, how = dev_shm_capacity(resources)
        if capacity is None:
            return
        for tier in host_tiers(ctx):
            if not tier.in_dev_shm or tier.gib * GIB <= capacity:
                continue
            yield self.finding(
                f"{tier.what} puts {_fmt(tier.gib)} GiB in /dev/shm, which holds "
                f"{_size(capacity)} in this container ({how}): the engine "
                + (
                    "refuses to start (\"Insufficient space in /dev/shm\")"
                    if tier.native and premise(SHM_CHECKED, ctx.version).holds
                    else "fails once the tier fills past it (SIGBUS or ENOSPC)"
                )
                + f"; give /dev/shm room for it: {_shm_fix(ctx)}.",
                flag=tier.flag,
                location=tier.location,
                fix=Fix(
                    applicability="display",
                    description=f"/dev/shm of at least {math.ceil(tier.gib)} GiB: "
                    + _shm_fix(ctx),
                ),
                tier_gib=tier.gib,
                dev_shm_bytes=capacity,
            )


@register
class DefaultDevShmWithTensorParallel(ConfigRule):
    """Reports TP x PP > 1 in a container whose /dev/shm is the runtime's 64 MiB.

    What
    ----
    The engine runs more than one worker process (`-tp`/`-pp` > 1) and nothing sizes its
    /dev/shm: a pod mounts no volume there and does not set `hostIPC: true`; a Compose
    service sets neither `shm_size` nor `ipc: host`; `docker run` passes neither
    `--shm-size` nor `--ipc=host`. Or, where vLLM checks the space, /dev/shm is sized
    below its largest ring buffer (240 MiB at 0.32).

    Why
    ---
    vLLM's workers exchange scheduler output through shared-memory ring buffers and NCCL
    uses /dev/shm too; vLLM's docs ask for `--ipc=host` or a larger `--shm-size`
    "particularly for tensor parallel inference". From 0.27.0 vLLM checks the space before each
    ring buffer (the scheduler's broadcast queue is 16 MiB x 10 chunks = 160 MiB, each
    worker's response queue 24 MiB x 10 = 240 MiB) and refuses to start with
    "Insufficient space in /dev/shm": an error there. Releases
    without that check (PR #48879) start, then can die with SIGBUS once the buffers fill
    under load: a warning.

    Example
    -------
    A Deployment running `vllm serve m -tp 2` with no /dev/shm volume.

    Fix
    ---
    Mount an emptyDir with `medium: Memory` at /dev/shm (vLLM's Kubernetes guide uses one),
    sized for the ring buffers and NCCL, or set `hostIPC: true`; in Compose, `shm_size`
    or `ipc: host`; with `docker run`, `--shm-size` or `--ipc=host`.

    Releases
    --------
    The premise `shm.ring_buffer_free_space_checked` (0.27.0 on, proven from the wheels:
    `rules/audit/premises.json`) decides error or warning.
    """

    code = "SZ014"
    name = "default-dev-shm-with-tensor-parallel"
    default_severity = Severity.error
    summary = "TP x PP > 1 with /dev/shm at the 64 MiB default or below vLLM's ring buffers"
    fix_applicability = "display"
    references = (
        VLLM_DOCKER_SHM,
        VLLM_K8S_GUIDE,
        SHM_BROADCAST_032,
        vllm_pr(48879, "fail fast when /dev/shm is too small for the shm ring buffer"),
        CONTAINERD_DEFAULT_SHM,
    )
    since = "0.2.0"
    other_severities = (Severity.warning,)

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        resources = _resources(ctx)
        if resources is None or ctx.world == 1:
            return
        capacity, how = dev_shm_capacity(resources)
        if capacity is None:
            return
        refuses = premise(RING_BUFFER_CHECKED, ctx.version).holds
        unsized = resources.mount_at(DEV_SHM) is None and resources.shm_size is None
        # A size written on purpose is only wrong where vLLM's check says so: not above the
        # largest single ring buffer it creates (each is checked on its own, and each is a
        # few bytes of metadata per chunk larger than its chunks).
        if not unsized and not (refuses and capacity <= SMALLEST_DEV_SHM_MIB << 20):
            return
        outcome = (
            f"vLLM {ctx.version} refuses to start (\"Insufficient space in /dev/shm\": the "
            f"scheduler's broadcast queue is {BROADCAST_QUEUE_MIB} MiB and each worker's "
            f"response queue {WORKER_QUEUE_MIB} MiB, each checked as it is created)."
            if refuses
            else "workers can die with SIGBUS once the shared-memory queues fill under load."
        )
        tp = ctx.option("--tensor-parallel-size") or ctx.option("--pipeline-parallel-size")
        yield self.finding(
            f"TP x PP = {ctx.world} worker processes share memory through /dev/shm, and in "
            f"this container {how}; {outcome} To fix, {_shm_fix(ctx)}.",
            flag=tp.flag if tp is not None else None,
            location=tp.location if tp is not None else None,
            fix=Fix(applicability="display", description=_shm_fix(ctx)),
            severity=Severity.error if refuses else Severity.warning,
        )
