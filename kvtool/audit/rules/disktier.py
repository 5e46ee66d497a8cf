"""SZ023: a per-rank disk tier times the ranks against the volume that holds it."""

from __future__ import annotations

from collections.abc import Iterable

from kvtool.audit.context import RuleContext
from kvtool.audit.model import Finding, Severity, VolumeMount
from kvtool.audit.references import lmcache_source
from kvtool.audit.registry import ConfigRule, register
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
