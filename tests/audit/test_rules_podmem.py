"""The host tier against the pod: memory limit (SZ012), /dev/shm (SZ013, SZ014), the
memory request of a pod without a limit (SZ015).

Facts: vLLM 0.32 maps the native CPU tier as /dev/shm/vllm_offload_{engine_id}.mmap and
checks /dev/shm's free space first
(https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/v1/kv_offload/cpu/shared_offload_region.py),
as it does before each shared-memory ring buffer of the TP message queues
(https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/distributed/device_communicators/shm_broadcast.py);
a pod's /dev/shm is containerd's 64 MiB without a volume there; vLLM PR #48436 measured
per-worker RSS as the tier share + ~3 GB.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec

from kvtool.audit.engine import Auditor
from kvtool.audit.inputs import read_text
from kvtool.audit.inputs.quantity import parse_bytes, parse_docker_bytes
from kvtool.audit.model import (
    ContainerResources,
    InputKind,
    Location,
    Quantity,
    ServeConfig,
    ServeOption,
    VolumeMount,
)
from kvtool.audit.normalize import normalize
from kvtool.audit.rules._premises import premise_records
from kvtool.audit.settings import AuditSettings
from kvtool.connector.config import ConnectorConfig
from kvtool.releases import release_index
from tests.audit.rulekit import FILE, codes, config, ktc, only, opt, run
from tests.audit.test_engine import FixedTables
from tests.conftest import CliResult

TP2 = opt("--tensor-parallel-size", "2")
POD_RULES = ("SZ012", "SZ013", "SZ014")
Cli = Callable[..., CliResult]
SHM_MOUNT = Location(file=FILE, line=9)


def _quantity(text: str) -> Quantity:
    value = parse_bytes(text)
    assert value is not None
    return Quantity(text=text, bytes=value, location=Location(file=FILE, line=7))


def _docker_size(text: str) -> Quantity:
    value = parse_docker_bytes(text)
    assert value is not None
    return Quantity(text=text, bytes=value, location=Location(file=FILE, line=6))


def _pod(
    version: str,
    *options: ServeOption,
    limit: str | None = None,
    shm: str | None = None,
    shm_volume: bool = False,
    host_ipc: bool = False,
    env: dict[str, str] | None = None,
    model: str | None = "meta-llama/Llama-3.1-8B-Instruct",
    shm_size: str | None = None,
    kind: InputKind = "kubernetes",
) -> ServeConfig:
    """A config whose invocation came from a pod (or Compose service) with these resources."""
    mounts: tuple[VolumeMount, ...] = ()
    if shm is not None or shm_volume:
        mounts = (
            VolumeMount(
                mount_path="/dev/shm",
                volume="dshm",
                source="emptyDir",
                medium="Memory",
                size_limit=_quantity(shm) if shm is not None else None,
                location=SHM_MOUNT,
            ),
        )
    resources = ContainerResources(
        memory_limit=_quantity(limit) if limit is not None else None,
        mounts=mounts,
        host_ipc=Location(file=FILE, line=5) if host_ipc else None,
        shm_size=_docker_size(shm_size) if shm_size is not None else None,
    )
    cfg = config(version, *options, env=env, model=model)
    invocation = msgspec.structs.replace(cfg.invocation, kind=kind, resources=resources)
    return msgspec.structs.replace(cfg, invocation=invocation)


# -- SZ012 ----------------------------------------------------------------------------


def test_native_tier_over_the_memory_limit_is_an_error() -> None:
    cfg = _pod("0.32.0", opt("--kv-offloading-size", "100"), TP2, limit="64Gi", shm="128Gi")
    finding = only(run(cfg), "SZ012")
    assert finding.severity.value == "error" and finding.flag == "--kv-offloading-size"
    assert finding.evidence["tier_gib"] == 100 and finding.evidence["limit_gib"] == 64


def test_tier_plus_worker_overhead_over_the_limit_is_a_warning() -> None:
    # 120 GiB + 2 workers x 3 GiB = 126 GiB > 124 GiB; 126Gi fits.
    size = opt("--kv-offloading-size", "120")
    finding = only(run(_pod("0.32.0", size, TP2, limit="124Gi", shm="128Gi")), "SZ012")
    assert finding.severity.value == "warning" and finding.evidence["overhead_gib"] == 6
    assert "SZ012" not in codes(run(_pod("0.32.0", size, TP2, limit="126Gi", shm="128Gi")))


def test_the_limit_counts_the_pinned_rounding_before_0_27() -> None:
    # 0.26.0 pins each rank's 40 GiB share as 64 GiB (SZ011): 128 GiB in a 100Gi container.
    cfg = _pod("0.26.0", opt("--kv-offloading-size", "80"), TP2, limit="100Gi")
    finding = only(run(cfg), "SZ012")
    assert finding.severity.value == "error" and finding.evidence["tier_gib"] == 128
    assert "next power of two" in finding.message


def test_in_process_lmcache_cpu_size_is_per_rank_and_cpu_bytes_to_use_counts() -> None:
    lmcache = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    env = {"LMCACHE_MAX_LOCAL_CPU_SIZE": "40"}
    finding = only(run(_pod("0.32.0", lmcache, TP2, limit="64Gi", env=env)), "SZ012")
    assert finding.evidence["tier_gib"] == 80 and finding.flag == "LMCACHE_MAX_LOCAL_CPU_SIZE"
    assert "SZ012" not in codes(run(_pod("0.32.0", lmcache, TP2, limit="100Gi", env=env)))
    no_cpu = {**env, "LMCACHE_LOCAL_CPU": "False"}
    assert "SZ012" not in codes(run(_pod("0.32.0", lmcache, TP2, limit="64Gi", env=no_cpu)))
    native = ktc(
        kv_connector="OffloadingConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"cpu_bytes_to_use": 48 << 30},
    )
    finding = only(run(_pod("0.32.0", native, limit="32Gi", shm="64Gi")), "SZ012")
    assert finding.flag == "cpu_bytes_to_use" and finding.evidence["tier_gib"] == 48


def test_no_limit_or_no_pod_is_quiet() -> None:
    size = opt("--kv-offloading-size", "100")
    assert "SZ012" not in codes(run(_pod("0.32.0", size, shm="128Gi")))
    assert "SZ012" not in codes(run(config("0.32.0", size)))


# -- SZ013 ----------------------------------------------------------------------------


def test_native_tier_in_the_default_dev_shm_refuses_to_start_from_0_27() -> None:
    size = opt("--kv-offloading-size", "64")
    finding = only(run(_pod("0.32.0", size, limit="200Gi")), "SZ013")
    assert finding.severity.value == "error" and "Insufficient space" in finding.message
    assert "64 MiB" in finding.message
    # A Memory emptyDir at /dev/shm that holds the tier, or hostIPC, is quiet.
    assert "SZ013" not in codes(run(_pod("0.32.0", size, limit="200Gi", shm="65Gi")))
    assert "SZ013" not in codes(run(_pod("0.32.0", size, limit="200Gi", host_ipc=True)))
    assert "SZ013" not in codes(run(_pod("0.32.0", size, limit="200Gi", shm_volume=True)))
    # Before 0.27.0 the tier is pinned tensors, not a /dev/shm file.
    assert "SZ013" not in codes(run(_pod("0.26.0", size, limit="200Gi")))


def test_a_sizelimit_smaller_than_the_tier_fires() -> None:
    finding = only(run(_pod("0.32.0", opt("--kv-offloading-size", "64"), shm="32Gi")), "SZ013")
    assert "sizeLimit: 32Gi" in finding.message


def test_lmcache_local_disk_under_dev_shm_needs_room_there() -> None:
    lmcache = ktc(kv_connector="LMCacheConnectorV1", kv_role="kv_both")
    env = {"LMCACHE_LOCAL_DISK": "file:///dev/shm/lmcache/", "LMCACHE_MAX_LOCAL_DISK_SIZE": "20"}
    finding = only(run(_pod("0.32.0", lmcache, TP2, env=env, shm="32Gi")), "SZ013")
    assert finding.evidence["tier_gib"] == 40 and finding.flag == "LMCACHE_MAX_LOCAL_DISK_SIZE"
    assert "SZ013" not in codes(run(_pod("0.32.0", lmcache, TP2, env=env, shm="40Gi")))
    on_disk = {**env, "LMCACHE_LOCAL_DISK": "file:///mnt/nvme/lmcache/"}
    assert "SZ013" not in codes(run(_pod("0.32.0", lmcache, TP2, env=on_disk, shm="1Gi")))


# -- SZ014 ----------------------------------------------------------------------------


def test_tensor_parallel_with_the_default_dev_shm() -> None:
    finding = only(run(_pod("0.32.0", TP2)), "SZ014")
    assert finding.severity.value == "error" and "160 MiB" in finding.message
    assert "240 MiB" in finding.message
    # Before the fail-fast check (proven from the wheels: 0.27.0) it starts, and can die
    # under load: a warning.
    checked_from = premise_records()["shm.ring_buffer_free_space_checked"].since
    assert checked_from is not None
    unchecked = release_index().versions[release_index().versions.index(checked_from) - 1]
    assert only(run(_pod(checked_from, TP2)), "SZ014").severity.value == "error"
    assert only(run(_pod(unchecked, TP2)), "SZ014").severity.value == "warning"
    assert "SZ014" not in codes(run(_pod("0.32.0", TP2, shm="2Gi")))
    # Sized, but below one worker's 240 MiB response queue: 0.32 refuses it too.
    small = only(run(_pod("0.32.0", TP2, shm="128Mi")), "SZ014")
    assert small.severity.value == "error" and "sizeLimit: 128Mi" in small.message
    assert only(run(_pod("0.32.0", TP2, shm="240Mi")), "SZ014")  # + metadata: still short
    assert "SZ014" not in codes(run(_pod("0.32.0", TP2, shm="256Mi")))
    assert "SZ014" not in codes(run(_pod(unchecked, TP2, shm="128Mi")))  # no check there
    assert "SZ014" not in codes(run(_pod("0.32.0", TP2, host_ipc=True)))
    assert "SZ014" not in codes(run(_pod("0.32.0")))  # one worker: no queues between workers
    assert "SZ014" not in codes(run(config("0.32.0", TP2)))  # not a pod


def test_an_autostarted_lmcache_server_counts_in_the_container() -> None:
    # The MP connector runs `lmcache server` as a child of the engine with server_args
    # appended (LMCache lmcache/integration/vllm/mp_server_launcher.py): its L1 is memory
    # of this container.
    extra = {"lmcache.mp.autostart": True, "lmcache.mp.autostart.server_args": "--l1-size-gb 60"}
    mp = ktc(kv_connector="LMCacheMPConnector", kv_role="kv_both", kv_connector_extra_config=extra)
    finding = only(run(_pod("0.32.0", mp, limit="48Gi")), "SZ012")
    assert finding.evidence["tier_gib"] == 60 and "auto-started server" in finding.message
    # A server elsewhere (no autostart) is not in this container.
    remote = ktc(
        kv_connector="LMCacheMPConnector",
        kv_role="kv_both",
        kv_connector_extra_config={"lmcache.mp.autostart.server_args": "--l1-size-gb 60"},
    )
    assert "SZ012" not in codes(run(_pod("0.32.0", remote, limit="48Gi")))


def test_compose_shm_size_holds_or_misses_the_tier() -> None:
    size = opt("--kv-offloading-size", "64")
    small = _pod("0.32.0", size, shm_size="16gb", kind="compose")
    finding = only(run(small), "SZ013")
    assert "a /dev/shm of 16gb" in finding.message
    assert "`shm_size` or `ipc: host`" in finding.message
    assert "SZ013" not in codes(run(_pod("0.32.0", size, shm_size="80gb", kind="compose")))
    # shm_size set on purpose: SZ014 leaves the size to SZ013.
    assert "SZ014" not in codes(run(_pod("0.32.0", TP2, shm_size="1g", kind="compose")))
    finding = only(run(_pod("0.32.0", TP2, kind="compose")), "SZ014")
    assert "`shm_size` or `ipc: host`" in finding.message


def test_simple_cpu_offload_sizes_count_per_rank_or_total() -> None:
    # SimpleCPUOffloadConnector: cpu_bytes_to_use is server-wide, cpu_bytes_to_use_per_rank
    # wins over it (vllm v0.32.0 distributed/kv_transfer/kv_connector/v1/
    # simple_cpu_offload_connector.py); neither lives in /dev/shm.
    def simple(**extra: int) -> ServeOption:
        return ktc(
            kv_connector="SimpleCPUOffloadConnector",
            kv_role="kv_both",
            kv_connector_extra_config=extra,
        )

    per_rank = simple(cpu_bytes_to_use=8 << 30, cpu_bytes_to_use_per_rank=40 << 30)
    finding = only(run(_pod("0.32.0", per_rank, TP2, limit="64Gi", shm="1Gi")), "SZ012")
    assert finding.evidence["tier_gib"] == 80 and finding.flag == "cpu_bytes_to_use_per_rank"
    total = simple(cpu_bytes_to_use=40 << 30)
    assert "SZ012" not in codes(run(_pod("0.32.0", total, TP2, limit="64Gi", shm="1Gi")))
    assert "SZ013" not in codes(run(_pod("0.32.0", per_rank, TP2, limit="100Gi", shm="1Gi")))


E2E_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: offload}
spec:
  template:
    spec:
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: ["vllm", "serve", "Qwen/Qwen3-8B", "-tp", "2", "--kv-offloading-size", "120"]
          resources:
            limits: {memory: 124Gi}
"""
# The same pod, sized as vLLM's Kubernetes guide sizes /dev/shm (an emptyDir, medium Memory).
E2E_SIZED = E2E_DEPLOYMENT.replace("memory: 124Gi", "memory: 140Gi") + """\
          volumeMounts: [{name: shm, mountPath: /dev/shm}]
      volumes:
        - name: shm
          emptyDir: {medium: Memory, sizeLimit: 130Gi}
"""


