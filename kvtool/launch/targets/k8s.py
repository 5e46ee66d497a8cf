"""``--target k8s``: Kubernetes manifests (multi-document YAML).

One Deployment and one Service per engine. A sidecar (the LMCache server) is a native
sidecar: an init container with ``restartPolicy: Always`` and a startup probe, so the
engine starts only once the server answers; this needs Kubernetes 1.29 or newer (on by
default there; GA in 1.33). Probes follow KAITO's engine probes: a startup probe on
``/health`` allowing 30 minutes for weights to load, then liveness and readiness.
Containers that pin host memory request and limit memory per the LMCache operator
design. The KAITO recipe renders KAITO's ConfigMap and a Workspace instead.
"""

from __future__ import annotations

from typing import Any

from kvtool.launch.plan import LaunchPlan, Process
from kvtool.launch.targets.header import header_lines
from kvtool.launch.targets.names import check_object_name
from kvtool.launch.targets.yamltext import dump, dump_all

FILE_NAME = "manifests.yaml"
MIN_KUBERNETES = "1.29"
PROBE_PERIOD_S = 10
STARTUP_BUDGET_S = 30 * 60  # KAITO's default startup timeout for engines
KAITO_CONFIGMAP = "inference-params"


def _labels(plan: LaunchPlan, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": plan.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "kvtool",
    }


def _probe(process: Process, port_name: str) -> dict[str, Any]:
    return {
        "httpGet": {"path": process.health_path, "port": port_name},
        "periodSeconds": PROBE_PERIOD_S,
    }


def _env(process: Process) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in process.env]
    env += [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
        for name in process.pod_ip_env
    ]
    return env


def _resources(process: Process) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if process.gpus:
        limits["nvidia.com/gpu"] = process.gpus
    if process.memory_request_gib is not None and process.memory_limit_gib is not None:
        requests["memory"] = f"{process.memory_request_gib}Gi"
        limits["memory"] = f"{process.memory_limit_gib}Gi"
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    return resources


def _container(plan: LaunchPlan, process: Process, volumes: list[str]) -> dict[str, Any]:
    port_name = "http"
    container: dict[str, Any] = {
        "name": process.name,
        "image": plan.image,
        "command": list(process.command),
        "args": list(process.args),
    }
    env = _env(process)
    if process.kind != "vllm":
        # The server copies KV out of the engine's GPU memory (CUDA IPC), so it must see
        # the GPUs the engine was given without requesting devices of its own.
        env.append({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"})
    if env:
        container["env"] = env
    ports = [{"name": port_name, "containerPort": process.port}]
    ports += [{"name": name, "containerPort": port} for name, port in process.ports.items()]
    container["ports"] = ports
    resources = _resources(process)
    if resources:
        container["resources"] = resources
    startup = _probe(process, port_name)
    budget = STARTUP_BUDGET_S if process.kind == "vllm" else 5 * 60
    startup["failureThreshold"] = budget // PROBE_PERIOD_S
    container["startupProbe"] = startup
    container["livenessProbe"] = {**_probe(process, port_name), "failureThreshold": 3}
    if process.kind == "vllm":
        container["readinessProbe"] = _probe(process, port_name)
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    mounts += [
        {"name": name, "mountPath": path}
        for name, path in zip(volumes, process.host_paths, strict=True)
    ]
    container["volumeMounts"] = mounts
    return container


def _deployment(plan: LaunchPlan, engine: Process, sidecars: tuple[Process, ...]) -> dict[str, Any]:
    component = engine.name
    name = plan.name if component == "vllm" else f"{plan.name}-{component}"
    labels = _labels(plan, component)
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    containers = []
    for process in (*sidecars, engine):
        names = [f"{process.name}-path-{i}" for i in range(len(process.host_paths))]
        volumes += [
            {"name": vol, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
            for vol, path in zip(names, process.host_paths, strict=True)
        ]
        container = _container(plan, process, names)
        if process.kind != "vllm":
            container["restartPolicy"] = "Always"
        containers.append(container)
    pod_spec: dict[str, Any] = {}
    init = [c for c in containers if c.get("restartPolicy") == "Always"]
    if init:
        pod_spec["initContainers"] = init
    pod_spec["containers"] = [c for c in containers if c.get("restartPolicy") != "Always"]
    pod_spec["volumes"] = volumes
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }


def _service(deployment: dict[str, Any], engine: Process) -> dict[str, Any]:
    meta = deployment["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": meta["name"], "labels": meta["labels"]},
        "spec": {
            "selector": meta["labels"],
            "ports": [{"name": "http", "port": engine.port, "targetPort": "http"}],
        },
    }


def _kaito(plan: LaunchPlan) -> list[dict[str, Any]]:
    assert plan.kaito is not None
    # KAITO reads its own keys at the top level and passes the ``vllm:`` keys to vLLM
    # as flags; the section is present even when empty so the file is recognisably
    # KAITO's inference config.
    config = dump(
        {"vllm": plan.kaito.vllm_flags, "kv_cache_cpu_memory_utilization": plan.kaito.utilization}
    )
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": KAITO_CONFIGMAP, "labels": _labels(plan, "inference-config")},
        "data": {"inference_config.yaml": config},
    }
    workspace = {
        "apiVersion": "kaito.sh/v1beta1",
        "kind": "Workspace",
        "metadata": {"name": plan.name},
        "resource": {"labelSelector": {"matchLabels": {"apps": plan.name}}},
        "inference": {"preset": {"name": plan.kaito.preset}, "config": KAITO_CONFIGMAP},
    }
    return [configmap, workspace]


def build(plan: LaunchPlan) -> list[dict[str, Any]]:
    """The manifests, in apply order."""
    if plan.kaito is not None:
        return _kaito(plan)
    documents: list[dict[str, Any]] = []
    for engine in plan.engines:
        deployment = _deployment(plan, engine, plan.sidecars)
        documents += [deployment, _service(deployment, engine)]
    return documents


def render(plan: LaunchPlan) -> dict[str, str]:
    check_object_name(plan.name, "--name")
    header = header_lines(plan, "k8s", f"needs Kubernetes >= {MIN_KUBERNETES}.")
    return {FILE_NAME: "\n".join(header) + "\n" + dump_all(build(plan))}
