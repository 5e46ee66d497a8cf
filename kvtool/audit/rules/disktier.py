"""SZ023-SZ024: disk tiers against the volume that holds them: a per-rank size times the
ranks (SZ023), and a tier with no size at all on node-local storage (SZ024)."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity, VolumeMount
from kvtool.audit.references import Reference, lmcache_source, vllm_source
from kvtool.audit.registry import ConfigRule, register
from kvtool.audit.rules._premises import premise
from kvtool.audit.rules.podmem import LMCACHE_IN_PROCESS, lmcache_setting, number_value

GB = 1_000_000_000  # LMCache's max_local_disk_size is in GB (its config's own unit)
DEV_SHM = "/dev/shm"  # a tmpfs: SZ013 weighs tiers there against memory


def _disk_path(raw: object) -> str | None:
    """The directory of an LMCache ``local_disk`` setting (``file:///mnt/kv/`` or a path)."""
    if not isinstance(raw, str) or not raw.strip():
        return None
    path = raw.strip().removeprefix("file://")
    return path if path.startswith("/") else None


def _holding_mount(mounts: Iterable[VolumeMount], path: str) -> VolumeMount | None:
    """The most specific mount whose mount path contains ``path``."""
    inside = [
        m
        for m in mounts
        if path.rstrip("/") == m.mount_path.rstrip("/")
        or path.startswith(m.mount_path.rstrip("/") + "/")
    ]
    return max(inside, key=lambda m: len(m.mount_path), default=None)


@register
class DiskTierExceedsVolume(ConfigRule):
    """Reports a per-rank disk tier that, times the ranks, does not fit its volume.

    What
    ----
    In-process LMCache (`LMCacheConnectorV1`) with a local disk tier (`local_disk` and
    `max_local_disk_size`, as `LMCACHE_*` variables or `lmcache.*` keys) whose directory is
    on a volume with a size limit (an `emptyDir` `sizeLimit`), and every TP x PP worker's
    share together exceeds it.

    Why
    ---
    Each worker runs its own LMCache engine with its own disk backend and fills
    `max_local_disk_size` GB in the shared directory: with TP 8 a 100 GB setting writes
    800 GB. When the volume is full the kubelet evicts the pod (an `emptyDir` over its
    `sizeLimit`), or the node's disk fills for every pod on it.

    Example
    -------
    `LMCACHE_LOCAL_DISK=file:///mnt/kv/` and `LMCACHE_MAX_LOCAL_DISK_SIZE=100` with `-tp 8`
    in a Deployment whose `/mnt/kv` is an `emptyDir` with `sizeLimit: 500Gi`.

    Fix
    ---
    Set `max_local_disk_size` to the volume's size divided by TP x PP (minus headroom), or
    give the volume room for every rank.

    Releases
    --------
    LMCache releases with the local disk backend; `max_local_disk_size` is per engine (per
    worker) in GB (`lmcache/v1/config.py`).
    """

    code = "SZ023"
    name = "disk-tier-exceeds-volume"
    default_severity = Severity.error
    summary = "a per-rank disk tier times TP x PP exceeds the volume that holds it"
    references = (
        lmcache_source(
            "lmcache/v1/config.py", "max_local_disk_size: GB per LMCache engine", "0.5.5"
        ),
        lmcache_source(
            "lmcache/v1/storage_backend/local_disk_backend.py",
            "each engine's local disk backend writes its own chunk files",
            "0.5.5",
        ),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        resources = ctx.config.invocation.resources
        if resources is None or LMCACHE_IN_PROCESS not in ctx.connector_names:
            return
        disk = lmcache_setting(ctx, "local_disk")
        size = lmcache_setting(ctx, "max_local_disk_size")
        path = _disk_path(disk[0]) if disk is not None else None
        per_rank = number_value(size[0]) if size is not None else None
        if size is None or path is None or not per_rank or path.startswith(DEV_SHM):
            return
        mount = _holding_mount(resources.mounts, path)
        if mount is None or mount.size_limit is None:
            return
        total = per_rank * GB * ctx.world
        if total <= mount.size_limit.bytes:
            return
        yield self.finding(
            f"`{size[1]}={per_rank:g}` is per worker: {ctx.world} workers (TP x PP) write "
            f"{per_rank * ctx.world:g} GB under {path}, but the volume `{mount.volume}` "
            f"holds {mount.size_limit.text}; the pod is evicted when it fills.",
            flag=size[1],
            location=size[2],
            total_bytes=int(total),
            limit_bytes=mount.size_limit.bytes,
        )


FS_PREMISE = "offload_fs.no_capacity"
NATIVE = "OffloadingConnector"


def _fs_roots(ctx: RuleContext) -> list[str]:
    """The ``root_dir`` of every native ``fs`` secondary tier this engine configures."""
    roots: list[str] = []
    for name, extra in ctx.connector_extra_configs:
        tiers = extra.get("secondary_tiers") if name == NATIVE else None
        for tier in tiers if isinstance(tiers, list) else ():
            if not isinstance(tier, dict) or tier.get("type") != "fs":
                continue
            root = tier.get("root_dir")
            if isinstance(root, str) and root.startswith("/"):
                roots.append(root)
    return roots


def _what_fills(mount: VolumeMount | None) -> str | None:
    """What an ever-growing directory on ``mount`` exhausts, or None when it is not the
    node's to give (a claimed volume: writes fail there and the engine keeps serving)."""
    if mount is None:
        return (
            "the container's writable layer, on the node's disk: the node goes under disk "
            "pressure and the kubelet evicts its pods"
        )
    if mount.source == "emptyDir" and mount.medium == "Memory":
        return f"the memory-backed emptyDir `{mount.volume}`, counted against the pod's memory"
    if mount.source == "emptyDir" and mount.size_limit is not None:
        return (
            f"the emptyDir `{mount.volume}` (sizeLimit {mount.size_limit.text}): the kubelet "
            "evicts the pod when it is full"
        )
    if mount.source in ("emptyDir", "hostPath"):
        return (
            f"the {mount.source} `{mount.volume}` on the node's disk: the node goes under disk "
            "pressure and the kubelet evicts its pods"
        )
    return None


@register
class FsTierUnbounded(ConfigRule):
    """Reports a native `fs` offload tier on node-local storage it will fill.

    What
    ----
    OffloadingConnector's `secondary_tiers` holds an `fs` tier whose `root_dir` is on an
    `emptyDir` (with or without `sizeLimit`, disk or memory), a `hostPath`, or no volume
    at all (the container's writable layer), in a pod kvtool reads.

    Why
    ---
    The `fs` tier has no capacity setting and never deletes a block it stored (only one
    it cannot read back): every rank writes every block it offloads under
    `<root_dir>_r<rank>`, so the directory grows with the traffic until its volume is
    full. On node-local storage that ends with an eviction (an emptyDir over its
    `sizeLimit`, or node disk pressure for every pod on the node). How soon depends on
    the traffic: a warning.

    Example
    -------
    A Deployment running `vllm serve m --kv-transfer-config
    '{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_connector_extra_config":{"spec_name":"TieringOffloadingSpec","cpu_bytes_to_use":8589934592,"secondary_tiers":[{"type":"fs","root_dir":"/mnt/kv"}]}}'`
    with `/mnt/kv` on an `emptyDir` with `sizeLimit: 100Gi`.

    Fix
    ---
    Put `root_dir` on a volume sized and cleaned for it (a PersistentVolumeClaim with a
    cleanup job), or use a tier with its own capacity (LMCache `max_local_disk_size`).

    Releases
    --------
    The premise `offload_fs.no_capacity` (0.22.0 on, proven from the wheels:
    `rules/audit/premises.json`; the marker is the tier's constructor, which takes no
    capacity).
    """

    code = "SZ024"
    name = "fs-tier-unbounded"
    default_severity = Severity.warning
    summary = "a native fs offload tier on node-local storage grows until it fills it"
    references = (
        vllm_source(
            "0.32.0", "vllm/v1/kv_offload/tiering/fs/manager.py",
            "FileSystemTierManager: root_dir and thread counts, no capacity",
        ),
        Reference(
            "https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/",
            "Kubernetes: node disk pressure evicts pods; an emptyDir over sizeLimit is evicted",
        ),
    )
    since = "0.3.0"

    def check(self, ctx: RuleContext) -> Iterable[Finding]:
        resources = ctx.config.invocation.resources
        if resources is None:
            return
        roots = _fs_roots(ctx)
        if not roots:
            return
        verdict = premise(FS_PREMISE, ctx.version)
        if not verdict.holds:
            return
        for root in roots:
            fills = _what_fills(_holding_mount(resources.mounts, root))
            if fills is None:
                continue
            yield self.finding(
                f"the fs offload tier at `{root}` keeps every block each of the {ctx.world} "
                f"ranks offloads and deletes none: it grows until it fills {fills}."
                + verdict.note,
                flag="kv_connector_extra_config.secondary_tiers.root_dir",
                location=ctx.connector_location,
                root_dir=root,
            )