def test_a_deployment_end_to_end(kvtool_cli: Cli, tmp_path: Path) -> None:
    def findings(text: str) -> dict[str, dict[str, object]]:
        path = tmp_path / "deploy.yaml"
        path.write_text(text)
        result = kvtool_cli(
            "audit", str(path), "--vllm-version", "0.32.0", "--output-format", "json"
        )
        report = json.loads(result.stdout)
        return {f["code"]: f for f in report["findings"] if f["code"] in POD_RULES}

    found = findings(E2E_DEPLOYMENT)
    assert {code: f["severity"] for code, f in found.items()} == {
        "SZ012": "warning",  # 120 + 2 x 3 GiB > 124 GiB
        "SZ013": "error",  # 120 GiB in a 64 MiB /dev/shm
        "SZ014": "error",  # TP 2 on the 64 MiB default
    }
    location = found["SZ012"]["location"]
    command_line = 1 + E2E_DEPLOYMENT.splitlines().index(
        next(line for line in E2E_DEPLOYMENT.splitlines() if "command:" in line)
    )
    assert isinstance(location, dict) and location["line"] == command_line
    assert findings(E2E_SIZED) == {}


def test_kvtool_connector_host_store_counts_against_the_memory_limit_not_dev_shm() -> None:
    # KvtoolConnector keeps kvtool.host_capacity_bytes (engine-wide) in one memfd per host
    # (kvtool/connector/host_arena.py): shmem pages charged to the container's cgroup,
    # outside /dev/shm. Its size parser is the connector's own (kvtool.connector.config).
    def kvtool(**extra: object) -> ServeOption:
        return ktc(kv_connector="KvtoolConnector", kv_role="kv_both",
                   kv_connector_module_path="kvtool.connector.vllm",
                   kv_connector_extra_config=extra)

    big = kvtool(**{"kvtool.host_capacity_bytes": "96GiB"})
    finding = only(run(_pod("0.32.0", big, TP2, limit="64Gi", shm="1Gi")), "SZ012")
    assert finding.severity.value == "error" and finding.evidence["tier_gib"] == 96
    assert finding.flag == "kvtool.host_capacity_bytes"
    assert "SZ013" not in codes(run(_pod("0.32.0", big, TP2, limit="200Gi", shm="1Gi")))
    # The default capacity, from the connector's own config, plus 2 x 3 GiB of workers.
    default = kvtool(**{"kvtool.policy": "fifo"})
    capacity_gib = ConnectorConfig.from_extra_config({}).host_capacity_bytes / (1 << 30)
    limit_gib = int(capacity_gib + 2 * 3) - 1
    warned = only(run(_pod("0.32.0", default, TP2, limit=f"{limit_gib}Gi", shm="1Gi")), "SZ012")
    assert warned.severity.value == "warning" and warned.evidence["tier_gib"] == capacity_gib
    assert "default" in warned.message
    fits = f"{int(capacity_gib + 2 * 3)}Gi"
    assert "SZ012" not in codes(run(_pod("0.32.0", default, TP2, limit=fits, shm="1Gi")))
    # A value the connector refuses is LZ009's, not a size guess here.
    refused = kvtool(**{"kvtool.host_capacity_bytes": "lots"})
    assert "SZ012" not in codes(run(_pod("0.32.0", refused, limit="1Gi", shm="1Gi")))


def _requesting_pod(request: str, *, limit: str | None = None) -> str:
    # A Deployment with a memory request and no limit, the shape of the Kubernetes docs'
    # examples (https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/).
    limits = f"\n            limits: {{memory: {limit}}}" if limit else ""
    return f"""\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: vllm}}
spec:
  template:
    spec:
      hostIPC: true
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.32.0
          command: [vllm, serve, m, --kv-offloading-size, "200"]
          resources:
            requests: {{memory: {request}}}{limits}
"""


def _sz015(text: str) -> list[str]:
    auditor = Auditor(FixedTables("0.32.0"), normalize, AuditSettings(vllm_version="0.32.0"))
    report = auditor.run(read_text(text, "deploy.yaml"))
    return [f.message for f in report.findings if f.code == "SZ015"]


def test_tiers_over_the_request_of_a_pod_without_a_limit_are_a_warning() -> None:
    [message] = _sz015(_requesting_pod("64Gi"))
    # 200 GiB of tier + 3 GiB for the one worker (vLLM PR #48436's measured overhead).
    assert "203 GiB" in message and "64Gi" in message
    assert _sz015(_requesting_pod("256Gi")) == []
    # With a limit the memory limit decides (SZ012), not the request.
    assert _sz015(_requesting_pod("64Gi", limit="256Gi")) == []
